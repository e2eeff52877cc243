package vhca

import (
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestAckOwn: an ACK taken without a frame (ownack.go) does what its frame
// does, also where the frame does not reach its requester. y answers x's
// SEND with an ACK to the QP its path names; each case runs twice, with
// the frames turned around by ReceiveOwn and with them parsed again
// (ReceiveSegment), and the completions, QP states and port counters
// must agree, while ReceiveOwn sends fewer frames.
func TestAckOwn(t *testing.T) {
	other := wire.IPv4MappedGID([4]byte{192, 0, 2, 99})
	cases := []struct {
		name string
		ackd bool // x's SEND completes
		// to sets up z, the QP y answers, when y does not answer x.
		to func(t *testing.T, d *Device, x, z *endpoint) uint32
	}{
		{name: "to its requester", ackd: true},
		{name: "to no QP", to: func(*testing.T, *Device, *endpoint, *endpoint) uint32 { return 0xABCDE }},
		{name: "to a UD QP", to: func(t *testing.T, d *Device, _, _ *endpoint) uint32 {
			return newEndpoint(t, d, QPTypeUD, 4096, 1).qp.Num
		}},
		{name: "to a QP not sending", to: func(t *testing.T, d *Device, x, z *endpoint) uint32 {
			path(t, z, x.qp.Num, d.Ports[0].GIDs[0].GID, false, 7)
			return z.qp.Num
		}},
		{name: "to a QP on another path", to: func(t *testing.T, d *Device, x, z *endpoint) uint32 {
			path(t, z, x.qp.Num, other, true, 7)
			return z.qp.Num
		}},
		{name: "to a QP that sent nothing", to: func(t *testing.T, d *Device, x, z *endpoint) uint32 {
			path(t, z, x.qp.Num, d.Ports[0].GIDs[0].GID, true, 7)
			return z.qp.Num
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			type outcome struct {
				wcs      []WC
				states   [3]QPState
				counters PortCounters
				frames   int
			}
			var runs [2]outcome
			for mode, own := range []bool{false, true} {
				d := inProcessDevice(t, 1)
				x, y, z := newEndpoint(t, d, QPTypeRC, 4096, 1), newEndpoint(t, d, QPTypeRC, 4096, 1), newEndpoint(t, d, QPTypeRC, 4096, 1)
				path(t, x, y.qp.Num, d.Ports[0].GIDs[0].GID, true, 7)
				answer := x.qp.Num
				if c.to != nil {
					answer = c.to(t, d, x, z)
				}
				path(t, y, answer, d.Ports[0].GIDs[0].GID, true, 7)
				if _, err := d.PostRecv(y.qp, []RecvWR{{WRID: 7, SGL: []SGE{{Addr: 0x10000, Length: 64, LKey: y.mr.Key}}}}); err != nil {
					t.Fatal(err)
				}
				if _, err := d.PostSend(x.qp, []SendWR{{WRID: 8, Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: []byte("ping")}}); err != nil {
					t.Fatal(err)
				}
				o := outcome{frames: turnAround(t, d, own, 100)}
				for _, cq := range []*CQ{x.scq, x.rcq, y.scq, y.rcq, z.scq, z.rcq} {
					o.wcs = append(o.wcs, (&endpoint{}).poll(cq)...)
				}
				for i, e := range []*endpoint{x, y, z} {
					o.states[i] = e.qp.state
				}
				o.counters = d.Ports[0].Counters
				runs[mode] = o
			}
			parsed, own := runs[0], runs[1]
			if len(parsed.wcs) != len(own.wcs) {
				t.Fatalf("completions parsed %+v, from ReceiveOwn %+v", parsed.wcs, own.wcs)
			}
			for i := range parsed.wcs {
				if parsed.wcs[i] != own.wcs[i] {
					t.Errorf("completion %d parsed %+v, from ReceiveOwn %+v", i, parsed.wcs[i], own.wcs[i])
				}
			}
			if want := 1 + btoi(c.ackd); len(own.wcs) != want {
				t.Errorf("%d completions, want %d: %+v", len(own.wcs), want, own.wcs)
			}
			if parsed.states != own.states {
				t.Errorf("QP states parsed %v, from ReceiveOwn %v", parsed.states, own.states)
			}
			if parsed.counters != own.counters {
				t.Errorf("counters parsed %+v, from ReceiveOwn %+v", parsed.counters, own.counters)
			}
			if parsed.frames != 2 || own.frames != 1 {
				t.Errorf("frames: %d parsed, %d from ReceiveOwn; want 2 (SEND and ACK) and 1", parsed.frames, own.frames)
			}
		})
	}
}

// TestAckOwnToItself: a QP connected to itself whose READ response is
// lost, and whose SEND's ACK then implies a NAK with no retry left: the
// ACK taken without a frame ends the QP in Error, as the frame does,
// while the QP is in the middle of its own response queue.
func TestAckOwnToItself(t *testing.T) {
	var states [2]QPState
	var wcs [2][]WC
	for mode, own := range []bool{false, true} {
		d := inProcessDevice(t, 1)
		x := newEndpoint(t, d, QPTypeRC, 1<<16, 1)
		path(t, x, x.qp.Num, d.Ports[0].GIDs[0].GID, true, 0)
		if _, err := d.PostRecv(x.qp, []RecvWR{{WRID: 9, SGL: []SGE{{Addr: 0x18000, Length: 64, LKey: x.mr.Key}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.PostSend(x.qp, []SendWR{
			{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000, Length: 8, LKey: x.mr.Key}}, RemoteAddr: 0x10100, RKey: x.mr.Key},
			{WRID: 2, Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: []byte("ping")},
		}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16384)
		for frame := 0; ; frame++ {
			if frame == 20 {
				t.Fatal("no end after 20 frames")
			}
			n, seg, port := d.TransmitSegment(1, buf)
			if n == 0 {
				break
			}
			if d.tx.Opcode == wire.RCRDMAReadResponseOnly {
				continue // lost
			}
			if own {
				d.ReceiveOwn(1, port)
			} else {
				d.ReceiveSegment(1, port, buf[:n], seg)
			}
		}
		states[mode], wcs[mode] = x.qp.state, x.poll(x.scq)
	}
	if states[0] != QPStateError || states[1] != states[0] {
		t.Errorf("QP states: %v parsed, %v from ReceiveOwn; want Error", states[0], states[1])
	}
	if len(wcs[0]) == 0 || len(wcs[0]) != len(wcs[1]) {
		t.Fatalf("send completions parsed %+v, from ReceiveOwn %+v", wcs[0], wcs[1])
	}
	for i := range wcs[0] {
		if wcs[0][i] != wcs[1][i] {
			t.Errorf("completion %d parsed %+v, from ReceiveOwn %+v", i, wcs[0][i], wcs[1][i])
		}
	}
}

// path takes an RC endpoint to RTR with a path to QP dqpn at GID dgid on
// its own port, and on to RTS, with retryCnt retries, if rts.
func path(t *testing.T, e *endpoint, dqpn uint32, dgid wire.GID, rts bool, retryCnt uint8) {
	t.Helper()
	d := e.d
	init := QPAttr{State: QPStateInit, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}
	if err := d.ModifyQP(e.qp, &init, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	rtr := QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPN: dqpn, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AV: AV{Port: 1, IsGlobal: true, DMAC: d.Ports[0].MAC, GRH: GlobalRoute{DGID: dgid, HopLimit: 64}}}
	if err := d.ModifyQP(e.qp, &rtr, QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	if !rts {
		return
	}
	r := QPAttr{State: QPStateRTS, Timeout: 14, RetryCnt: retryCnt, RNRRetry: 7, MaxRdAtomic: 1}
	if err := d.ModifyQP(e.qp, &r, QPAttrState|QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
