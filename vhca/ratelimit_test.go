package vhca

import (
	"errors"
	"fmt"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// rateLink joins two devices the way an owner that sleeps between events
// does: at each instant it delivers the frames due, fires the timers due,
// lets both devices transmit until neither has anything, and then moves
// the clock to the next delivery or the earliest Deadline, never by a
// fixed step. An owner that found an event due at or before the time it
// is idle at would spin: run fails the test then. Frames take latency to
// cross. It tallies what device 0 sends by destination QPN.
type rateLink struct {
	t        testing.TB
	devs     [2]*Device
	now      Time
	latency  Time
	slack    Time                      // how late the owner wakes after a deadline
	segments bool                      // TransmitSegment and ReceiveSegment (in-process ports)
	drop     func(p *wire.Packet) bool // device 0's frames it loses; nil: none
	flight   []rateFrame               // in order of arrival: the latency is the same for all
	buf      []byte
	pkt      wire.Packet
	sent     map[uint32]*rateTally // device 0's frames by destination QPN
	iters    int
	frames   int
	segs     []int // payload lengths of the segments device 0 sent
}

type rateFrame struct {
	at    Time
	to    int
	frame []byte
	seg   []byte
}

type rateTally struct {
	bytes       int64 // whole frames: what the bucket counts
	payload     int64
	frames      int64
	first, last Time
}

func newRateLink(t testing.TB, da, db *Device) *rateLink {
	return &rateLink{t: t, devs: [2]*Device{da, db}, now: 1000, latency: 1000,
		buf: make([]byte, 16384), sent: map[uint32]*rateTally{}}
}

// run works the devices until the clock reaches until.
func (l *rateLink) run(until Time) {
	l.t.Helper()
	for {
		l.iters++
		if l.iters > 20_000_000 {
			l.t.Fatalf("rateLink: no end at %d:%s", l.now, describeQPs(l.devs[:]))
		}
		for len(l.flight) > 0 && l.flight[0].at <= l.now {
			f := l.flight[0]
			l.flight = l.flight[1:]
			l.devs[f.to].ReceiveSegment(l.now, 1, f.frame, f.seg)
		}
		for _, d := range l.devs {
			if dl := d.Deadline(); dl != 0 && dl <= l.now {
				d.Advance(l.now)
			}
		}
		sent := false
		for i, d := range l.devs {
			for {
				var n int
				var seg []byte
				if l.segments {
					n, seg, _ = d.TransmitSegment(l.now, l.buf)
				} else {
					n, _ = d.Transmit(l.now, l.buf)
				}
				if n == 0 {
					break
				}
				sent = true
				l.send(i, l.buf[:n], seg)
			}
		}
		if sent {
			continue
		}
		var arrival, deadline Time
		if len(l.flight) > 0 {
			arrival = l.flight[0].at
		}
		for _, d := range l.devs {
			if dl := d.Deadline(); dl != 0 && (deadline == 0 || dl < deadline) {
				deadline = dl
			}
		}
		if deadline != 0 && deadline <= l.now {
			l.t.Fatalf("idle at %d with a deadline at %d: an owner sleeping until Deadline would spin", l.now, deadline)
		}
		// The owner sleeps until the deadline (and oversleeps by slack)
		// or until a frame arrives.
		wake := arrival
		if deadline != 0 && (wake == 0 || deadline+l.slack < wake) {
			wake = deadline + l.slack
		}
		if wake == 0 || wake >= until {
			l.now = max(l.now, until)
			return
		}
		l.now = wake
	}
}

func (l *rateLink) send(from int, frame, seg []byte) {
	l.frames++
	p := &l.pkt
	var err error
	if seg != nil {
		err = wire.ParseEthernetSegment(frame, seg, p)
	} else if l.segments {
		err = wire.ParseEthernetUnsealed(frame, p)
	} else {
		err = wire.ParseEthernet(frame, p)
	}
	if err != nil {
		l.t.Fatalf("device %d sent a frame that does not parse: %v", from, err)
	}
	if from == 0 {
		q := p.BTH().DestQP()
		ta := l.sent[q]
		if ta == nil {
			ta = &rateTally{first: l.now}
			l.sent[q] = ta
		}
		ta.bytes += int64(len(frame) + len(seg))
		ta.payload += int64(p.PayloadLen)
		ta.frames++
		ta.last = l.now
		if seg != nil {
			l.segs = append(l.segs, len(seg))
		}
		if l.drop != nil && l.drop(p) {
			return
		}
	}
	l.flight = append(l.flight, rateFrame{at: l.now + l.latency, to: 1 - from, frame: append([]byte(nil), frame...), seg: seg})
}

// bytesTo is the frame bytes device 0 has sent to QP qpn.
func (l *rateLink) bytesTo(qpn uint32) int64 {
	if ta := l.sent[qpn]; ta != nil {
		return ta.bytes
	}
	return 0
}

// rateTo is the rate, in kbit/s, of the frame bytes device 0 has sent to
// QP qpn since it had sent from, over span.
func (l *rateLink) rateTo(qpn uint32, from int64, span Time) float64 {
	return float64(l.bytesTo(qpn)-from) * 8 / float64(span) * 1e6
}

const (
	mbps      = 1000 // kbit/s
	millisec  = Time(1_000_000)
	maxFrame  = 1200 // bytes: a request frame at MTU 1024, headers included
	writeSize = 1 << 16
)

// bringUp takes a connected endpoint l towards r through Init, RTR and
// RTS, setting kbps as its rate limit on the way to RTS (0 too: the mask
// names it either way).
func bringUp(t testing.TB, l, r *endpoint, kbps uint32) {
	t.Helper()
	access := AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	if l.qp.Type == QPTypeUC {
		access = AccessRemoteWrite
	}
	steps := []struct {
		attr QPAttr
		mask QPAttrMask
	}{
		{QPAttr{State: QPStateInit, Port: 1, AccessFlags: access}, QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
		{QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPN: r.qp.Num, RQPSN: 0, MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AV: AV{Port: 1, IsGlobal: true, DMAC: r.d.Ports[0].MAC, GRH: GlobalRoute{DGID: r.d.Ports[0].GIDs[0].GID, HopLimit: 64}}},
			QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN},
		{QPAttr{State: QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16, RateLimit: kbps},
			QPAttrState | QPAttrSQPSN | QPAttrRateLimit},
	}
	if l.qp.Type == QPTypeRC {
		steps[1].mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
		steps[2].mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	}
	for _, s := range steps {
		if err := l.d.ModifyQP(l.qp, &s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// ratedPair makes a connected pair of type typ from da to db, the sender
// limited to kbps.
func ratedPair(t testing.TB, da, db *Device, typ QPType, kbps uint32) (a, b *endpoint) {
	a, b = newEndpoint(t, da, typ, writeSize, 1), newEndpoint(t, db, typ, writeSize, 2)
	if typ == QPTypeUD {
		for _, e := range []*endpoint{a, b} {
			if err := e.d.ModifyQP(e.qp, &QPAttr{State: QPStateInit, Port: 1, QKey: 7}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey); err != nil {
				t.Fatal(err)
			}
			if err := e.d.ModifyQP(e.qp, &QPAttr{State: QPStateRTR}, QPAttrState); err != nil {
				t.Fatal(err)
			}
		}
		if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateRTS, RateLimit: kbps}, QPAttrState|QPAttrSQPSN|QPAttrRateLimit); err != nil {
			t.Fatal(err)
		}
		if err := db.ModifyQP(b.qp, &QPAttr{State: QPStateRTS}, QPAttrState|QPAttrSQPSN); err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	bringUp(t, a, b, kbps)
	bringUp(t, b, a, 0)
	return a, b
}

// writes posts n RDMA WRITEs of size bytes from a to b (UD: SENDs of at
// most an MTU).
func writes(t testing.TB, a, b *endpoint, n int, size uint32) {
	t.Helper()
	wrs := make([]SendWR, n)
	var ah *AH
	if a.qp.Type == QPTypeUD {
		ah = udAH(t, a, b)
	}
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: a.sge(0, size), RemoteAddr: b.addr(0), RKey: b.mr.Key}
		if ah != nil {
			wrs[i] = SendWR{WRID: uint64(i), Opcode: WRSend, SGL: a.sge(0, min(size, 1024)), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 7}
		}
		if i == n-1 {
			wrs[i].Flags = SendSignaled
		}
	}
	postSend(t, a, wrs...)
}

// checkRate fails the test unless got (kbit/s) is within 10% of want, and
// unless bytes sent over span stay within the token bucket's bound:
// rate × span + depth + one frame.
func checkRate(t *testing.T, what string, qp *QP, got float64, bytes int64, span Time) {
	t.Helper()
	want := float64(qp.attr.RateLimit)
	t.Logf("%s: %.1f Mbit/s over %.0f ms (limit %.0f Mbit/s, %.2f%%)", what, got/mbps, float64(span)/1e6, want/mbps, 100*(got/want-1))
	if got < 0.9*want || got > 1.1*want {
		t.Errorf("%s: %.1f Mbit/s, limit %.0f Mbit/s", what, got/mbps, want/mbps)
	}
	bound := int64(qp.attr.RateLimit)*int64(span)/microbitsPerByte + qp.rate.depth(qp.mtu)/microbitsPerByte + maxFrame
	if bytes > bound {
		t.Errorf("%s: %d bytes in %d ns, above the bucket's bound %d", what, bytes, span, bound)
	}
}

// Two RC QPs limited to 100 and 400 Mbit/s, each with more RDMA WRITEs
// than it may send, keep to their rates over 50 ms, while an unlimited QP
// beside them on the same devices sends its WRITEs far faster.
func TestRateLimitRC(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a1, b1 := ratedPair(t, da, db, QPTypeRC, 100*mbps)
	a2, b2 := ratedPair(t, da, db, QPTypeRC, 400*mbps)
	a3, b3 := ratedPair(t, da, db, QPTypeRC, 0)
	writes(t, a1, b1, 16, writeSize)  // 1 MiB: 84 ms at 100 Mbit/s
	writes(t, a2, b2, 64, writeSize)  // 4 MiB: 84 ms at 400 Mbit/s
	writes(t, a3, b3, 128, writeSize) // 8 MiB
	l := newRateLink(t, da, db)
	start := l.now
	l.run(start + 10*millisec)
	from1, from2 := l.bytesTo(b1.qp.Num), l.bytesTo(b2.qp.Num)
	if a3.scq.Len() != 1 {
		t.Fatalf("the unlimited QP is not done after 10 ms")
	}
	l.run(start + 60*millisec)
	span := 50 * millisec
	checkRate(t, "RC 100", a1.qp, l.rateTo(b1.qp.Num, from1, span), l.bytesTo(b1.qp.Num)-from1, span)
	checkRate(t, "RC 400", a2.qp, l.rateTo(b2.qp.Num, from2, span), l.bytesTo(b2.qp.Num)-from2, span)
	// The whole run, start burst included.
	whole := l.now - start
	checkRate(t, "RC 100 from the start", a1.qp, l.rateTo(b1.qp.Num, 0, whole), l.bytesTo(b1.qp.Num), whole)
	checkRate(t, "RC 400 from the start", a2.qp, l.rateTo(b2.qp.Num, 0, whole), l.bytesTo(b2.qp.Num), whole)
	u := l.sent[b3.qp.Num]
	fast := float64(u.bytes) * 8 / float64(u.last-u.first+1) * 1e6
	t.Logf("unlimited RC: %d bytes in %d frames over %d ns: %.0f Mbit/s", u.bytes, u.frames, u.last-u.first, fast/mbps)
	if fast < 10*400*mbps {
		t.Errorf("the unlimited QP sent at %.0f Mbit/s", fast/mbps)
	}
	for _, a := range []*endpoint{a1, a2} {
		if a.scq.Len() != 0 {
			t.Errorf("QP %d done already: its WRITEs were too few to measure", a.qp.Num)
		}
	}
	if c := da.Ports[0].Counters; c.Timeouts != 0 || c.Retransmits != 0 {
		t.Errorf("%d timeouts, %d retransmissions on a lossless link", c.Timeouts, c.Retransmits)
	}
	// Payload goodput is a little lower than the limit: the bucket counts
	// headers too.
	ta := l.sent[b1.qp.Num]
	t.Logf("RC 100: payload %.1f Mbit/s from the start, %d frames of %d bytes on average, %d owner loop turns for %d frames",
		float64(ta.payload)*8/float64(whole)*1e3, ta.frames, ta.bytes/ta.frames, l.iters, l.frames)
}

// A UC QP limited to 100 Mbit/s (RDMA WRITEs) and a UD QP limited to
// 400 Mbit/s (MTU-sized SENDs, which the peer, with no receive posted,
// drops) keep to their rates.
func TestRateLimitUCUD(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a1, b1 := ratedPair(t, da, db, QPTypeUC, 100*mbps)
	a2, b2 := ratedPair(t, da, db, QPTypeUD, 400*mbps)
	writes(t, a1, b1, 16, writeSize)
	writes(t, a2, b2, 4000, 1024) // 4.3 MB: 87 ms at 400 Mbit/s
	l := newRateLink(t, da, db)
	start := l.now
	l.run(start + 10*millisec)
	from1, from2 := l.bytesTo(b1.qp.Num), l.bytesTo(b2.qp.Num)
	l.run(start + 60*millisec)
	span := 50 * millisec
	checkRate(t, "UC 100", a1.qp, l.rateTo(b1.qp.Num, from1, span), l.bytesTo(b1.qp.Num)-from1, span)
	checkRate(t, "UD 400", a2.qp, l.rateTo(b2.qp.Num, from2, span), l.bytesTo(b2.qp.Num)-from2, span)
	if a1.scq.Len() != 0 || a2.scq.Len() != 0 {
		t.Errorf("done already: too little work to measure")
	}
}

// modifyRate changes a QP's limit in RTS->RTS.
func modifyRate(t testing.TB, e *endpoint, kbps uint32) {
	t.Helper()
	if err := e.d.ModifyQP(e.qp, &QPAttr{State: QPStateRTS, RateLimit: kbps}, QPAttrState|QPAttrRateLimit); err != nil {
		t.Fatal(err)
	}
}

// A change of limit in RTS->RTS takes effect, up and down, on RC and UD;
// a QP waiting out a long wait under a low limit goes at once when the
// limit is raised or taken away.
func TestRateLimitChange(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a, b := ratedPair(t, da, db, QPTypeRC, 100*mbps)
	u, v := ratedPair(t, da, db, QPTypeUD, 100*mbps)
	writes(t, a, b, 64, writeSize)
	writes(t, u, v, 4000, 1024)
	l := newRateLink(t, da, db)
	measure := func(what string, kbps uint32, settle, span Time) {
		t.Helper()
		if kbps != 0 {
			modifyRate(t, a, kbps)
			modifyRate(t, u, kbps)
		}
		l.run(l.now + settle)
		fa, fu := l.bytesTo(b.qp.Num), l.bytesTo(v.qp.Num)
		l.run(l.now + span)
		checkRate(t, "RC "+what, a.qp, l.rateTo(b.qp.Num, fa, span), l.bytesTo(b.qp.Num)-fa, span)
		checkRate(t, "UD "+what, u.qp, l.rateTo(v.qp.Num, fu, span), l.bytesTo(v.qp.Num)-fu, span)
	}
	measure("at 100", 0, millisec, 20*millisec)
	measure("raised to 400", 400*mbps, millisec, 20*millisec)
	measure("lowered to 50", 50*mbps, millisec, 20*millisec)
	if a.scq.Len() != 0 || u.scq.Len() != 0 {
		t.Fatal("done already: too little work to measure")
	}

	// 1 Mbit/s: after a frame the QP waits some 9 ms.
	modifyRate(t, a, 1*mbps)
	l.run(l.now + 20*millisec)
	if a.qp.req.rateWait <= l.now {
		t.Fatalf("at 1 Mbit/s the QP is not waiting (until %d, now %d)", a.qp.req.rateWait, l.now)
	}
	before := l.bytesTo(b.qp.Num)
	modifyRate(t, a, 1000*mbps)
	l.run(l.now + 1) // the same instant
	if got := l.bytesTo(b.qp.Num) - before; got < 10_000 {
		t.Fatalf("raised from 1 Mbit/s to 1 Gbit/s: %d bytes at once, want the 12.5 kB of a full bucket", got)
	}
	modifyRate(t, a, 1*mbps)
	l.run(l.now + 20*millisec)
	before = l.bytesTo(b.qp.Num)
	modifyRate(t, a, 0)
	l.run(l.now + 5*millisec)
	if a.scq.Len() != 1 {
		t.Fatalf("limit taken away: the WRITEs are not done 5 ms later (%d bytes sent)", l.bytesTo(b.qp.Num)-before)
	}
	if a.qp.req.rateWait != 0 {
		t.Fatalf("an unlimited QP still waits for its bucket")
	}
}

// A limit of 0 is no limit: set on the way to RTS, a QP sends everything
// at the same instant, with no wait armed; set back to 0 after a limit,
// likewise.
func TestRateLimitZeroIsUnlimited(t *testing.T) {
	for _, typ := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD} {
		da, db := testDevice(t, 1), testDevice(t, 2)
		a, b := ratedPair(t, da, db, typ, 0)
		buf := make([]byte, 16384)
		burst := func() int {
			n := 0
			for {
				m, _ := da.Transmit(5000, buf)
				if m == 0 {
					return n
				}
				n++
			}
		}
		writes(t, a, b, 64, 1024)
		if n := burst(); n != 64 || a.qp.req.rateWait != 0 {
			t.Fatalf("%s, limit 0: %d of 64 frames at once, rate wait %d", typ, n, a.qp.req.rateWait)
		}
		modifyRate(t, a, 10*mbps)
		writes(t, a, b, 64, 1024)
		if n := burst(); n != 2 || a.qp.req.rateWait == 0 || da.Deadline() == 0 {
			t.Fatalf("%s, 10 Mbit/s: %d frames at once (want the bucket's 2), rate wait %d", typ, n, a.qp.req.rateWait)
		}
		modifyRate(t, a, 0)
		if n := burst(); n != 62 || a.qp.req.rateWait != 0 {
			t.Fatalf("%s, back to 0: %d of the 62 frames left at once, rate wait %d", typ, n, a.qp.req.rateWait)
		}
		if typ != QPTypeRC && da.Deadline() != 0 {
			t.Fatalf("%s: deadline %d with no limit and no acknowledgements", typ, da.Deadline())
		}
	}
}

// QueryQP reports the limit that RTR->RTS and RTS->RTS set; the other
// transitions refuse the attribute and leave the QP as it was.
func TestRateLimitQueryQP(t *testing.T) {
	for _, typ := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD} {
		da, db := testDevice(t, 1), testDevice(t, 2)
		a, _ := ratedPair(t, da, db, typ, 123456)
		if got, _ := da.QueryQP(a.qp); got.RateLimit != 123456 {
			t.Errorf("%s: RateLimit %d after RTR->RTS, want 123456", typ, got.RateLimit)
		}
		modifyRate(t, a, 777)
		if got, _ := da.QueryQP(a.qp); got.RateLimit != 777 || a.qp.rate.kbps != 777 {
			t.Errorf("%s: RateLimit %d (bucket %d) after RTS->RTS, want 777", typ, got.RateLimit, a.qp.rate.kbps)
		}
		// RTS->RTS without QPAttrState.
		if err := da.ModifyQP(a.qp, &QPAttr{RateLimit: 888}, QPAttrRateLimit); err != nil {
			t.Fatal(err)
		}
		err := da.ModifyQP(a.qp, &QPAttr{State: QPStateSQD, RateLimit: 5}, QPAttrState|QPAttrRateLimit)
		var te *TransitionError
		if !errors.As(err, &te) || te.Extra != QPAttrRateLimit {
			t.Errorf("%s: RTS->SQD with a rate limit: %v", typ, err)
		}
		if got, _ := da.QueryQP(a.qp); got.RateLimit != 888 || got.State != QPStateRTS {
			t.Errorf("%s: after a refused modify: %s, RateLimit %d, want RTS and 888", typ, got.State, got.RateLimit)
		}
		modifyRate(t, a, 0)
		if got, _ := da.QueryQP(a.qp); got.RateLimit != 0 || a.qp.rate != (rateBucket{}) {
			t.Errorf("%s: RateLimit %d, bucket %+v after setting 0", typ, got.RateLimit, a.qp.rate)
		}
		// Init->RTR does not take it.
		x := newEndpoint(t, da, typ, 4096, 1)
		mask := QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
		if typ == QPTypeUD {
			mask = QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
		}
		if err := da.ModifyQP(x.qp, &QPAttr{State: QPStateInit, Port: 1, QKey: 1}, mask); err != nil {
			t.Fatal(err)
		}
		if err := da.ModifyQP(x.qp, &QPAttr{State: QPStateRTR, RateLimit: 5}, QPAttrState|QPAttrRateLimit); !errors.As(err, &te) || te.Extra != QPAttrRateLimit {
			t.Errorf("%s: Init->RTR with a rate limit: %v", typ, err)
		}
	}
}

// Deadline is the time the bucket lets the next request go, exactly; the
// waiting QP is off the ring (Transmit gives nothing before), the others
// go on meanwhile, and an owner that only moves its clock to Deadline
// when idle sends everything at the limit.
func TestRateLimitDeadline(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a, b := ratedPair(t, da, db, QPTypeRC, 8*mbps) // a byte per µs
	c, e := ratedPair(t, da, db, QPTypeRC, 0)
	buf := make([]byte, 16384)
	writes(t, a, b, 3, 1024) // frames of 1098 bytes: the full bucket (1152) lets two go
	const t0 = 5000
	for i := range 2 {
		if n, _ := da.Transmit(t0, buf); n != 1098 {
			t.Fatalf("frame %d: %d bytes", i, n)
		}
	}
	deficit := 2*1098 - 1152
	want := Time(t0 + deficit*1000)
	if n, _ := da.Transmit(t0, buf); n != 0 {
		t.Fatalf("a third frame at once")
	}
	if got := da.Deadline(); got != want {
		t.Fatalf("Deadline %d, want %d: the bucket's %d-byte deficit at 1 byte/µs", got, want, deficit)
	}
	// Meanwhile another QP sends.
	writes(t, c, e, 8, 1024)
	for i := range 8 {
		if n, _ := da.Transmit(t0+1, buf); n == 0 {
			t.Fatalf("the unlimited QP is held back at frame %d", i)
		}
	}
	da.Advance(want - 1)
	if n, _ := da.Transmit(want-1, buf); n != 0 {
		t.Fatal("sent before the deadline")
	}
	da.Advance(want)
	if n, _ := da.Transmit(want, buf); n != 1098 {
		t.Fatalf("not sent at the deadline")
	}

	// The owner loop (rateLink fails if it would spin): 200 WRITEs of a
	// packet each at 8 Mbit/s take 200 × 1098 µs, less the bucket.
	d2a, d2b := testDevice(t, 1), testDevice(t, 2)
	x, y := ratedPair(t, d2a, d2b, QPTypeRC, 8*mbps)
	writes(t, x, y, 200, 1024)
	l := newRateLink(t, d2a, d2b)
	start := l.now
	l.run(start + 1000*millisec)
	if x.scq.Len() != 1 {
		t.Fatalf("not all sent: %s", describeQPs(l.devs[:]))
	}
	ta := l.sent[y.qp.Num]
	took := ta.last - ta.first
	// Frame k goes when the bytes before it, less the full bucket, have
	// been made up at a byte per µs.
	wantTook := Time((199*1098 - 1152) * 1000)
	t.Logf("200 frames in %d ns (want %d), %d owner loop turns for %d frames", took, wantTook, l.iters, l.frames)
	if took != wantTook {
		t.Errorf("200 frames took %d ns, want %d", took, wantTook)
	}
	if l.iters > 4*l.frames {
		t.Errorf("%d owner loop turns for %d frames", l.iters, l.frames)
	}
	if d2a.Deadline() != 0 {
		t.Errorf("a deadline %d left when all is done", d2a.Deadline())
	}
}

// Retransmitted requests are injected traffic and count against the
// limit; a lossy link costs the QP goodput, not its rate.
func TestRateLimitRetransmissions(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a, b := ratedPair(t, da, db, QPTypeRC, 100*mbps)
	writes(t, a, b, 32, writeSize)
	l := newRateLink(t, da, db)
	n := 0
	l.drop = func(p *wire.Packet) bool { n++; return n%40 == 0 }
	start := l.now
	l.run(start + 60*millisec)
	c := da.Ports[0].Counters
	t.Logf("%d retransmissions, %d timeouts, %d NAKs", c.Retransmits, c.Timeouts, c.NAKsRcvd)
	if c.Retransmits == 0 {
		t.Fatal("no retransmission")
	}
	span := l.now - start
	checkRate(t, "RC 100 with retransmissions", a.qp, l.rateTo(b.qp.Num, 0, span), l.bytesTo(b.qp.Num), span)
}

// At a low rate a long message takes longer than the ACK timeout
// (64 packets at 2 Mbit/s: 280 ms, the timeout 67 ms): the requester asks
// for an ACK before each pause, so nothing times out.
func TestRateLimitLowRateNoTimeout(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a, b := ratedPair(t, da, db, QPTypeRC, 2*mbps)
	writes(t, a, b, 2, writeSize)
	l := newRateLink(t, da, db)
	l.run(l.now + 1000*millisec)
	c := da.Ports[0].Counters
	if c.Timeouts != 0 || c.Retransmits != 0 || a.scq.Len() != 1 {
		t.Fatalf("%d timeouts, %d retransmissions, %d completions", c.Timeouts, c.Retransmits, a.scq.Len())
	}
	if wc := drain(a.scq); wc[0].Status != WCSuccess {
		t.Fatalf("completion %+v", wc[0])
	}
}

// Through TransmitSegment a limited QP's segments are no bigger than its
// bucket holds, and it keeps to its rate. An owner that wakes exactly at
// its deadlines finds the bucket just made up, and the QP sends a packet
// at a time; one that oversleeps finds more in the bucket and sends
// segments of what it holds; both keep to the rate.
func TestRateLimitSegments(t *testing.T) {
	for _, slack := range []Time{0, 30_000, 800_000} {
		da, db := inProcessDevice(t, 1), inProcessDevice(t, 2)
		a, b := ratedPair(t, da, db, QPTypeRC, 1000*mbps) // bucket: 500 µs = 62500 bytes
		writes(t, a, b, 64, writeSize)
		l := newRateLink(t, da, db)
		l.segments, l.slack = true, slack
		start := l.now
		l.run(start + 20*millisec)
		if len(l.segs) == 0 {
			t.Fatal("no segments")
		}
		biggest := 0
		for _, n := range l.segs {
			if n > 62500 {
				t.Fatalf("a segment of %d bytes, above the bucket's 62500", n)
			}
			biggest = max(biggest, n)
		}
		span := l.now - start
		what := fmt.Sprintf("RC 1000 in segments, owner %d µs late", slack/1000)
		if slack > rateWindow {
			// The bucket overflows while the owner sleeps: below the rate.
			got := l.rateTo(b.qp.Num, 0, span)
			t.Logf("%s: %.1f Mbit/s", what, got/mbps)
			if got > float64(a.qp.attr.RateLimit) {
				t.Errorf("%s: %.1f Mbit/s", what, got/mbps)
			}
		} else {
			checkRate(t, what, a.qp, l.rateTo(b.qp.Num, 0, span), l.bytesTo(b.qp.Num), span)
		}
		t.Logf("%d segments (the biggest %d bytes), %d packets, %d owner loop turns", len(l.segs), biggest,
			l.sent[b.qp.Num].frames-int64(len(l.segs)), l.iters)
	}
}

// The limited path allocates nothing per packet: waiting, the timer, the
// wake-up and the frame.
func TestRateLimitAllocatesNothing(t *testing.T) {
	da, db := testDevice(t, 1), testDevice(t, 2)
	a, b := ratedPair(t, da, db, QPTypeRC, 8*mbps)
	wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 1024), RemoteAddr: b.addr(0), RKey: b.mr.Key}}
	buf := make([]byte, 16384)
	wcs := make([]WC, 4)
	now := Time(1000)
	waits := 0
	round := func() {
		if _, err := da.PostSend(a.qp, wr); err != nil {
			t.Fatal(err)
		}
		for a.scq.Len() == 0 {
			if n, _ := da.Transmit(now, buf); n > 0 {
				db.Receive(now, 1, buf[:n])
				continue
			}
			if m, _ := db.Transmit(now, buf); m > 0 {
				da.Receive(now, 1, buf[:m])
				continue
			}
			if a.qp.req.rateWait != 0 {
				waits++
			}
			if now = da.Deadline(); now == 0 {
				t.Fatal("nothing to do and no deadline")
			}
			da.Advance(now)
		}
		if a.scq.Poll(wcs) != 1 || wcs[0].Status != WCSuccess {
			t.Fatalf("completion %+v", wcs[0])
		}
	}
	for range 4 {
		round()
	}
	waits = 0
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%.1f allocations a rate limited WRITE", allocs)
	}
	if waits < 200 {
		t.Errorf("%d waits for the bucket in 200 rounds: the test does not exercise it", waits)
	}
}
