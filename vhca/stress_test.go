package vhca

import (
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"
)

var stressMessages = flag.Int("vhca.messages", 3000, "messages per seed and loss rate in TestRCStress (the issue's full run: 1000000)")

const (
	slots    = 64
	slotSize = 64 << 10
	window   = 32 // messages in flight: below slots, so no slot is reused before it is checked
)

// stressOp is one message of the mixed stream, all derived from its index
// and the seed so that both sides know what to expect.
type stressOp struct {
	op   WROpcode
	size uint32
}

func stressPlan(seed uint64, i int) stressOp {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	ops := []WROpcode{WRSend, WRSend, WRSendWithImm, WRRDMAWriteWithImm, WRRDMAWrite, WRRDMARead, WRAtomicFetchAdd, WRAtomicCmpSwap}
	op := ops[r.IntN(len(ops))]
	var size uint32
	switch r.IntN(4) {
	case 0:
		size = uint32(r.IntN(65))
	case 1:
		size = uint32(r.IntN(4097))
	case 2:
		size = uint32(r.IntN(slotSize + 1))
	default:
		size = uint32(r.IntN(1025))
	}
	if op == WRAtomicFetchAdd || op == WRAtomicCmpSwap {
		size = 8
	}
	return stressOp{op, size}
}

// fill writes message i's content: every byte depends on the seed, the
// index and the position.
func fill(b []byte, seed uint64, i int) {
	x := uint32(seed) ^ uint32(i)*0x9E3779B1
	for k := range b {
		x = x*1664525 + 1013904223
		b[k] = byte(x >> 24)
	}
}

// TestRCStress runs a stream of mixed RC messages (SEND, SEND with
// immediate, WRITE, WRITE with immediate, READ, FetchAdd, CmpSwap; 0 to 64
// KiB) through the simulated link at 0%, 1%, 10% and 30% loss with
// duplication, reordering and corruption, for several seeds, and checks
// that every byte arrives exactly once, in order, with completions in order
// and of the right status and length.
func TestRCStress(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.10, 0.30} {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("loss=%.0f%%/seed=%d", loss*100, seed), func(t *testing.T) {
				faults := linkFaults{Loss: loss, Dup: loss / 2, Reorder: loss, Corrupt: loss / 10, Latency: 2000, Jitter: 20000}
				runStress(t, seed, faults, *stressMessages)
			})
		}
	}
}

func runStress(t *testing.T, seed uint64, faults linkFaults, n int) {
	start := time.Now()
	da, db := testDevice(t, 1), testDevice(t, 2)
	memA := slots*slotSize + slots*8
	// B: receive buffers, WRITE targets, READ sources, the atomic counter.
	const writeBase, readBase, counter = slots * slotSize, 2 * slots * slotSize, 3 * slots * slotSize
	memB := 3*slots*slotSize + 8
	a, b := newEndpoint(t, da, QPTypeRC, memA, 1), newEndpoint(t, db, QPTypeRC, memB, 2)
	// Short timers so that losses cost little virtual time; infinite RNR
	// retry since the receiver posts receives as it goes.
	connect(t, a, b, wireWrapPSN(seed), wireWrapPSN(seed+1), MTU1024)
	setTimeout(t, a, 8)
	s := newSim(t, seed, faults, da, db)

	fill(b.mem[readBase:readBase+slots*slotSize], seed, -1)
	var want, sum uint64 // expected counter value after the atomics so far

	posted, completed, recvPosted, recvDone := 0, 0, 0, 0
	sendOrder := []int{} // message index of each send-side completion expected, in order
	recvOrder := []int{} // message index of each receive completion expected, in order
	var wcs [256]WC
	check := func() bool {
		// Keep receives posted ahead of the SENDs and WRITEs with
		// immediate.
		for recvPosted-recvDone < window*2 {
			slot := uint64(recvPosted % slots)
			if _, err := db.PostRecv(b.qp, []RecvWR{{WRID: uint64(recvPosted), SGL: []SGE{{Addr: 0x10000 + slot*slotSize, Length: slotSize, LKey: b.mr.Key}}}}); err != nil {
				t.Fatal(err)
			}
			recvPosted++
		}
		// Post up to the window.
		for posted < n && posted-completed < window {
			i := posted
			op := stressPlan(seed, i)
			slot := uint64(i % slots)
			local := 0x10000 + slot*slotSize
			wr := SendWR{WRID: uint64(i), Opcode: op.op, Flags: SendSignaled, Imm: uint32(i),
				SGL: []SGE{{Addr: local, Length: op.size, LKey: a.mr.Key}}}
			switch op.op {
			case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
				fill(a.mem[slot*slotSize:slot*slotSize+uint64(op.size)], seed, i)
				wr.RemoteAddr, wr.RKey = 0x10000+writeBase+slot*slotSize, b.mr.Key
			case WRRDMARead:
				wr.RemoteAddr, wr.RKey = 0x10000+readBase+slot*slotSize, b.mr.Key
			case WRAtomicFetchAdd, WRAtomicCmpSwap:
				wr.SGL[0].Addr = 0x10000 + slots*slotSize + slot*8
				wr.RemoteAddr, wr.RKey = 0x10000+counter, b.mr.Key
				wr.CompareAdd = uint64(i) + 1
				if op.op == WRAtomicCmpSwap {
					wr.CompareAdd, wr.Swap = want, want+uint64(i)+1
				}
			}
			if _, err := da.PostSend(a.qp, []SendWR{wr}); err != nil {
				t.Fatalf("post %d: %v", i, err)
			}
			if op.op == WRSend || op.op == WRSendWithImm || op.op == WRRDMAWriteWithImm {
				recvOrder = append(recvOrder, i)
			}
			if op.op == WRAtomicFetchAdd || op.op == WRAtomicCmpSwap {
				want += uint64(i) + 1
			}
			sendOrder = append(sendOrder, i)
			posted++
		}
		// Send completions: in order, each checked.
		for k := a.scq.Poll(wcs[:]); k > 0; k = a.scq.Poll(wcs[:]) {
			for _, wc := range wcs[:k] {
				i := sendOrder[0]
				sendOrder = sendOrder[1:]
				op := stressPlan(seed, i)
				if wc.Status != WCSuccess || wc.WRID != uint64(i) {
					t.Fatalf("send completion %+v, want WR %d (%v) success", wc, i, op.op)
				}
				slot := uint64(i % slots)
				switch op.op {
				case WRRDMARead:
					got := a.mem[slot*slotSize : slot*slotSize+uint64(op.size)]
					src := b.mem[readBase+slot*slotSize : readBase+slot*slotSize+uint64(op.size)]
					if crc32.ChecksumIEEE(got) != crc32.ChecksumIEEE(src) {
						t.Fatalf("READ %d of %d bytes: wrong data", i, op.size)
					}
				case WRAtomicFetchAdd, WRAtomicCmpSwap:
					orig := binary.NativeEndian.Uint64(a.mem[slots*slotSize+slot*8:])
					if orig != sum {
						t.Fatalf("atomic %d returned %d, want %d (executed twice or lost?)", i, orig, sum)
					}
					sum += uint64(i) + 1
				case WRRDMAWrite:
					exp := make([]byte, op.size)
					fill(exp, seed, i)
					if crc32.ChecksumIEEE(b.mem[writeBase+slot*slotSize:writeBase+slot*slotSize+uint64(op.size)]) != crc32.ChecksumIEEE(exp) {
						t.Fatalf("WRITE %d of %d bytes: wrong data", i, op.size)
					}
				}
				completed++
			}
		}
		for k := b.rcq.Poll(wcs[:]); k > 0; k = b.rcq.Poll(wcs[:]) {
			for _, wc := range wcs[:k] {
				i := recvOrder[0]
				recvOrder = recvOrder[1:]
				op := stressPlan(seed, i)
				if wc.Status != WCSuccess || wc.WRID != uint64(recvDone) {
					t.Fatalf("receive completion %+v for message %d, want WR %d success", wc, i, recvDone)
				}
				if wc.ByteLen != op.size || (op.op != WRSend) != (wc.Flags&WCWithImm != 0) || wc.Flags&WCWithImm != 0 && wc.Imm != uint32(i) {
					t.Fatalf("receive completion %+v for message %d (%v, %d bytes)", wc, i, op.op, op.size)
				}
				exp := make([]byte, op.size)
				fill(exp, seed, i)
				at := uint64(recvDone%slots) * slotSize
				if op.op == WRRDMAWriteWithImm {
					at = writeBase + uint64(i%slots)*slotSize
				}
				if crc32.ChecksumIEEE(b.mem[at:at+uint64(op.size)]) != crc32.ChecksumIEEE(exp) {
					t.Fatalf("message %d (%v, %d bytes): wrong data", i, op.op, op.size)
				}
				recvDone++
			}
		}
		return completed == n && len(recvOrder) == 0
	}
	s.run(Time(n)*50e6, check) // 50 ms of virtual time a message at most
	if completed != n || len(recvOrder) != 0 {
		t.Fatalf("after %v of virtual time: %d of %d messages completed, %d receives missing; QP states %s %s",
			s.now, completed, n, len(recvOrder), a.qp.State(), b.qp.State())
	}
	if got := binary.NativeEndian.Uint64(b.mem[counter:]); got != want {
		t.Fatalf("counter %d, want %d", got, want)
	}
	c := da.Ports[0].Counters
	t.Logf("%d messages in %.3f s virtual (%.1f s real), %d frames sent, %d retransmits, %d timeouts, %d NAKs",
		n, float64(s.now)/1e9, time.Since(start).Seconds(), s.sent, c.Retransmits, c.Timeouts, c.NAKsRcvd)
}

// wireWrapPSN starts PSNs near the 24-bit wrap, so that every run crosses it.
func wireWrapPSN(seed uint64) uint32 { return (1<<24 - 5 - uint32(seed)*3) & 0xFFFFFF }

func setTimeout(t testing.TB, e *endpoint, timeout uint8) {
	e.qp.attr.Timeout = timeout
}

// TestRCThreeDevicesLossy joins three engines through one lossy link: A
// holds a connection to B and one to C, and streams to both at once while
// B and C stream back; every message arrives once, in order, on the right
// connection.
func TestRCThreeDevicesLossy(t *testing.T) {
	da, db, dc := testDevice(t, 1), testDevice(t, 2), testDevice(t, 3)
	ab, ba := newEndpoint(t, da, QPTypeRC, 1<<20, 1), newEndpoint(t, db, QPTypeRC, 1<<20, 2)
	ac, ca := newEndpoint(t, da, QPTypeRC, 1<<20, 1), newEndpoint(t, dc, QPTypeRC, 1<<20, 3)
	connect(t, ab, ba, 10, 20, MTU1024)
	connect(t, ac, ca, 30, 40, MTU1024)
	s := newSim(t, 7, linkFaults{Loss: 0.05, Dup: 0.02, Reorder: 0.05, Latency: 2000, Jitter: 10000}, da, db, dc)
	pairs := [][2]*endpoint{{ab, ba}, {ba, ab}, {ac, ca}, {ca, ac}}
	const msgs, size = 200, 3000
	got := make([]int, len(pairs))
	for _, p := range pairs {
		dst := p[1]
		for i := range 16 {
			off := uint64(i) * 4096
			if _, err := dst.d.PostRecv(dst.qp, []RecvWR{{WRID: uint64(i), SGL: []SGE{{Addr: 0x10000 + 0x80000 + off, Length: 4096, LKey: dst.mr.Key}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	posted := make([]int, len(pairs))
	recvPosted := make([]int, len(pairs))
	for k := range pairs {
		recvPosted[k] = 16
	}
	var wcs [32]WC
	s.run(Time(10e9), func() bool {
		done := true
		for k, p := range pairs {
			src, dst := p[0], p[1]
			for posted[k] < msgs && posted[k]-got[k] < 8 {
				i := posted[k]
				off := uint64(i%16) * 4096
				fill(src.mem[off:off+size], uint64(k), i)
				if _, err := src.d.PostSend(src.qp, []SendWR{{WRID: uint64(i), Opcode: WRSend, SGL: []SGE{{Addr: 0x10000 + off, Length: size, LKey: src.mr.Key}}}}); err != nil {
					t.Fatal(err)
				}
				posted[k]++
			}
			for n := dst.rcq.Poll(wcs[:]); n > 0; n = dst.rcq.Poll(wcs[:]) {
				for _, wc := range wcs[:n] {
					i := got[k]
					if wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != size || wc.QPNum != dst.qp.Num || wc.SrcQP != src.qp.Num {
						t.Fatalf("pair %d: completion %+v, want message %d", k, wc, i)
					}
					exp := make([]byte, size)
					fill(exp, uint64(k), i)
					off := 0x80000 + uint64(i%16)*4096
					if crc32.ChecksumIEEE(dst.mem[off:off+size]) != crc32.ChecksumIEEE(exp) {
						t.Fatalf("pair %d message %d: wrong data", k, i)
					}
					got[k]++
					if recvPosted[k] < msgs {
						r := recvPosted[k]
						roff := uint64(r%16) * 4096
						if _, err := dst.d.PostRecv(dst.qp, []RecvWR{{WRID: uint64(r), SGL: []SGE{{Addr: 0x10000 + 0x80000 + roff, Length: 4096, LKey: dst.mr.Key}}}}); err != nil {
							t.Fatal(err)
						}
						recvPosted[k]++
					}
				}
			}
			src.scq.Poll(wcs[:])
			if got[k] < msgs {
				done = false
			}
		}
		return done
	})
	for k := range pairs {
		if got[k] != msgs {
			t.Fatalf("pair %d: %d of %d messages", k, got[k], msgs)
		}
	}
	if r := da.Ports[0].Counters.Retransmits + db.Ports[0].Counters.Retransmits + dc.Ports[0].Counters.Retransmits; r == 0 {
		t.Fatal("no retransmission: the lossy link was not exercised")
	}
}
