package vhca

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// The simulator joins devices through a link that, with a seed, drops,
// duplicates, reorders, corrupts and delays frames, on a virtual clock.
// Everything is deterministic: the same seed gives the same run.

type linkFaults struct {
	Loss, Dup, Reorder, Corrupt float64 // probabilities per frame
	Latency                     Time    // one way
	Jitter                      Time    // extra delay of a reordered frame, up to
}

type inflight struct {
	at    Time
	seq   uint64
	to    int
	frame []byte
}

type flightHeap []inflight

func (h flightHeap) Len() int { return len(h) }
func (h flightHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h flightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flightHeap) Push(x any)   { *h = append(*h, x.(inflight)) }
func (h *flightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type sim struct {
	t      testing.TB
	now    Time
	devs   []*Device
	faults linkFaults
	rng    *rand.Rand
	flight flightHeap
	seq    uint64
	buf    []byte
	pool   [][]byte
	sent   int
}

func newSim(t testing.TB, seed uint64, faults linkFaults, devs ...*Device) *sim {
	if faults.Latency == 0 {
		faults.Latency = 1000
	}
	return &sim{t: t, devs: devs, faults: faults, rng: rand.New(rand.NewPCG(seed, seed*31+7)), buf: make([]byte, 16384), now: 1}
}

func (s *sim) frame(b []byte) []byte {
	var f []byte
	if n := len(s.pool); n > 0 {
		f, s.pool = s.pool[n-1][:0], s.pool[:n-1]
	}
	return append(f, b...)
}

func (s *sim) send(from int, frame []byte) {
	s.sent++
	to := s.route(from, frame)
	if to < 0 {
		return
	}
	f := s.faults
	if s.rng.Float64() < f.Loss {
		return
	}
	copies := 1
	if s.rng.Float64() < f.Dup {
		copies = 2
	}
	for range copies {
		at := s.now + f.Latency
		if s.rng.Float64() < f.Reorder {
			at += Time(s.rng.Int64N(int64(f.Jitter) + 1))
		}
		b := s.frame(frame)
		if s.rng.Float64() < f.Corrupt {
			b[s.rng.IntN(len(b))] ^= 1 << s.rng.IntN(8)
		}
		s.seq++
		heap.Push(&s.flight, inflight{at: at, seq: s.seq, to: to, frame: b})
	}
}

// route is the device a frame goes to: the one whose port has the
// frame's destination MAC (RoCE) or LID (native IB); with two devices, the
// other one.
func (s *sim) route(from int, frame []byte) int {
	if len(s.devs) == 2 {
		return 1 - from
	}
	for i, d := range s.devs {
		pt := d.Ports[0]
		switch {
		case pt.LinkLayer == LinkLayerEthernet && len(frame) >= 6 && wire.MAC(frame[:6]) == pt.MAC:
			return i
		case pt.LinkLayer == LinkLayerInfiniBand && len(frame) >= wire.LRHLen && wire.LRH(frame).DLID() == pt.LID:
			return i
		}
	}
	return -1
}

// step runs the network until now+d or until done reports true.
func (s *sim) run(limit Time, done func() bool) {
	end := s.now + limit
	for iter := 0; s.now < end; iter++ {
		if done() {
			return
		}
		if iter == 1_000_000_000 {
			s.t.Fatalf("simulator stuck at %v: %s", s.now, s.describe())
		}
		busy := transmitAll(s.now, s.devs, s.buf, s.send)
		for len(s.flight) > 0 && s.flight[0].at <= s.now {
			f := heap.Pop(&s.flight).(inflight)
			s.devs[f.to].Receive(s.now, 1, f.frame)
			s.pool = append(s.pool, f.frame)
			busy = true
		}
		for _, d := range s.devs {
			if dl := d.Deadline(); dl != 0 && dl <= s.now {
				d.Advance(s.now)
				busy = true
			}
		}
		if busy {
			s.now += 100
			continue
		}
		s.now = nextEvent(s.now, end, s.flight, s.devs) // idle: jump ahead
	}
}

// transmitAll lets every device send up to 32 frames and hands each to
// send; it reports whether any was sent.
func transmitAll(now Time, devs []*Device, buf []byte, send func(from int, frame []byte)) bool {
	sent := false
	for i, d := range devs {
		for range 32 {
			n, _ := d.Transmit(now, buf)
			if n == 0 {
				break
			}
			sent = true
			send(i, buf[:n])
		}
	}
	return sent
}

// nextEvent is the time an idle simulation jumps to: the next frame to
// deliver or the next device deadline, no later than end.
func nextEvent(now, end Time, flight flightHeap, devs []*Device) Time {
	next := end
	if len(flight) > 0 && flight[0].at < next {
		next = flight[0].at
	}
	for _, d := range devs {
		if dl := d.Deadline(); dl != 0 && dl < next {
			next = dl
		}
	}
	return max(next, now+1)
}

// testDevice makes a device with one RoCEv2/IPv4 port.
func testDevice(t testing.TB, n byte) *Device {
	d, err := NewDevice(Config{
		Name: "vhca", NodeGUID: uint64(n), Seed: uint64(n),
		Ports: []PortConfig{{
			LinkLayer: LinkLayerEthernet, MaxMTU: MTU4096, ActiveMTU: MTU1024,
			MAC:  wire.MAC{2, 0, 0, 0, 0, n},
			GIDs: []GIDEntry{{GID: wire.IPv4MappedGID([4]byte{192, 0, 2, n}), Type: GIDTypeRoCEv2}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// endpoint is one side of a connection in a test: its device, PD, CQs,
// QP and a registered buffer.
type endpoint struct {
	d   *Device
	pd  *PD
	scq *CQ
	rcq *CQ
	qp  *QP
	mem []byte
	mr  *MR
	n   byte
}

func newEndpoint(t testing.TB, d *Device, typ QPType, memSize int, n byte) *endpoint {
	e := &endpoint{d: d, n: n}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = d.CreateCQ(1 << 14); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = d.CreateCQ(1 << 14); err != nil {
		t.Fatal(err)
	}
	e.qp, err = d.CreateQP(e.pd, QPInitAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: QPCap{MaxSendWR: 4096, MaxRecvWR: 4096, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	e.mem = make([]byte, memSize)
	e.mr, err = d.RegMR(e.pd, SliceMemory(e.mem), 0x10000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// connect takes two RC or UC endpoints through Init, RTR and RTS, each
// pointed at the other, as a pingpong does after exchanging QPN and PSN.
func connect(t testing.TB, a, b *endpoint, psnA, psnB uint32, mtu MTU) {
	for _, l := range []*endpoint{a, b} {
		init := QPAttr{State: QPStateInit, PKeyIndex: 0, Port: 1,
			AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}
		mask := QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
		if l.qp.Type == QPTypeUC {
			init.AccessFlags = AccessRemoteWrite
		}
		if err := l.d.ModifyQP(l.qp, &init, mask); err != nil {
			t.Fatal(err)
		}
	}
	psns := map[*endpoint]uint32{a: psnA, b: psnB}
	for _, x := range [][2]*endpoint{{a, b}, {b, a}} {
		l, r := x[0], x[1]
		rtr := QPAttr{State: QPStateRTR, PathMTU: mtu, DestQPN: r.qp.Num, RQPSN: psns[r],
			MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AV: AV{Port: 1, IsGlobal: true, DMAC: r.d.Ports[0].MAC,
				GRH: GlobalRoute{DGID: r.d.Ports[0].GIDs[0].GID, HopLimit: 64}}}
		mask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
		if l.qp.Type == QPTypeRC {
			mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
		}
		if err := l.d.ModifyQP(l.qp, &rtr, mask); err != nil {
			t.Fatal(err)
		}
		rts := QPAttr{State: QPStateRTS, SQPSN: psns[l], Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
		mask = QPAttrState | QPAttrSQPSN
		if l.qp.Type == QPTypeRC {
			mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
		}
		if err := l.d.ModifyQP(l.qp, &rts, mask); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *endpoint) poll(cq *CQ) []WC {
	out := make([]WC, cq.Len())
	return out[:cq.Poll(out)]
}

func TestRCSendWriteReadAtomicNoLoss(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a, b := newEndpoint(t, da, QPTypeRC, 1<<20, 1), newEndpoint(t, db, QPTypeRC, 1<<20, 2)
	connect(t, a, b, 100, 200, MTU1024)
	s := newSim(t, 1, linkFaults{}, da, db)

	// SEND 5000 bytes (5 packets) into a posted receive.
	for i := range 5000 {
		a.mem[i] = byte(i * 7)
	}
	if _, err := db.PostRecv(b.qp, []RecvWR{{WRID: 77, SGL: []SGE{{Addr: 0x10000, Length: 8192, LKey: b.mr.Key}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := da.PostSend(a.qp, []SendWR{{WRID: 1, Opcode: WRSendWithImm, Flags: SendSignaled, Imm: 0xABCD,
		SGL: []SGE{{Addr: 0x10000, Length: 5000, LKey: a.mr.Key}}}}); err != nil {
		t.Fatal(err)
	}
	s.run(1e9, func() bool { return a.scq.Len() > 0 && b.rcq.Len() > 0 })
	sc, rc := a.poll(a.scq), b.poll(b.rcq)
	if len(sc) != 1 || sc[0].Status != WCSuccess || sc[0].WRID != 1 || sc[0].Opcode != WCSend {
		t.Fatalf("send completion %+v", sc)
	}
	if len(rc) != 1 || rc[0].Status != WCSuccess || rc[0].WRID != 77 || rc[0].ByteLen != 5000 || rc[0].Imm != 0xABCD || rc[0].Flags&WCWithImm == 0 || rc[0].SrcQP != a.qp.Num {
		t.Fatalf("recv completion %+v", rc)
	}
	for i := range 5000 {
		if b.mem[i] != byte(i*7) {
			t.Fatalf("SEND byte %d: %d", i, b.mem[i])
		}
	}

	// RDMA WRITE 3000 bytes to b at offset 100000, then READ them back
	// into a at offset 200000.
	for i := range 3000 {
		a.mem[10000+i] = byte(i * 13)
	}
	da.PostSend(a.qp, []SendWR{
		{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000 + 10000, Length: 3000, LKey: a.mr.Key}},
			RemoteAddr: 0x10000 + 100000, RKey: b.mr.Key},
		{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000 + 200000, Length: 3000, LKey: a.mr.Key}},
			RemoteAddr: 0x10000 + 100000, RKey: b.mr.Key},
		{WRID: 4, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000 + 300000, Length: 8, LKey: a.mr.Key}},
			RemoteAddr: 0x10000 + 400000, RKey: b.mr.Key, CompareAdd: 5},
		{WRID: 5, Opcode: WRAtomicCmpSwap, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000 + 300008, Length: 8, LKey: a.mr.Key}},
			RemoteAddr: 0x10000 + 400000, RKey: b.mr.Key, CompareAdd: 5, Swap: 99},
	})
	s.run(1e9, func() bool { return a.scq.Len() >= 4 })
	sc = a.poll(a.scq)
	if len(sc) != 4 {
		t.Fatalf("completions %+v", sc)
	}
	for i, w := range sc {
		if w.Status != WCSuccess || w.WRID != uint64(i+2) {
			t.Fatalf("completion %d: %+v", i, w)
		}
	}
	for i := range 3000 {
		if b.mem[100000+i] != byte(i*13) || a.mem[200000+i] != byte(i*13) {
			t.Fatalf("WRITE/READ byte %d: %d %d", i, b.mem[100000+i], a.mem[200000+i])
		}
	}
	le := func(b []byte) uint64 {
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v
	}
	if got := le(a.mem[300000:]); got != 0 {
		t.Errorf("FetchAdd returned %d, want 0", got)
	}
	if got := le(a.mem[300008:]); got != 5 {
		t.Errorf("CmpSwap returned %d, want 5", got)
	}
	if got := le(b.mem[400000:]); got != 99 {
		t.Errorf("remote value %d, want 99", got)
	}
}

// describe is the state of every QP, for a failure message.
func (s *sim) describe() string { return describeQPs(s.devs) }

// describeQPs is the state of every QP of devs, for a failure message.
func describeQPs(devs []*Device) string {
	out := ""
	for i, d := range devs {
		for _, qp := range d.sortedQPs() {
			r := &qp.req
			out += fmt.Sprintf("\n dev %d QP %d %s: psn %d unacked %d sq %d/%d/%d off %d rdOut %d timer %d rnr %d retries %d | resp epsn %d queue %d inMsg %v ready %v deadline %d",
				i, qp.Num, qp.state, r.psn, r.unacked, qp.sqHead, qp.sqNext, qp.sqTail, r.offset, r.rdOut, r.timer, r.rnrWait, r.retries,
				qp.resp.epsn, len(qp.resp.queue), qp.resp.inMessage, qp.ready, d.Deadline())
		}
	}
	return out
}

// sortedQPs is the device's QPs by number.
func (d *Device) sortedQPs() []*QP {
	var qps []*QP
	for _, qp := range d.qps {
		qps = append(qps, qp)
	}
	slices.SortFunc(qps, func(a, b *QP) int { return int(a.Num) - int(b.Num) })
	return qps
}
