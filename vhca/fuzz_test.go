package vhca

import (
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// FuzzReceive feeds a connected RC pair, a UC pair and a UD QP frames a
// hostile or broken peer could send: any bytes, resealed when they parse
// as RoCE so that the CRCs do not stop them before the transport does.
// Whatever arrives, the engine must not panic, must keep its queues and
// counters consistent, and must go on working: after the fuzzed frames a
// fresh message between two new QPs still goes through.
func FuzzReceive(f *testing.F) {
	// Seeds: every frame of a short exchange of each kind.
	for _, frame := range fuzzSeedFrames(f) {
		f.Add(frame, uint8(0))
	}
	f.Fuzz(func(t *testing.T, frame []byte, twist uint8) {
		da, db := testDevice(t, 1), testDevice(t, 2)
		a, b := newEndpoint(t, da, QPTypeRC, 1<<16, 1), newEndpoint(t, db, QPTypeRC, 1<<16, 2)
		connect(t, a, b, 100, 200, MTU1024)
		ua, ub := newEndpoint(t, da, QPTypeUC, 1<<16, 1), newEndpoint(t, db, QPTypeUC, 1<<16, 2)
		connect(t, ua, ub, 300, 400, MTU1024)
		db.PostRecv(b.qp, []RecvWR{{WRID: 1, SGL: []SGE{{Addr: 0x10000, Length: 4096, LKey: b.mr.Key}}}})
		db.PostRecv(ub.qp, []RecvWR{{WRID: 1, SGL: []SGE{{Addr: 0x10000, Length: 4096, LKey: ub.mr.Key}}}})

		f := append([]byte(nil), frame...)
		if twist&1 != 0 && len(f) > 0 {
			f[int(twist)%len(f)] ^= twist // a change the seal below then blesses
		}
		reseal(f)
		buf := make([]byte, 16384)
		for _, d := range []*Device{db, da} {
			d.Receive(10, 1, append([]byte(nil), f...))
			for range 64 {
				if n, _ := d.Transmit(11, buf); n == 0 {
					break
				}
			}
			d.Advance(1 << 40) // every timer fires
		}
		// The devices still work: a new pair of QPs exchanges a message.
		x, y := newEndpoint(t, da, QPTypeRC, 1<<16, 1), newEndpoint(t, db, QPTypeRC, 1<<16, 2)
		connect(t, x, y, 7, 9, MTU1024)
		db.PostRecv(y.qp, []RecvWR{{WRID: 5, SGL: []SGE{{Addr: 0x10000, Length: 64, LKey: y.mr.Key}}}})
		da.PostSend(x.qp, []SendWR{{WRID: 6, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000, Length: 64, LKey: x.mr.Key}}}})
		s := newSim(t, 1, linkFaults{}, da, db)
		s.run(1e9, func() bool { return x.scq.Len() > 0 && y.rcq.Len() > 0 })
		var wc [1]WC
		if x.scq.Poll(wc[:]) != 1 || wc[0].Status != WCSuccess {
			t.Fatalf("a fresh RC pair after the fuzzed frame: send %+v", wc[0])
		}
		for _, qp := range []*QP{a.qp, b.qp, ua.qp, ub.qp} {
			if n := int(qp.sqTail - qp.sqHead); n < 0 || n > qp.cap.MaxSendWR || int(qp.sqNext-qp.sqHead) > n {
				t.Fatalf("QP %d send queue indices %d/%d/%d", qp.Num, qp.sqHead, qp.sqNext, qp.sqTail)
			}
		}
	})
}

// fuzzSeedFrames runs a short RC and UC exchange (SEND, WRITE, READ,
// atomics, with their responses) and a UD datagram and returns every
// frame on the wire.
func fuzzSeedFrames(tb testing.TB) [][]byte {
	var frames [][]byte
	for _, typ := range []QPType{QPTypeRC, QPTypeUC} {
		da, db := testDevice(tb, 1), testDevice(tb, 2)
		a, b := newEndpoint(tb, da, typ, 1<<16, 1), newEndpoint(tb, db, typ, 1<<16, 2)
		connect(tb, a, b, 100, 200, MTU1024)
		db.PostRecv(b.qp, []RecvWR{{WRID: 1, SGL: []SGE{{Addr: 0x10000, Length: 4096, LKey: b.mr.Key}}}})
		wrs := []SendWR{
			{Opcode: WRSendWithImm, SGL: []SGE{{Addr: 0x10000, Length: 2500, LKey: a.mr.Key}}},
			{Opcode: WRRDMAWrite, SGL: []SGE{{Addr: 0x10000, Length: 1500, LKey: a.mr.Key}}, RemoteAddr: 0x10000, RKey: b.mr.Key},
		}
		if typ == QPTypeRC {
			wrs = append(wrs,
				SendWR{Opcode: WRRDMARead, SGL: []SGE{{Addr: 0x10000, Length: 2100, LKey: a.mr.Key}}, RemoteAddr: 0x10000, RKey: b.mr.Key},
				SendWR{Opcode: WRAtomicCmpSwap, SGL: []SGE{{Addr: 0x10000, Length: 8, LKey: a.mr.Key}}, RemoteAddr: 0x10000, RKey: b.mr.Key})
		}
		da.PostSend(a.qp, wrs)
		buf := make([]byte, 16384)
		for moved := true; moved; {
			moved = false
			for _, pair := range [][2]*Device{{da, db}, {db, da}} {
				if n, _ := pair[0].Transmit(1, buf); n > 0 {
					frames = append(frames, append([]byte(nil), buf[:n]...))
					pair[1].Receive(1, 1, buf[:n])
					moved = true
				}
			}
		}
	}
	return frames
}

// reseal makes a frame that fails only its UDP checksum or ICRC pass them:
// a zero UDP checksum (accepted over IPv4 and IPv6), then a new ICRC.
func reseal(f []byte) {
	var p wire.Packet
	err := wire.ParseEthernet(f, &p)
	if err == wire.ErrBadUDPChecksum {
		p.UDP().SetChecksum(0)
		err = wire.ParseEthernet(f, &p)
	}
	if err == wire.ErrBadICRC {
		p.Seal()
	}
}
