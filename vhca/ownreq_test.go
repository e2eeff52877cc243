package vhca

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// TestRequestOwn: with LoopsOwn, the requests between two QPs of one
// device that go without a frame (ownreq.go) do what their frames do.
// Each case runs four times: its frames parsed again (ReceiveSegment),
// turned around from their views (ReceiveOwn), with LoopsOwn, and with
// LoopsOwn and a Completed hook, as verbsd has them (the completion
// published at once, and the ACK taken at once where the responder's
// turn would be the next: TestAckOwnAtOnce); the
// completions, memory, QP states and PSNs must agree, and the port
// counters with ReceiveOwn's (parsed, the ACKs take other turns),
// and LoopsOwn must send as many frames fewer as the case expects to go
// without one. The cases where a frame must go (errors, RNR, messages of
// several packets, retries) check that nothing is taken from it.
func TestRequestOwn(t *testing.T) {
	const base = 0x10000
	sge := func(e *endpoint, off, n uint32) []SGE {
		return []SGE{{Addr: base + uint64(off), Length: n, LKey: e.mr.Key}}
	}
	recv := func(t *testing.T, e *endpoint, wrid uint64, off, n uint32) {
		t.Helper()
		if _, err := e.d.PostRecv(e.qp, []RecvWR{{WRID: wrid, SGL: sge(e, off, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(t *testing.T, e *endpoint, wrs ...SendWR) {
		t.Helper()
		for i := range wrs {
			wrs[i].Flags |= SendSignaled
		}
		if _, err := e.d.PostSend(e.qp, wrs); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		direct int // requests that go without a frame
		reads  int // of them, READs: their responses go without a frame too
		self   bool
		run    func(t *testing.T, x, y *endpoint)
		// then, if set, runs once the frames are out, and the frames
		// go again a second later (timers fired).
		then func(t *testing.T, x, y *endpoint)
	}{
		{name: "sends and writes", direct: 8, run: func(t *testing.T, x, y *endpoint) {
			for i := range 6 {
				recv(t, y, uint64(10+i), uint32(i)*1024, 1024)
			}
			send(t, x,
				SendWR{WRID: 1, Opcode: WRSend, Flags: SendInline, InlineData: []byte("inline 8")},
				SendWR{WRID: 2, Opcode: WRSend, SGL: sge(x, 0, 100)},
				SendWR{WRID: 3, Opcode: WRSendWithImm, Imm: 0xC0FFEE},
				SendWR{WRID: 4, Opcode: WRSend, Flags: SendSolicited, SGL: sge(x, 7, 200)},
				SendWR{WRID: 5, Opcode: WRRDMAWrite, SGL: sge(x, 0, 1000), RemoteAddr: base + 0x2000, RKey: y.mr.Key},
				SendWR{WRID: 6, Opcode: WRRDMAWriteWithImm, SGL: sge(x, 3, 64), RemoteAddr: base + 0x3000, RKey: y.mr.Key, Imm: 7},
				SendWR{WRID: 7, Opcode: WRRDMAWrite, RemoteAddr: 1, RKey: 0xBAD}, // zero length: no key check
				SendWR{WRID: 8, Opcode: WRSend, SGL: sge(x, 0, 1024)},            // exactly the MTU
			)
		}},
		{name: "several packets, then one", direct: 1, run: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 4096)
			recv(t, y, 11, 0x2000, 64)
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, SGL: sge(x, 0, 3000)}, SendWR{WRID: 2, Opcode: WRSend, SGL: sge(x, 0, 8)})
		}},
		{name: "no receive (RNR)", run: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, SGL: sge(x, 0, 8)})
		}},
		{name: "sent again after an RNR NAK, then another", direct: 1, run: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, SGL: sge(x, 0, 8)})
		}, then: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 64)
			recv(t, y, 11, 64, 64)
			send(t, x, SendWR{WRID: 2, Opcode: WRSend, SGL: sge(x, 8, 8)})
		}},
		{name: "one at a time, as a ping-pong", direct: 2, run: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 64)
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, Flags: SendInline, InlineData: []byte("ping")})
		}, then: func(t *testing.T, x, y *endpoint) {
			recv(t, x, 11, 0x100, 64)
			send(t, y, SendWR{WRID: 2, Opcode: WRSend, Flags: SendInline, InlineData: []byte("pong")})
		}},
		{name: "the path's GID deleted after a message", direct: 1, run: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 64)
			recv(t, y, 11, 64, 64)
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, Flags: SendInline, InlineData: []byte("before")})
		}, then: func(t *testing.T, x, y *endpoint) {
			// The next SEND's frame no longer matches y's path: it is
			// dropped (RcvAddrDrops), and not taken without a frame.
			if _, err := x.d.DelGID(1, x.d.Ports[0].GIDs[0].GID); err != nil {
				t.Fatal(err)
			}
			send(t, x, SendWR{WRID: 2, Opcode: WRSend, Flags: SendInline, InlineData: []byte("after")})
		}},
		{name: "WRITE with immediate and no receive", run: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMAWriteWithImm, SGL: sge(x, 0, 8), RemoteAddr: base, RKey: y.mr.Key})
		}},
		{name: "receive too small", run: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 4)
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, SGL: sge(x, 0, 8)})
		}},
		{name: "receive with a bad key", run: func(t *testing.T, x, y *endpoint) {
			if _, err := y.d.PostRecv(y.qp, []RecvWR{{WRID: 10, SGL: []SGE{{Addr: base, Length: 64, LKey: y.mr.Key + 1}}}}); err != nil {
				t.Fatal(err)
			}
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, SGL: sge(x, 0, 8)})
		}},
		{name: "bad R_Key", run: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMAWrite, SGL: sge(x, 0, 8), RemoteAddr: base, RKey: y.mr.Key ^ 1})
		}},
		{name: "WRITE past the region", run: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMAWrite, SGL: sge(x, 0, 8), RemoteAddr: base + uint64(len(y.mem)) - 4, RKey: y.mr.Key})
		}},
		{name: "bad L_Key", run: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 64)
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, SGL: []SGE{{Addr: base, Length: 8, LKey: x.mr.Key ^ 1}}})
		}},
		{name: "fenced behind a READ", direct: 1, run: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 64)
			send(t, x,
				// Three response packets: the SEND's turn comes
				// between them.
				SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x3000, 3000), RemoteAddr: base + 0x100, RKey: y.mr.Key},
				SendWR{WRID: 2, Opcode: WRSend, Flags: SendFence, SGL: sge(x, 0x3000, 16)},
			)
		}},
		{name: "responder not ready", run: func(t *testing.T, x, y *endpoint) {
			if err := y.d.ModifyQP(y.qp, &QPAttr{State: QPStateReset}, QPAttrState); err != nil {
				t.Fatal(err)
			}
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, Flags: SendInline, InlineData: []byte("x")})
		}},
		{name: "responder out of sequence", run: func(t *testing.T, x, y *endpoint) {
			recv(t, y, 10, 0, 64)
			y.qp.resp.epsn = 5 // as if packets were lost
			send(t, x, SendWR{WRID: 1, Opcode: WRSend, Flags: SendInline, InlineData: []byte("x")})
		}},
		{name: "READ", direct: 1, reads: 1, run: func(t *testing.T, x, y *endpoint) {
			for i := range 200 {
				y.mem[0x2000+i] = byte(i ^ 0x5A)
			}
			idle(t, x.d) // the response's turn is the next only on an empty ring
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x100, 200), RemoteAddr: base + 0x2000, RKey: y.mr.Key})
		}},
		{name: "READ behind the turns since RTS", run: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x100, 8), RemoteAddr: base + 0x2000, RKey: y.mr.Key})
		}},
		{name: "READs one at a time", direct: 2, reads: 2, run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x100, 8), RemoteAddr: base + 0x2000, RKey: y.mr.Key})
		}, then: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 2, Opcode: WRRDMARead, SGL: sge(x, 0x200, 1024), RemoteAddr: base, RKey: y.mr.Key})
		}},
		{name: "READ of nothing", direct: 1, reads: 1, run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, RemoteAddr: 1, RKey: 0xBAD})
		}},
		{name: "READ of several packets", run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x100, 3000), RemoteAddr: base + 0x2000, RKey: y.mr.Key})
		}},
		{name: "READs two in a row", direct: 2, reads: 2, run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x,
				SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x100, 8), RemoteAddr: base + 0x2000, RKey: y.mr.Key},
				SendWR{WRID: 2, Opcode: WRRDMARead, SGL: sge(x, 0x200, 8), RemoteAddr: base + 0x2100, RKey: y.mr.Key},
			)
		}},
		{name: "READ, a WRITE and a SEND behind it", direct: 3, reads: 1, run: func(t *testing.T, x, y *endpoint) {
			// The READ's response comes before the requests behind it,
			// which frames send before it: the same here, their memory
			// apart.
			idle(t, x.d)
			recv(t, y, 10, 0x3000, 64)
			send(t, x,
				SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x100, 64), RemoteAddr: base + 0x2000, RKey: y.mr.Key},
				SendWR{WRID: 2, Opcode: WRRDMAWrite, SGL: sge(x, 0x400, 64), RemoteAddr: base + 0x2800, RKey: y.mr.Key},
				SendWR{WRID: 3, Opcode: WRSend, Flags: SendInline, InlineData: []byte("behind")},
			)
		}},
		{name: "READ with a bad R_Key", run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x100, 8), RemoteAddr: base, RKey: y.mr.Key ^ 1})
		}},
		{name: "READ into a bad L_Key", run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, SGL: []SGE{{Addr: base, Length: 8, LKey: x.mr.Key ^ 1}}, RemoteAddr: base, RKey: y.mr.Key})
		}},
		{name: "READ from itself, the regions overlapping", self: true, direct: 1, reads: 1, run: func(t *testing.T, x, _ *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRRDMARead, SGL: sge(x, 0x110, 64), RemoteAddr: base + 0x100, RKey: x.mr.Key})
		}},
		{name: "atomics one at a time", direct: 2, reads: 2, run: func(t *testing.T, x, y *endpoint) {
			binary.NativeEndian.PutUint64(y.mem[0x3000:], 40)
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRAtomicFetchAdd, SGL: sge(x, 0x100, 8), RemoteAddr: base + 0x3000, RKey: y.mr.Key, CompareAdd: 2})
		}, then: func(t *testing.T, x, y *endpoint) {
			send(t, x, SendWR{WRID: 2, Opcode: WRAtomicCmpSwap, SGL: sge(x, 0x108, 8), RemoteAddr: base + 0x3000, RKey: y.mr.Key, CompareAdd: 42, Swap: 7})
		}},
		{name: "atomic, its SGL bad", run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRAtomicFetchAdd, SGL: []SGE{{Addr: base, Length: 8, LKey: x.mr.Key ^ 1}}, RemoteAddr: base + 0x3000, RKey: y.mr.Key, CompareAdd: 1})
		}},
		{name: "atomic, misaligned", run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRAtomicFetchAdd, SGL: sge(x, 0x100, 8), RemoteAddr: base + 0x3004, RKey: y.mr.Key, CompareAdd: 1})
		}},
		{name: "atomic, bad R_Key", run: func(t *testing.T, x, y *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRAtomicCmpSwap, SGL: sge(x, 0x100, 8), RemoteAddr: base + 0x3000, RKey: y.mr.Key ^ 1})
		}},
		{name: "atomic on itself", self: true, direct: 1, reads: 1, run: func(t *testing.T, x, _ *endpoint) {
			idle(t, x.d)
			send(t, x, SendWR{WRID: 1, Opcode: WRAtomicFetchAdd, SGL: sge(x, 0x100, 8), RemoteAddr: base + 0x100, RKey: x.mr.Key, CompareAdd: 5})
		}},
		{name: "to itself", self: true, direct: 2, run: func(t *testing.T, x, _ *endpoint) {
			recv(t, x, 10, 0x3000, 64)
			send(t, x,
				SendWR{WRID: 1, Opcode: WRSend, SGL: sge(x, 0, 32)},
				SendWR{WRID: 2, Opcode: WRRDMAWrite, SGL: sge(x, 0, 32), RemoteAddr: base + 0x100, RKey: x.mr.Key},
			)
		}},
	}
	for _, c := range cases {
		for _, inProcess := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/inProcess=%v", c.name, inProcess), func(t *testing.T) {
				testRequestOwn(t, inProcess, c.direct, c.direct+c.reads, c.self, c.run, c.then)
				// TestAckOwnAtOnce checks when the ACK goes.
				if c.name == "one at a time, as a ping-pong" && completedOwn != 2 {
					t.Errorf("Completed called %d times, want 2 (ping and pong)", completedOwn)
				}
			})
		}
	}
}

// saved is the frames LoopsOwn must save: one a request, two a READ.
func testRequestOwn(t *testing.T, inProcess bool, direct, saved int, self bool, run, then func(t *testing.T, x, y *endpoint)) {
	var runs [4]ownOutcome
	completedOwn = 0
	for mode := range runs {
		d := testDevice(t, 1)
		if inProcess {
			d = inProcessDevice(t, 1)
		}
		x, y := newEndpoint(t, d, QPTypeRC, 1<<15, 1), newEndpoint(t, d, QPTypeRC, 1<<15, 1)
		for i := range x.mem {
			x.mem[i] = byte(i*7 + 3)
		}
		gid := d.Ports[0].GIDs[0].GID
		if self {
			path(t, x, x.qp.Num, gid, true, 7)
		} else {
			path(t, x, y.qp.Num, gid, true, 7)
			path(t, y, x.qp.Num, gid, true, 7)
		}
		d.LoopsOwn = mode >= 2
		if mode == 3 {
			d.Completed = func() { completedOwn++ }
		}
		run(t, x, y)
		o := ownOutcome{}
		o.frames, o.direct = loopOwn(t, d, 1, mode != 0, 1000)
		if then != nil {
			then(t, x, y)
			const later = Time(1e9)
			d.Advance(later)
			f, k := loopOwn(t, d, later, mode != 0, 1000)
			o.frames, o.direct = o.frames+f, o.direct+k
		}
		o.record(x, y)
		o.counters = d.Ports[0].Counters
		runs[mode] = o
	}
	// Frames parsed again take other turns than frames turned
	// around (whose ACKs go without frames): their ACKs may be
	// coalesced otherwise, and counted so.
	runs[0].counters = runs[2].counters
	for mode, name := range []string{"parsed", "from ReceiveOwn", "without frames", "with Completed"} {
		if err := runs[mode].same(&runs[1]); err != nil {
			t.Errorf("%s and from ReceiveOwn: %v", name, err)
		}
	}
	for _, r := range runs[2:] {
		if r.direct != direct || r.frames != runs[1].frames-saved {
			t.Errorf("frames %d with LoopsOwn (and %d without), %d from ReceiveOwn; want %d without, %d frames saved",
				r.frames, r.direct, runs[1].frames, direct, saved)
		}
	}
	if runs[0].direct != 0 || runs[1].direct != 0 {
		t.Errorf("requests without frames and LoopsOwn off: %d, %d", runs[0].direct, runs[1].direct)
	}
}

// idle takes the turns on d's transmit ring that send nothing (the QPs'
// since RTS): a test that needs the ring empty calls it before posting.
func idle(t *testing.T, d *Device) {
	t.Helper()
	if frames, direct := loopOwn(t, d, 1, true, 10); frames+direct != 0 {
		t.Fatalf("idle: %d frames and %d requests went", frames, direct)
	}
}

// completedOwn counts the calls of Completed in testRequestOwn's last
// run with it.
var completedOwn int

// ownOutcome is what TestRequestOwn compares.
type ownOutcome struct {
	wcs      []WC
	mem      []byte
	state    [2]QPState
	psn      [2][5]uint32 // req.psn, req.unacked, resp.epsn, resp.msn, sqHead
	counters PortCounters
	frames   int
	direct   int
}

func (o *ownOutcome) record(x, y *endpoint) {
	for _, cq := range []*CQ{x.scq, x.rcq, y.scq, y.rcq} {
		o.wcs = append(o.wcs, x.poll(cq)...)
	}
	o.mem = append(bytes.Clone(x.mem), y.mem...)
	for i, e := range []*endpoint{x, y} {
		q := e.qp
		o.state[i] = q.state
		o.psn[i] = [5]uint32{q.req.psn, q.req.unacked, q.resp.epsn, q.resp.msn, q.sqHead}
	}
}

func (o *ownOutcome) same(w *ownOutcome) error {
	switch {
	case len(o.wcs) != len(w.wcs):
		return fmt.Errorf("completions %+v and %+v", o.wcs, w.wcs)
	case !bytes.Equal(o.mem, w.mem):
		return fmt.Errorf("memory differs")
	case o.state != w.state:
		return fmt.Errorf("QP states %v and %v", o.state, w.state)
	case o.psn != w.psn:
		return fmt.Errorf("PSNs %v and %v", o.psn, w.psn)
	case o.counters != w.counters:
		return fmt.Errorf("counters %+v and %+v", o.counters, w.counters)
	}
	for i := range o.wcs {
		if o.wcs[i] != w.wcs[i] {
			return fmt.Errorf("completion %d: %+v and %+v", i, o.wcs[i], w.wcs[i])
		}
	}
	return nil
}

// loopOwn is turnAround that counts apart the requests that went without
// a frame (Transmit's 0 with a port).
func loopOwn(t testing.TB, d *Device, now Time, own bool, most int) (frames, direct int) {
	buf := make([]byte, 16384)
	for {
		n, seg, port := d.TransmitSegment(now, buf)
		if n == 0 && port == 0 {
			return frames, direct
		}
		if frames+direct == most {
			t.Fatalf("no end after %d frames", most)
		}
		if n == 0 {
			direct++
			continue
		}
		frames++
		if own {
			d.ReceiveOwn(now, port)
		} else {
			d.ReceiveSegment(now, port, buf[:n], seg)
		}
	}
}

// ownTrio is a device with LoopsOwn and three RC QPs of memBytes each,
// ready to send: x and y connected to each other, z to x. Their turns
// since RTS are taken: the transmit ring is empty.
func ownTrio(t *testing.T, memBytes int) (d *Device, x, y, z *endpoint) {
	d = inProcessDevice(t, 1)
	d.LoopsOwn = true
	x, y, z = newEndpoint(t, d, QPTypeRC, memBytes, 1), newEndpoint(t, d, QPTypeRC, memBytes, 1), newEndpoint(t, d, QPTypeRC, memBytes, 1)
	gid := d.Ports[0].GIDs[0].GID
	path(t, x, y.qp.Num, gid, true, 7)
	path(t, y, x.qp.Num, gid, true, 7)
	path(t, z, x.qp.Num, gid, true, 7)
	loopOwn(t, d, 1, true, 10)
	return d, x, y, z
}

// TestAckOwnAtOnce: with Completed set and no QP on the transmit ring,
// the request's ACK is taken in the same Transmit that carried it: the
// sender's completion is there when it returns, published after the
// receiver's (Completed sees only the receive). With another QP on the
// ring, the ACK waits for its turn.
func TestAckOwnAtOnce(t *testing.T) {
	for _, busy := range []bool{false, true} {
		d, x, y, z := ownTrio(t, 4096)
		var atCompleted [2]int // receive and send completions when Completed ran
		d.Completed = func() { atCompleted = [2]int{y.rcq.Len(), x.scq.Len()} }
		if _, err := d.PostRecv(y.qp, []RecvWR{{WRID: 7, SGL: []SGE{{Addr: 0x10000, Length: 64, LKey: y.mr.Key}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.PostSend(x.qp, []SendWR{{WRID: 8, Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: []byte("ping")}}); err != nil {
			t.Fatal(err)
		}
		if busy {
			d.schedule(z.qp) // a QP whose turn comes after x's
		}
		n, _, port := d.TransmitSegment(1, make([]byte, 4096))
		if n != 0 || port == 0 {
			t.Fatalf("busy %v: Transmit returned %d, port %d; want the request without a frame", busy, n, port)
		}
		if atCompleted != [2]int{1, 0} {
			t.Errorf("busy %v: at Completed %d receive and %d send completions, want 1 and 0", busy, atCompleted[0], atCompleted[1])
		}
		if got, want := x.scq.Len(), btoi(!busy); got != want {
			t.Errorf("busy %v: %d send completions after the Transmit, want %d", busy, got, want)
		}
		loopOwn(t, d, 1, true, 10)
		if x.scq.Len() != 1 || y.rcq.Len() != 1 {
			t.Errorf("busy %v: %d send and %d receive completions in the end, want 1 and 1", busy, x.scq.Len(), y.rcq.Len())
		}
	}
}

// TestSendNow: SendNow takes a QP's turn when it is the only QP on the
// transmit ring: the request and its ACK go at once, both completions
// out and nothing left for Transmit. With another QP on the ring first,
// or a request that needs a frame, the QP keeps its place and Transmit
// does the rest, as it would have.
func TestSendNow(t *testing.T) {
	cases := []struct {
		name  string
		busy  bool // another QP is on the ring first
		big   bool // a request of two packets: it needs frames
		taken bool // SendNow takes the turn
	}{
		{name: "alone", taken: true},
		{name: "behind another QP", busy: true},
		{name: "needs a frame", big: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, x, y, z := ownTrio(t, 8192)
			completed := 0
			d.Completed = func() { completed++ }
			if _, err := d.PostRecv(y.qp, []RecvWR{{WRID: 7, SGL: []SGE{{Addr: 0x10000, Length: 4096, LKey: y.mr.Key}}}}); err != nil {
				t.Fatal(err)
			}
			if c.busy {
				d.schedule(z.qp)
			}
			wr := SendWR{WRID: 8, Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: []byte("ping")}
			if c.big {
				wr = SendWR{WRID: 8, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000, Length: 2000, LKey: x.mr.Key}}}
			}
			if _, err := d.PostSend(x.qp, []SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if got := d.SendNow(1, x.qp); got != c.taken {
				t.Fatalf("SendNow = %v, want %v", got, c.taken)
			}
			if c.taken {
				if x.scq.Len() != 1 || y.rcq.Len() != 1 || completed != 1 || d.Ready() {
					t.Fatalf("after SendNow: %d send and %d receive completions, Completed %d times, Ready %v; want 1, 1, 1, false",
						x.scq.Len(), y.rcq.Len(), completed, d.Ready())
				}
			} else if x.scq.Len() != 0 || y.rcq.Len() != 0 || !x.qp.ready {
				t.Fatalf("SendNow took nothing, yet %d send and %d receive completions, x on the ring %v",
					x.scq.Len(), y.rcq.Len(), x.qp.ready)
			}
			loopOwn(t, d, 1, true, 20)
			if x.scq.Len() != 1 || y.rcq.Len() != 1 {
				t.Fatalf("in the end %d send and %d receive completions, want 1 and 1", x.scq.Len(), y.rcq.Len())
			}
			wcs := x.poll(y.rcq)
			if wcs[0].Status != WCSuccess || wcs[0].ByteLen != uint32(wrLen(&wr)) {
				t.Errorf("receive completion %+v", wcs[0])
			}
		})
	}
}

func wrLen(wr *SendWR) int {
	if wr.Flags&SendInline != 0 {
		return len(wr.InlineData)
	}
	return int(wr.SGL[0].Length)
}
