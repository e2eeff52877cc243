package vhca

import (
	"container/heap"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// xsim is a variant of the simulator of sim_test.go whose link is written
// by the test: a filter sees every frame a device sends (parsed) and
// decides whether it is delivered, how many times and how late; a hook
// sees every frame after the receiving device has processed it.
//
// Within one instant the loop fires the devices' timers, then delivers
// the frames due, then lets the devices transmit, so that a packet sent
// because a timer expired leaves at the very time the timer expired, and
// done is checked before the clock moves on: times measured here are
// exact to the step (100 ns) at worst.
type xsim struct {
	t       testing.TB
	now     Time
	devs    []*Device
	latency Time
	step    Time
	flight  flightHeap
	seq     uint64
	buf     []byte
	pkt     wire.Packet

	// filter decides the fate of a frame devs[from] sent: nil drops it;
	// otherwise one delivery per element, each latency plus that extra
	// delay later. nil filter: every frame delivered once.
	filter func(from int, p *wire.Packet) []Time
	// delivered runs after devs[to] has received a frame.
	delivered func(to int, p *wire.Packet)

	sent []xpkt // every frame sent, in order
}

// xpkt is what the log keeps of a frame.
type xpkt struct {
	At      Time
	From    int
	Op      wire.Opcode
	PSN     uint32
	DestQP  uint32
	Syn     wire.Syndrome // AETH's, when the opcode has one
	HasAETH bool
	Len     int // payload bytes
	Copies  int // deliveries the filter gave it
}

var deliverOnce = []Time{0}

func newXSim(t testing.TB, devs ...*Device) *xsim {
	return &xsim{t: t, devs: devs, latency: 1000, step: 100, now: 1000, buf: make([]byte, 16384)}
}

func (s *xsim) send(from int, frame []byte) {
	p := &s.pkt
	if err := s.parse(from, frame, p); err != nil {
		s.t.Fatalf("device %d sent a frame that does not parse: %v", from, err)
	}
	rec := xpkt{At: s.now, From: from, Op: p.Opcode, PSN: p.BTH().PSN(), DestQP: p.BTH().DestQP(), Len: p.PayloadLen}
	if a := p.AETH(); a != nil {
		rec.Syn, rec.HasAETH = a.Syndrome(), true
	}
	delays := deliverOnce
	if s.filter != nil {
		delays = s.filter(from, p)
	}
	rec.Copies = len(delays)
	s.sent = append(s.sent, rec)
	for _, d := range delays {
		s.seq++
		heap.Push(&s.flight, inflight{at: s.now + s.latency + d, seq: s.seq, to: (from + 1) % len(s.devs), frame: append([]byte(nil), frame...)})
	}
}

// parse parses a frame of devs[dev]'s link: Ethernet, or native IB.
func (s *xsim) parse(dev int, frame []byte, p *wire.Packet) error {
	if s.devs[dev].Ports[0].LinkLayer == LinkLayerInfiniBand {
		return wire.ParseIB(frame, p)
	}
	return wire.ParseEthernet(frame, p)
}

// inject delivers a copy of frame to devs[to] after delay.
func (s *xsim) inject(to int, frame []byte, delay Time) {
	s.seq++
	heap.Push(&s.flight, inflight{at: s.now + delay, seq: s.seq, to: to, frame: append([]byte(nil), frame...)})
}

// run runs the devices for at most limit of virtual time, until done
// reports true; it reports whether done did.
func (s *xsim) run(limit Time, done func() bool) bool {
	end := s.now + limit
	for iter := 0; ; iter++ {
		if iter == 5_000_000 {
			s.t.Fatalf("xsim stuck at %d:%s", s.now, s.describe())
		}
		busy := false
		for _, d := range s.devs {
			if dl := d.Deadline(); dl != 0 && dl <= s.now {
				d.Advance(s.now)
				busy = true
			}
		}
		for len(s.flight) > 0 && s.flight[0].at <= s.now {
			f := heap.Pop(&s.flight).(inflight)
			s.devs[f.to].Receive(s.now, 1, f.frame)
			if s.delivered != nil {
				var p wire.Packet
				if s.parse(f.to, f.frame, &p) == nil {
					s.delivered(f.to, &p)
				}
			}
			busy = true
		}
		if transmitAll(s.now, s.devs, s.buf, s.send) {
			busy = true
		}
		if done != nil && done() {
			return true
		}
		if s.now >= end {
			return false
		}
		if busy {
			s.now += s.step
			continue
		}
		s.now = nextEvent(s.now, end, s.flight, s.devs)
	}
}

// must runs until done, failing the test if it does not happen within limit.
func (s *xsim) must(limit Time, what string, done func() bool) {
	s.t.Helper()
	if !s.run(limit, done) {
		s.t.Fatalf("%s: not done after %d ns of virtual time:%s", what, limit, s.describe())
	}
}

func (s *xsim) describe() string { return describeQPs(s.devs) }

// sentBy filters the log: frames devs[from] sent with one of the opcodes
// (any if none given).
func (s *xsim) sentBy(from int, ops ...wire.Opcode) []xpkt {
	var out []xpkt
	for _, p := range s.sent {
		if p.From != from {
			continue
		}
		if len(ops) == 0 {
			out = append(out, p)
			continue
		}
		for _, o := range ops {
			if p.Op == o {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// connParams are the attributes connectWith gives the two QPs.
type connParams struct {
	PSNA, PSNB       uint32
	MTU              MTU
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	MinRNRA, MinRNRB uint8  // the RNR NAK timer code each side's responder sends
	AccessA, AccessB Access // QP remote access; 0: all three for RC, remote write for UC
	MaxRdAtomic      uint8  // 0: 16
	MaxDestRdAtomic  uint8  // 0: 16
	PKeyIndexA       uint16
	PKeyIndexB       uint16
	// Path, when set, gives the AV towards remote; nil: the RoCE path
	// of connect (global, DMAC and DGID of the remote port).
	Path func(remote *endpoint) AV
}

// defaultConn is connect's parameters.
func defaultConn() connParams {
	return connParams{PSNA: 100, PSNB: 200, MTU: MTU1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRA: 1, MinRNRB: 1}
}

// connectWith is connect with every connection attribute chosen by the test.
func connectWith(t testing.TB, a, b *endpoint, c connParams) {
	t.Helper()
	acc := map[*endpoint]Access{a: c.AccessA, b: c.AccessB}
	rnr := map[*endpoint]uint8{a: c.MinRNRA, b: c.MinRNRB}
	psns := map[*endpoint]uint32{a: c.PSNA, b: c.PSNB}
	rd, drd := c.MaxRdAtomic, c.MaxDestRdAtomic
	if rd == 0 {
		rd = 16
	}
	if drd == 0 {
		drd = 16
	}
	for _, l := range []*endpoint{a, b} {
		access := acc[l]
		if access == 0 {
			access = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
			if l.qp.Type == QPTypeUC {
				access = AccessRemoteWrite
			}
		}
		init := QPAttr{State: QPStateInit, Port: 1, AccessFlags: access, PKeyIndex: map[*endpoint]uint16{a: c.PKeyIndexA, b: c.PKeyIndexB}[l]}
		if err := l.d.ModifyQP(l.qp, &init, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range [][2]*endpoint{{a, b}, {b, a}} {
		l, r := x[0], x[1]
		av := AV{Port: 1, IsGlobal: true, DMAC: r.d.Ports[0].MAC,
			GRH: GlobalRoute{DGID: r.d.Ports[0].GIDs[0].GID, HopLimit: 64}}
		if c.Path != nil {
			av = c.Path(r)
		}
		rtr := QPAttr{State: QPStateRTR, PathMTU: c.MTU, DestQPN: r.qp.Num, RQPSN: psns[r],
			MaxDestRdAtomic: drd, MinRNRTimer: rnr[l], AV: av}
		mask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
		if l.qp.Type == QPTypeRC {
			mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
		}
		if err := l.d.ModifyQP(l.qp, &rtr, mask); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []*endpoint{a, b} {
		rts := QPAttr{State: QPStateRTS, SQPSN: psns[l], Timeout: c.Timeout, RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry, MaxRdAtomic: rd}
		mask := QPAttrState | QPAttrSQPSN
		if l.qp.Type == QPTypeRC {
			mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
		}
		if err := l.d.ModifyQP(l.qp, &rts, mask); err != nil {
			t.Fatal(err)
		}
	}
}

// twoDevices makes two test devices and an endpoint of type typ on each.
func twoDevices(t testing.TB, typ QPType, memA, memB int) (da, db *Device, a, b *endpoint) {
	da, db = testDevice(t, 1), testDevice(t, 2)
	a, b = newEndpoint(t, da, typ, memA, 1), newEndpoint(t, db, typ, memB, 2)
	return
}

// post posts send WRs, failing the test on an error.
func postSend(t testing.TB, e *endpoint, wrs ...SendWR) {
	t.Helper()
	if n, err := e.d.PostSend(e.qp, wrs); err != nil || n != len(wrs) {
		t.Fatalf("PostSend: %d of %d posted: %v", n, len(wrs), err)
	}
}

func postRecv(t testing.TB, e *endpoint, wrs ...RecvWR) {
	t.Helper()
	if n, err := e.d.PostRecv(e.qp, wrs); err != nil || n != len(wrs) {
		t.Fatalf("PostRecv: %d of %d posted: %v", n, len(wrs), err)
	}
}

// sge is Length bytes at offset off of e's registered buffer.
func (e *endpoint) sge(off uint64, length uint32) []SGE {
	return []SGE{{Addr: 0x10000 + off, Length: length, LKey: e.mr.Key}}
}

// addr is the remote address of offset off of e's registered buffer.
func (e *endpoint) addr(off uint64) uint64 { return 0x10000 + off }

// drain polls every completion of cq.
func drain(cq *CQ) []WC {
	out := make([]WC, cq.Len())
	return out[:cq.Poll(out)]
}

// drainEvents takes every pending event of d.
func drainEvents(d *Device) []Event {
	var out []Event
	var buf [16]Event
	for n := d.Events(buf[:]); n > 0; n = d.Events(buf[:]) {
		out = append(out, buf[:n]...)
	}
	return out
}

func eventsOf(evs []Event, typ EventType) []Event {
	var out []Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// wcSummary is a completion reduced to what tests compare.
type wcSummary struct {
	WRID   uint64
	Status WCStatus
}

func summarize(wcs []WC) []wcSummary {
	out := make([]wcSummary, len(wcs))
	for i, w := range wcs {
		out[i] = wcSummary{w.WRID, w.Status}
	}
	return out
}

func equalSummaries(a, b []wcSummary) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// naksBy is the NAKs (not RNR NAKs) devs[from] sent, in order.
func (s *xsim) naksBy(from int) []xpkt {
	var naks []xpkt
	for _, p := range s.sentBy(from, wire.RCAcknowledge) {
		if p.Syn.Kind() == wire.SyndromeNAK {
			naks = append(naks, p)
		}
	}
	return naks
}
