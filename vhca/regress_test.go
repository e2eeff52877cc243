package vhca

import (
	"errors"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// Regression tests of what a review of the engine found: each failed (or
// panicked) before its fix.

// Lowering max_dest_rd_atomic in SQD keeps the responder's next resource
// slot inside the smaller table: the next READ is answered, no panic.
func TestResizeResponderResources(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	connectWith(t, a, b, defaultConn())
	s := newXSim(t, da, db)
	for i := range 5 {
		postSend(t, a, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(0, 8), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	}
	s.must(1e9, "reads", func() bool { return a.scq.Len() == 5 })
	drain(a.scq)
	if err := db.ModifyQP(b.qp, &QPAttr{State: QPStateSQD}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := db.ModifyQP(b.qp, &QPAttr{MaxDestRdAtomic: 2}, QPAttrMaxDestRdAtomic); err != nil {
		t.Fatal(err)
	}
	if b.qp.resp.resNext >= len(b.qp.resp.res) {
		t.Fatalf("next resource slot %d of %d", b.qp.resp.resNext, len(b.qp.resp.res))
	}
	postSend(t, a, SendWR{WRID: 9, Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(0, 8), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s.must(1e9, "read after resize", func() bool { return a.scq.Len() == 1 })
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{9, WCSuccess}}) {
		t.Fatalf("completions %+v", got)
	}
}

// Moving a QP to a port whose P_Key table is too short for its P_Key
// index is refused, and leaves the QP where it was.
func TestPortChangeChecksPKeyIndex(t *testing.T) {
	d, err := NewDevice(Config{Name: "x", NodeGUID: 1, Seed: 1, Ports: []PortConfig{
		{LinkLayer: LinkLayerInfiniBand, LID: 1, PKeys: []uint16{0xFFFF, 0x8001, 0x8002}},
		{LinkLayer: LinkLayerInfiniBand, LID: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	qp, err := d.CreateQP(pd, QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ModifyQP(qp, &QPAttr{State: QPStateInit, Port: 1, PKeyIndex: 2}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := d.ModifyQP(qp, &QPAttr{Port: 2}, QPAttrPort); !errors.Is(err, ErrInvalid) {
		t.Fatalf("moving to a port without P_Key index 2: %v, want ErrInvalid", err)
	}
	if a, _ := d.QueryQP(qp); a.Port != 1 || a.PKeyIndex != 2 {
		t.Fatalf("QP now on port %d index %d", a.Port, a.PKeyIndex)
	}
	if err := d.ModifyQP(qp, &QPAttr{Port: 2, PKeyIndex: 0}, QPAttrPort|QPAttrPKeyIndex); err != nil {
		t.Fatalf("moving with a fitting index: %v", err)
	}
}

// A READ whose region is deregistered while its response waits behind
// other responses: the NAK carries the READ's PSN and goes out before
// them, so the requester completes the READ with REM_ACCESS_ERR.
func TestReadRegionGoneNAKsItsPSN(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.RetryCnt = 2
	connectWith(t, a, b, c)
	mem2 := make([]byte, 8192)
	mr2, err := db.RegMR(b.pd, SliceMemory(mem2), 0x900000, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(0, 3000), RemoteAddr: 0x900000, RKey: mr2.Key},
		SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(4096, 100), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s := newXSim(t, da, db)
	s.delivered = func(to int, p *wire.Packet) {
		if to == 1 && p.Info.Operation == wire.OpRDMAWrite && mr2 != nil {
			db.DeregMR(mr2) // both requests executed, no response sent yet
			mr2 = nil
		}
	}
	s.must(1e10, "completions", func() bool { return a.scq.Len() >= 2 })
	want := []wcSummary{{1, WCRemAccessErr}, {2, WCWRFlushErr}}
	if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
		t.Fatalf("completions %+v, want %+v", got, want)
	}
	naks := s.sentBy(1, wire.RCAcknowledge)
	if len(naks) != 1 || naks[0].PSN != c.PSNA || naks[0].Syn != wire.NAKSyndrome(wire.NAKRemoteAccessError) {
		t.Fatalf("responses %+v, want one remote access NAK of PSN %d", naks, c.PSNA)
	}
}

// Work queue indices wrap at 2^32 without two WQEs sharing a slot, whatever
// the queue's size.
func TestWorkQueueIndexWrap(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	mk := func(d *Device, n byte) *endpoint {
		e := &endpoint{d: d, n: n}
		e.pd, _ = d.AllocPD()
		e.scq, _ = d.CreateCQ(64)
		e.rcq, _ = d.CreateCQ(64)
		var err error
		e.qp, err = d.CreateQP(e.pd, QPInitAttr{Type: QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq,
			Cap: QPCap{MaxSendWR: 3, MaxRecvWR: 3, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		e.mem = make([]byte, 1<<16)
		e.mr, _ = d.RegMR(e.pd, SliceMemory(e.mem), 0x10000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
		return e
	}
	a, b := mk(da, 1), mk(db, 2)
	connectWith(t, a, b, defaultConn())
	const near = ^uint32(0) - 1 // two posts before the wrap
	a.qp.sqHead, a.qp.sqNext, a.qp.sqTail = near, near, near
	b.qp.rq.head, b.qp.rq.tail = near, near
	postRecv(t, b, RecvWR{WRID: 101, SGL: b.sge(0, 64)}, RecvWR{WRID: 102, SGL: b.sge(64, 64)}, RecvWR{WRID: 103, SGL: b.sge(128, 64)})
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 8)},
		SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 8)},
		SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 8)})
	s := newXSim(t, da, db)
	s.must(1e8, "sends", func() bool { return a.scq.Len() >= 3 && b.rcq.Len() >= 3 })
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCSuccess}, {2, WCSuccess}, {3, WCSuccess}}) {
		t.Fatalf("send completions %+v", got)
	}
	if got := summarize(drain(b.rcq)); !equalSummaries(got, []wcSummary{{101, WCSuccess}, {102, WCSuccess}, {103, WCSuccess}}) {
		t.Fatalf("receive completions %+v", got)
	}
}

// Verbs on destroyed objects fail and change nothing.
func TestVerbsOnDestroyedObjects(t *testing.T) {
	da, _, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	connectWith(t, a, b, defaultConn())
	if err := da.DestroyQP(a.qp); err != nil {
		t.Fatal(err)
	}
	if _, err := da.PostSend(a.qp, []SendWR{{WRID: 1, Opcode: WRRDMAWrite, SGL: a.sge(0, 8), RemoteAddr: b.addr(0), RKey: b.mr.Key}}); !errors.Is(err, ErrNoSuchObject) {
		t.Fatalf("PostSend on a destroyed QP: %v", err)
	}
	if _, err := da.PostRecv(a.qp, []RecvWR{{WRID: 1}}); !errors.Is(err, ErrNoSuchObject) {
		t.Fatalf("PostRecv on a destroyed QP: %v", err)
	}
	if n, _ := da.Transmit(10, make([]byte, 9000)); n != 0 {
		t.Fatalf("a destroyed QP sent %d bytes", n)
	}
	d := testDevice(t, 3)
	pd, _ := d.AllocPD()
	if _, err := d.RegMR(pd, SliceMemory(make([]byte, 64)), 0, AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	srq, _ := d.CreateSRQ(pd, SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err := d.DestroySRQ(srq); err != nil {
		t.Fatal(err)
	}
	if err := d.DestroySRQ(srq); !errors.Is(err, ErrNoSuchObject) {
		t.Fatalf("second DestroySRQ: %v", err)
	}
	if _, err := d.PostSRQRecv(srq, []RecvWR{{WRID: 1}}); !errors.Is(err, ErrNoSuchObject) {
		t.Fatalf("PostSRQRecv on a destroyed SRQ: %v", err)
	}
	if err := d.DeallocPD(pd); !errors.Is(err, ErrBusy) {
		t.Fatalf("DeallocPD with a live MR: %v", err)
	}
}

// The atomic and UD receive paths allocate nothing per packet.
func TestAtomicAndUDPathsDoNotAllocate(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeUD, 1<<16, 1<<16)
	udEndpoint(t, a, 5)
	udEndpoint(t, b, 5)
	ah := udAH(t, a, b)
	buf := make([]byte, 9000)
	postSend(t, a, SendWR{WRID: 1, Opcode: WRSend, SGL: a.sge(0, 64), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 5})
	n, _ := da.Transmit(10, buf)
	frame := append([]byte(nil), buf[:n]...)
	f := make([]byte, len(frame))
	rwr := []RecvWR{{WRID: 2, SGL: b.sge(0, 256)}}
	wcs := make([]WC, 4)
	if allocs := testing.AllocsPerRun(1000, func() {
		db.PostRecv(b.qp, rwr)
		copy(f, frame)
		db.Receive(10, 1, f)
		if b.rcq.Poll(wcs) != 1 || wcs[0].Status != WCSuccess {
			t.Fatalf("UD receive %+v", wcs[0])
		}
	}); allocs != 0 {
		t.Errorf("UD receive: %.1f allocations a datagram", allocs)
	}
	da, db, x, y := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	connectWith(t, x, y, defaultConn())
	swr := []SendWR{{WRID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: x.sge(0, 8), RemoteAddr: y.addr(0), RKey: y.mr.Key, CompareAdd: 1}}
	if allocs := testing.AllocsPerRun(1000, func() {
		da.PostSend(x.qp, swr)
		pump(10, da, db, buf)
		if x.scq.Poll(wcs) != 1 || wcs[0].Status != WCSuccess {
			t.Fatalf("atomic %+v", wcs[0])
		}
	}); allocs != 0 {
		t.Errorf("atomic round trip: %.1f allocations", allocs)
	}
}

// The requester keeps at most maxUnackedPSNs PSNs unacknowledged.
func TestUnackedPSNWindow(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	connectWith(t, a, b, defaultConn())
	var wrs []SendWR
	for i := range 1000 {
		wrs = append(wrs, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: a.sge(0, 64), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	}
	postSend(t, a, wrs...)
	s := newXSim(t, da, db)
	s.filter = func(from int, p *wire.Packet) []Time {
		if from == 1 {
			return nil // no response ever arrives
		}
		return deliverOnce
	}
	s.run(1e6, nil) // well before the first ACK timeout
	if n := len(s.sentBy(0)); n != maxUnackedPSNs {
		t.Fatalf("%d packets out with nothing acknowledged, want %d", n, maxUnackedPSNs)
	}
}

// A connected QP drops packets from anyone but its peer, and counts them.
func TestConnectedQPHearsOnlyItsPeer(t *testing.T) {
	_, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	connectWith(t, a, b, defaultConn()) // b is connected to a (192.0.2.1)
	dc := testDevice(t, 3)              // 192.0.2.3
	c := newEndpoint(t, dc, QPTypeRC, 1<<16, 3)
	for _, st := range []struct {
		attr QPAttr
		mask QPAttrMask
	}{
		{QPAttr{State: QPStateInit, Port: 1}, QPAttrState | QPAttrPort | QPAttrPKeyIndex | QPAttrAccessFlags},
		{QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPN: b.qp.Num, RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AV: AV{Port: 1, IsGlobal: true, DMAC: db.Ports[0].MAC, GRH: GlobalRoute{DGID: db.Ports[0].GIDs[0].GID}}},
			QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer},
		{QPAttr{State: QPStateRTS, SQPSN: b.qp.resp.epsn, Timeout: 14, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 1},
			QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic},
	} {
		if err := dc.ModifyQP(c.qp, &st.attr, st.mask); err != nil {
			t.Fatal(err)
		}
	}
	copy(c.mem, "intruder")
	postSend(t, c, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: c.sge(0, 8), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s := newXSim(t, dc, db)
	s.run(1e8, func() bool { return c.scq.Len() > 0 })
	if string(b.mem[:8]) == "intruder" {
		t.Fatal("a third host wrote into the connection")
	}
	if db.Ports[0].Counters.RcvAddrDrops == 0 {
		t.Fatal("the intruder's packets were not counted")
	}
}

// Timers cost nothing for idle QPs: Deadline and Advance look only at the
// QPs with a timer armed, and a QP leaves that list when its timers stop.
func TestIdleQPsAreNotScanned(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	connectWith(t, a, b, defaultConn())
	pd, _ := da.AllocPD()
	cq, _ := da.CreateCQ(16)
	for range 1000 {
		if _, err := da.CreateQP(pd, QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(da.timed) != 0 || da.Deadline() != 0 {
		t.Fatalf("%d QPs watched before any traffic", len(da.timed))
	}
	postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 8), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	buf := make([]byte, 9000)
	n, _ := da.Transmit(10, buf)
	if n == 0 || len(da.timed) != 1 || da.Deadline() == 0 {
		t.Fatalf("after a request: %d watched, deadline %d", len(da.timed), da.Deadline())
	}
	db.Receive(10, 1, buf[:n])
	m, _ := db.Transmit(10, buf)
	da.Receive(11, 1, buf[:m])
	da.Advance(12)
	if a.scq.Len() != 1 || len(da.timed) != 0 || da.Deadline() != 0 {
		t.Fatalf("after the ACK: %d completions, %d watched, deadline %d", a.scq.Len(), len(da.timed), da.Deadline())
	}
}

// A late duplicate of a completed READ queues an answer; the requester's
// next READs then fill the responder's resources. The answer to the
// completed READ gives way (its resource is the oldest), and the new READs
// are served: no invalid-request NAK, both QPs stay in RTS. (The 10^6
// message stress run found this.)
func TestLateDuplicateReadGivesWay(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.MaxRdAtomic, c.MaxDestRdAtomic = 2, 2
	connectWith(t, a, b, c)
	buf := make([]byte, 9000)
	read := func(id uint64) SendWR {
		return SendWR{WRID: id, Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(0, 64), RemoteAddr: b.addr(0), RKey: b.mr.Key}
	}
	postSend(t, a, read(1))
	n, _ := da.Transmit(1, buf)
	r1 := append([]byte(nil), buf[:n]...)
	db.Receive(1, 1, r1)
	pump(1, da, db, buf)
	wcs := drain(a.scq)
	if len(wcs) != 1 || wcs[0].Status != WCSuccess {
		t.Fatalf("first READ %+v", wcs)
	}
	db.Receive(2, 1, r1) // the late duplicate: its answer waits in the queue
	postSend(t, a, read(2), read(3))
	for range 2 {
		n, _ := da.Transmit(3, buf)
		db.Receive(3, 1, buf[:n])
	}
	pump(4, da, db, buf)
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{2, WCSuccess}, {3, WCSuccess}}) {
		t.Fatalf("completions %+v", got)
	}
	if a.qp.State() != QPStateRTS || b.qp.State() != QPStateRTS {
		t.Fatalf("states %s %s", a.qp.State(), b.qp.State())
	}
}
