package vhca

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// qpSnapshot is what a refused ModifyQP must leave unchanged: the verbs'
// view and the engine's own copies of the attributes.
type qpSnapshot struct {
	attr      QPAttr
	init      QPInitAttr
	state     QPState
	mtu       int
	epsn, psn uint32
	port      *Port
	hdr       wire.Headers
}

func snapshotQP(d *Device, qp *QP) qpSnapshot {
	a, i := d.QueryQP(qp)
	return qpSnapshot{attr: a, init: i, state: qp.State(), mtu: qp.mtu, epsn: qp.resp.epsn, psn: qp.req.psn, port: qp.port, hdr: qp.hdr}
}

// TestModifyQPRefusedLeavesQPUnchanged: a ModifyQP that misses a required
// attribute, names one the transition does not take, gives an attribute
// out of range or the wrong current state fails (a *TransitionError for
// the first two, ErrInvalid for all) and changes nothing.
func TestModifyQPRefusedLeavesQPUnchanged(t *testing.T) {
	d := testDevice(t, 1)
	e := newEndpoint(t, d, QPTypeRC, 4096, 1)
	peer := testDevice(t, 2)
	av := AV{Port: 1, IsGlobal: true, DMAC: peer.Ports[0].MAC, GRH: GlobalRoute{DGID: peer.Ports[0].GIDs[0].GID, HopLimit: 64}}
	rtr := QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPN: 77, RQPSN: 1234, MaxDestRdAtomic: 4, MinRNRTimer: 12, AV: av}
	rtrMask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer

	refuse := func(name string, attr QPAttr, mask QPAttrMask, wantMissing, wantExtra QPAttrMask) {
		t.Helper()
		before := snapshotQP(d, e.qp)
		err := d.ModifyQP(e.qp, &attr, mask)
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", name, err)
		}
		var te *TransitionError
		if wantMissing|wantExtra != 0 {
			if !errors.As(err, &te) {
				t.Fatalf("%s: %v (%T) is not a *TransitionError", name, err, err)
			}
			if te.Missing != wantMissing || te.Extra != wantExtra || te.From != before.state {
				t.Errorf("%s: %+v, want missing %s, extra %s, from %s", name, te, wantMissing, wantExtra, before.state)
			}
		}
		if after := snapshotQP(d, e.qp); after != before {
			t.Errorf("%s: the QP changed:\n before %+v\n after  %+v", name, before, after)
		}
	}

	// Reset->Init without the access flags.
	refuse("Reset->Init without access flags", QPAttr{State: QPStateInit, Port: 1, AccessFlags: AccessRemoteRead},
		QPAttrState|QPAttrPKeyIndex|QPAttrPort, QPAttrAccessFlags, 0)
	if err := d.ModifyQP(e.qp, &QPAttr{State: QPStateInit, Port: 1, AccessFlags: AccessRemoteWrite}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	// Init->RTR without the destination QP, then without the RNR timer.
	refuse("Init->RTR without dest QPN", rtr, rtrMask&^QPAttrDestQPN, QPAttrDestQPN, 0)
	refuse("Init->RTR without min RNR timer", rtr, rtrMask&^QPAttrMinRNRTimer, QPAttrMinRNRTimer, 0)
	// Init->RTR with an attribute the transition does not take.
	bad := rtr
	bad.SQPSN = 5
	refuse("Init->RTR with SQ PSN", bad, rtrMask|QPAttrSQPSN, 0, QPAttrSQPSN)
	// Every attribute there, one out of range: nothing of the others
	// may have been applied.
	bad = rtr
	bad.PathMTU = 7
	refuse("Init->RTR with path MTU 7", bad, rtrMask, 0, 0)
	bad = rtr
	bad.RQPSN = 1 << 24
	refuse("Init->RTR with RQ PSN 2^24", bad, rtrMask, 0, 0)
	bad = rtr
	bad.CurState = QPStateRTS
	refuse("Init->RTR with a wrong current state", bad, rtrMask|QPAttrCurState, 0, 0)

	if err := d.ModifyQP(e.qp, &rtr, rtrMask); err != nil {
		t.Fatal(err)
	}
	rts := QPAttr{State: QPStateRTS, SQPSN: 99, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
	rtsMask := QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	refuse("RTR->RTS without retry count", rts, rtsMask&^QPAttrRetryCnt, QPAttrRetryCnt, 0)
	bad = rts
	bad.Timeout = 32
	refuse("RTR->RTS with timeout 32", bad, rtsMask, 0, 0)
	if err := d.ModifyQP(e.qp, &rts, rtsMask); err != nil {
		t.Fatal(err)
	}
	// RTS->RTS: the path MTU is frozen.
	refuse("RTS->RTS with path MTU", QPAttr{State: QPStateRTS, PathMTU: MTU256}, QPAttrState|QPAttrPathMTU, 0, QPAttrPathMTU)
	refuse("RTS->Init", QPAttr{State: QPStateInit}, QPAttrState, 0, 0)

	a, _ := d.QueryQP(e.qp)
	if a.State != QPStateRTS || a.DestQPN != 77 || a.RQPSN != 1234 || a.SQPSN != 99 || a.PathMTU != MTU1024 || a.MinRNRTimer != 12 || a.AccessFlags != AccessRemoteWrite {
		t.Errorf("attributes after the accepted modifies: %+v", a)
	}
}

// TestSQDDrainThenResume: RTS->SQD with EnSQDAsyncNotify while a long
// WRITE is half sent: the WQE already begun is finished, none is started,
// EventSQDrained is raised once, when every begun WQE is acknowledged;
// WRs posted meanwhile wait, and SQD->RTS sends them.
func TestSQDDrainThenResume(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<17, 1<<17)
	c := defaultConn()
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	for i := range 64 << 10 {
		a.mem[i] = byte(i*3 + 7)
	}
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 40<<10), RemoteAddr: b.addr(0), RKey: b.mr.Key},
		SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(64 << 10), RKey: b.mr.Key})
	// One instant: 32 of the 40 packets leave.
	s.run(1, func() bool { return len(s.sent) > 0 })
	if a.qp.req.offset == 0 || len(s.sent) >= 40 {
		t.Fatalf("the first WRITE is not half sent: offset %d, %d packets", a.qp.req.offset, len(s.sent))
	}
	if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateSQD, EnSQDAsyncNotify: true}, QPAttrState|QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	if q, _ := da.QueryQP(a.qp); q.State != QPStateSQD {
		t.Errorf("after RTS->SQD: state %s", q.State)
	}
	// (QueryQP's SQDraining here: TestQuerySQDrainingHalfSentWQE.)
	if ev := drainEvents(da); len(ev) != 0 {
		t.Fatalf("events at once: %+v", ev)
	}
	postSend(t, a, SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 200), RemoteAddr: b.addr(65 << 10), RKey: b.mr.Key})
	var drained []Event
	var atDrain []WC
	s.must(1e9, "SQ drained", func() bool {
		for _, e := range drainEvents(da) {
			if e.Type != EventSQDrained {
				t.Fatalf("event %+v", e)
			}
			drained = append(drained, e)
			atDrain = drain(a.scq)
		}
		return len(drained) > 0
	})
	if len(drained) != 1 || drained[0].QP != a.qp {
		t.Fatalf("drained events %+v", drained)
	}
	if got := summarize(atDrain); !equalSummaries(got, []wcSummary{{1, WCSuccess}}) {
		t.Fatalf("completions when the SQ drained: %+v, want WR 1 done", got)
	}
	if n := len(s.sentBy(0, wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast, wire.RCRDMAWriteOnly)); n != 40 {
		t.Fatalf("%d WRITE packets sent by the drained time, want the first WRITE's 40 alone", n)
	}
	if q, _ := da.QueryQP(a.qp); q.State != QPStateSQD || q.SQDraining {
		t.Errorf("drained: state %s draining %v", q.State, q.SQDraining)
	}
	// It stays drained: nothing more is sent and no second event comes.
	s.run(10_000_000, nil)
	if ev := drainEvents(da); len(ev) != 0 || a.scq.Len() != 0 || len(s.sentBy(0)) != 40 {
		t.Fatalf("in SQD: events %+v, %d completions, %d packets", ev, a.scq.Len(), len(s.sentBy(0)))
	}
	if !bytes.Equal(b.mem[:40<<10], a.mem[:40<<10]) {
		t.Error("first WRITE's data")
	}
	if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateRTS}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	s.must(1e9, "WRs after SQD->RTS", func() bool { return a.scq.Len() >= 2 })
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{2, WCSuccess}, {3, WCSuccess}}) {
		t.Fatalf("completions after SQD->RTS: %+v", got)
	}
	if !bytes.Equal(b.mem[64<<10:64<<10+100], a.mem[:100]) || !bytes.Equal(b.mem[65<<10:65<<10+200], a.mem[:200]) {
		t.Error("data of the WRITEs after SQD->RTS")
	}
	// SQD asking for no notification: no event. (The mask bit is given:
	// whether EnSQDAsyncNotify sticks from an earlier modify is left open,
	// rxe keeps it, mlx5 takes it per transition.)
	if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateSQD}, QPAttrState|QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	s.run(10_000_000, nil)
	if ev := drainEvents(da); len(ev) != 0 {
		t.Errorf("SQD without EnSQDAsyncNotify raised %+v", ev)
	}
}

// TestQuerySQDrainingHalfSentWQE: in SQD with a WQE half sent and nothing
// acknowledged the send queue is draining, and QueryQP must say so
// (regression: SQDraining was sqHead != sqNext, false for a half-sent WQE;
// fixed in c387260).
func TestQuerySQDrainingHalfSentWQE(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<17, 1<<17)
	connectWith(t, a, b, defaultConn())
	s := newXSim(t, da, db)
	postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 40<<10), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s.run(1, func() bool { return len(s.sent) > 0 })
	if a.qp.req.offset == 0 {
		t.Fatal("the WRITE is not half sent")
	}
	if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateSQD, EnSQDAsyncNotify: true}, QPAttrState|QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	if q, _ := da.QueryQP(a.qp); !q.SQDraining {
		t.Errorf("SQD with a WQE half sent: SQDraining false")
	}
	s.must(1e9, "drained", func() bool { return len(eventsOf(drainEvents(da), EventSQDrained)) > 0 })
	if q, _ := da.QueryQP(a.qp); q.SQDraining {
		t.Errorf("drained: SQDraining true")
	}
}

// TestSQDDrainWithRetransmission: RTS->SQD while the first packet of the
// outstanding WRITEs is lost: the requester still goes back for it in
// SQD (retransmitting is finishing begun WQEs, not starting new ones),
// and EventSQDrained comes once both are acknowledged, not when the
// rewind leaves the send queue looking idle.
func TestSQDDrainWithRetransmission(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.Timeout = 8
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	dropped := false
	s.filter = func(from int, p *wire.Packet) []Time {
		if from == 0 && p.BTH().PSN() == c.PSNA && !dropped {
			dropped = true
			return nil
		}
		return deliverOnce
	}
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 3000), RemoteAddr: b.addr(0), RKey: b.mr.Key},
		SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(4096), RKey: b.mr.Key})
	s.run(1, func() bool { return len(s.sent) > 0 })
	if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateSQD, EnSQDAsyncNotify: true}, QPAttrState|QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	postSend(t, a, SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 10), RemoteAddr: b.addr(8192), RKey: b.mr.Key})
	var atDrain []wcSummary
	drainedEvents := 0
	s.must(1e9, "drained", func() bool {
		if q, _ := da.QueryQP(a.qp); !q.SQDraining && drainedEvents == 0 && a.scq.Len() < 2 {
			t.Fatalf("SQDraining false at %d with WRs 1 and 2 outstanding", s.now)
		}
		for range eventsOf(drainEvents(da), EventSQDrained) {
			drainedEvents++
			atDrain = summarize(drain(a.scq))
		}
		return drainedEvents > 0
	})
	if !dropped || da.Ports[0].Counters.Retransmits == 0 {
		t.Fatal("no loss, no retransmission")
	}
	if !equalSummaries(atDrain, []wcSummary{{1, WCSuccess}, {2, WCSuccess}}) {
		t.Fatalf("completions when drained: %+v", atDrain)
	}
	s.run(1e7, nil)
	if n := len(eventsOf(drainEvents(da), EventSQDrained)); n != 0 || a.scq.Len() != 0 {
		t.Fatalf("%d more drained events, %d completions in SQD", n, a.scq.Len())
	}
	for _, p := range s.sentBy(0) {
		if p.PSN == c.PSNA+4 {
			t.Fatal("WR 3 was started in SQD")
		}
	}
}

// TestCQOverrun: a CQ of 4 entries given 5 completions raises EventCQErr
// once, is marked in error, and keeps the 4 it had; later completions do
// not raise it again.
func TestCQOverrun(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 4096, 4096)
	small, err := da.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := da.CreateQP(a.pd, QPInitAttr{Type: QPTypeRC, SendCQ: small, RecvCQ: a.rcq, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	a.qp = qp
	connectWith(t, a, b, defaultConn())
	s := newXSim(t, da, db)
	for i := range 5 {
		postSend(t, a, SendWR{WRID: uint64(i + 1), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 10), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	}
	s.must(1e9, "five WRITEs", func() bool { return qp.sqHead == qp.sqTail })
	ev := drainEvents(da)
	if cqErr := eventsOf(ev, EventCQErr); len(cqErr) != 1 || cqErr[0].CQ != small {
		t.Fatalf("events %+v, want one EventCQErr for the CQ", ev)
	}
	if !small.Err || small.Len() != 4 {
		t.Fatalf("CQ Err %v, %d entries; want in error with 4", small.Err, small.Len())
	}
	if got := summarize(drain(small)); !equalSummaries(got, []wcSummary{{1, WCSuccess}, {2, WCSuccess}, {3, WCSuccess}, {4, WCSuccess}}) {
		t.Fatalf("CQ holds %+v", got)
	}
	if qp.State() == QPStateRTS {
		postSend(t, a, SendWR{WRID: 6, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 10), RemoteAddr: b.addr(0), RKey: b.mr.Key})
		s.run(1e8, nil)
	}
	if ev := eventsOf(drainEvents(da), EventCQErr); len(ev) != 0 || small.Len() != 0 {
		t.Fatalf("after the overrun: %d more EventCQErr, %d entries", len(ev), small.Len())
	}
}

// TestSRQSharedByTwoQPs: two QPs take receive WQEs from one SRQ, in the
// order they were posted whichever QP a message arrives on; the limit
// event fires once, when the count drops below the limit, and again only
// after the limit is armed again.
func TestSRQSharedByTwoQPs(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a1, a2 := newEndpoint(t, da, QPTypeRC, 4096, 1), newEndpoint(t, da, QPTypeRC, 4096, 1)
	pd, err := db.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := db.CreateSRQ(pd, SRQAttr{MaxWR: 16, MaxSGE: 1, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 16*1024)
	mr, err := db.RegMR(pd, SliceMemory(mem), 0x10000, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := db.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	var bs [2]*endpoint
	for k := range bs {
		scq, err := db.CreateCQ(64)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := db.CreateQP(pd, QPInitAttr{Type: QPTypeRC, SendCQ: scq, RecvCQ: rcq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		bs[k] = &endpoint{d: db, pd: pd, scq: scq, rcq: rcq, qp: qp, mem: mem, mr: mr, n: 2}
	}
	if _, err := db.PostRecv(bs[0].qp, []RecvWR{{WRID: 1, SGL: bs[0].sge(0, 10)}}); err == nil {
		t.Error("PostRecv on a QP of an SRQ accepted")
	}
	connectWith(t, a1, bs[0], defaultConn())
	connectWith(t, a2, bs[1], defaultConn())
	for k := range 10 {
		if _, err := db.PostSRQRecv(srq, []RecvWR{{WRID: uint64(100 + k), SGL: []SGE{{Addr: 0x10000 + uint64(k)*1024, Length: 1024, LKey: mr.Key}}}}); err != nil {
			t.Fatal(err)
		}
	}
	s := newXSim(t, da, db)
	senders := []*endpoint{a1, a2, a2, a1, a2, a1, a1, a2}
	per := map[uint32]int{}
	for i, snd := range senders {
		for k := range 100 {
			snd.mem[k] = byte(i + k)
		}
		postSend(t, snd, SendWR{WRID: uint64(i), Opcode: WRSendWithImm, Imm: uint32(i), SGL: snd.sge(0, 100)})
		s.must(1e9, "SEND", func() bool { return rcq.Len() > 0 })
		wc := drain(rcq)
		want := bs[0].qp.Num
		if snd == a2 {
			want = bs[1].qp.Num
		}
		if len(wc) != 1 || wc[0].Status != WCSuccess || wc[0].WRID != uint64(100+i) || wc[0].Imm != uint32(i) || wc[0].QPNum != want || wc[0].ByteLen != 100 {
			t.Fatalf("message %d: completions %+v, want SRQ WR %d on QP %d", i, wc, 100+i, want)
		}
		per[wc[0].QPNum]++
		if !bytes.Equal(mem[i*1024:i*1024+100], snd.mem[:100]) {
			t.Fatalf("message %d: data", i)
		}
		if srq.Len() != 10-(i+1) {
			t.Fatalf("SRQ holds %d after %d messages", srq.Len(), i+1)
		}
		ev := eventsOf(drainEvents(db), EventSRQLimitReached)
		if srq.Len() == 4 { // dropped below the limit of 5 just now
			if len(ev) != 1 || ev[0].SRQ != srq {
				t.Fatalf("after message %d (%d left): events %+v, want the limit event", i, srq.Len(), ev)
			}
		} else if len(ev) != 0 {
			t.Fatalf("after message %d (%d left): limit event again", i, srq.Len())
		}
	}
	if per[bs[0].qp.Num] != 4 || per[bs[1].qp.Num] != 4 {
		t.Errorf("messages per QP %v", per)
	}
	// Armed again at 2 with 2 left: the next take (1 left) fires it.
	if err := db.ModifySRQ(srq, 2); err != nil {
		t.Fatal(err)
	}
	postSend(t, a1, SendWR{WRID: 8, Opcode: WRSend, SGL: a1.sge(0, 10)})
	s.must(1e9, "SEND", func() bool { return rcq.Len() > 0 })
	if wc := drain(rcq); len(wc) != 1 || wc[0].WRID != 108 {
		t.Fatalf("completions %+v", wc)
	}
	if ev := eventsOf(drainEvents(db), EventSRQLimitReached); len(ev) != 1 {
		t.Fatalf("re-armed limit: %d events", len(ev))
	}
}

// trackedMemory is a region's memory that records its release: Bytes
// after Release is empty, and the backing array is kept to check that
// nothing writes it afterwards.
type trackedMemory struct {
	buf      []byte
	released int
	atRel    []byte // a copy of buf when it was released
}

func (m *trackedMemory) Bytes() []byte {
	if m.released > 0 {
		return m.buf[:0]
	}
	return m.buf
}

func (m *trackedMemory) Release() {
	m.released++
	m.atRel = bytes.Clone(m.buf)
}

// TestDeregMRDuringWrite: the target region of a multi-packet WRITE is
// deregistered when half of the WRITE is placed. The next packet finds
// the key gone and is NAKed remote access error; the region's memory was
// released exactly once and is never written after that.
func TestDeregMRDuringWrite(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 4096)
	mem := &trackedMemory{buf: make([]byte, 16<<10)}
	mr, err := db.RegMR(b.pd, mem, 0x400000, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	c := defaultConn()
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	for i := range 8 << 10 {
		a.mem[i] = byte(i*11 + 1)
	}
	var deregErr error
	s.delivered = func(to int, p *wire.Packet) {
		if to == 1 && p.BTH().PSN() == c.PSNA+3 && mem.released == 0 {
			deregErr = db.DeregMR(mr)
		}
	}
	postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 8<<10), RemoteAddr: 0x400000, RKey: mr.Key})
	s.must(1e9, "WRITE", func() bool { return a.scq.Len() > 0 })
	s.run(1e7, nil)
	if deregErr != nil {
		t.Fatal(deregErr)
	}
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCRemAccessErr}}) {
		t.Fatalf("completion %+v, want REM_ACCESS_ERR", got)
	}
	if mem.released != 1 {
		t.Fatalf("Release called %d times", mem.released)
	}
	if !bytes.Equal(mem.buf[:4<<10], a.mem[:4<<10]) || !bytes.Equal(mem.buf[4<<10:], make([]byte, 12<<10)) {
		t.Error("the region does not hold the four packets placed before the deregistration, and only them")
	}
	if !bytes.Equal(mem.buf, mem.atRel) {
		t.Fatal("the region's memory was written after its release")
	}
	naks := s.naksBy(1)
	if len(naks) != 1 || naks[0].Syn.Value() != wire.NAKRemoteAccessError || naks[0].PSN != c.PSNA+4 {
		t.Fatalf("NAKs %+v, want one remote access error for PSN %d", naks, c.PSNA+4)
	}
	if b.qp.State() != QPStateError || a.qp.State() != QPStateError {
		t.Errorf("states %s %s", a.qp.State(), b.qp.State())
	}
	if err := db.DeregMR(mr); !errors.Is(err, ErrNoSuchObject) || mem.released != 1 {
		t.Errorf("second DeregMR: %v, %d releases", err, mem.released)
	}
	if db.lookupMR(mr.Key) != nil {
		t.Error("the deregistered key still looks up")
	}
}

// TestMRKeys: 10000 registrations, deregistrations among them, give
// 10000 distinct keys; a deregistered key never comes back; only whole
// keys look up (key^1, and every one-bit change, fail).
func TestMRKeys(t *testing.T) {
	d := testDevice(t, 1)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mem := SliceMemory(make([]byte, 64))
	seen := map[uint32]bool{}
	var live []*MR
	var dead []uint32
	for i := range 10000 {
		mr, err := d.RegMR(pd, mem, 0x1000, AccessLocalWrite|AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		if seen[mr.Key] {
			t.Fatalf("registration %d: key %#x given before", i, mr.Key)
		}
		seen[mr.Key] = true
		if mr.LKey() != mr.Key || mr.RKey() != mr.Key {
			t.Fatalf("L_Key %#x R_Key %#x key %#x", mr.LKey(), mr.RKey(), mr.Key)
		}
		live = append(live, mr)
		if i%3 == 2 { // deregister one in three, the oldest live
			old := live[0]
			live = live[1:]
			if err := d.DeregMR(old); err != nil {
				t.Fatal(err)
			}
			dead = append(dead, old.Key)
		}
	}
	if len(seen) != 10000 {
		t.Fatalf("%d distinct keys", len(seen))
	}
	for _, k := range dead {
		if d.lookupMR(k) != nil {
			t.Fatalf("deregistered key %#x looks up", k)
		}
	}
	liveKeys := map[uint32]bool{}
	for _, mr := range live {
		liveKeys[mr.Key] = true
	}
	for _, mr := range live {
		if d.lookupMR(mr.Key) != mr {
			t.Fatalf("key %#x does not look up its region", mr.Key)
		}
		for bit := range 32 {
			k := mr.Key ^ 1<<bit
			if liveKeys[k] {
				continue // another live region's key, by chance
			}
			if d.lookupMR(k) != nil {
				t.Fatalf("key %#x with bit %d flipped looks up", mr.Key, bit)
			}
		}
	}
	// Keys are not sequential: a key's neighbours are rarely keys.
	near := 0
	for k := range seen {
		if seen[k+1] || seen[k^1] {
			near++
		}
	}
	if near > 20 {
		t.Errorf("%d of 10000 keys have a neighbour that is a key too: guessable", near)
	}
}
