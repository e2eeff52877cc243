package vhca

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// segmentLink joins two in-process devices the way verbsd does, through
// TransmitSegment and ReceiveSegment, dropping a seeded fraction of what
// passes (segments and frames alike) to exercise going back. segments
// and frames count what it delivered.
type segmentLink struct {
	devs             [2]*Device
	rng              *rand.Rand
	loss             float64
	now              Time
	segments, frames int
	useSegments      bool
}

func (l *segmentLink) run(t *testing.T, done func() bool) {
	t.Helper()
	buf := make([]byte, 16384)
	for steps := 0; !done(); steps++ {
		if steps > 5_000_000 {
			t.Fatal("no end after 5 M steps")
		}
		moved := false
		for i, d := range l.devs {
			var n int
			var seg []byte
			var port uint8
			if l.useSegments {
				n, seg, port = d.TransmitSegment(l.now, buf)
			} else {
				n, port = d.Transmit(l.now, buf)
			}
			if n == 0 {
				continue
			}
			moved = true
			if l.rng.Float64() < l.loss {
				continue
			}
			if seg != nil {
				l.segments++
			} else {
				l.frames++
			}
			l.devs[1-i].ReceiveSegment(l.now, port, buf[:n], seg)
		}
		l.now += 100
		if !moved {
			var dl Time
			for _, d := range l.devs {
				if x := d.Deadline(); x != 0 && (dl == 0 || x < dl) {
					dl = x
				}
			}
			if dl > l.now {
				l.now = dl
			}
			for _, d := range l.devs {
				d.Advance(l.now)
			}
		}
	}
}

func inProcessDevice(t testing.TB, n byte) *Device {
	d, err := NewDevice(Config{
		Name: "vhca", NodeGUID: uint64(n), Seed: uint64(n),
		Ports: []PortConfig{{
			LinkLayer: LinkLayerEthernet, MaxMTU: MTU4096, ActiveMTU: MTU1024, InProcess: true,
			MAC:  wire.MAC{2, 0, 0, 0, 0, n},
			GIDs: []GIDEntry{{GID: wire.IPv4MappedGID([4]byte{192, 0, 2, n}), Type: GIDTypeRoCEv2}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// segmentWorkload posts SENDs, WRITEs (one and two SGEs, inline) and
// READs of sizes from a byte to several hundred KiB, and returns a check
// of the data and completions.
func segmentWorkload(t *testing.T, a, b *endpoint, seed uint64) (int, func()) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range a.mem {
		a.mem[i] = byte(rng.Uint32())
	}
	const half = 1 << 19
	var sends []SendWR
	var recvs []RecvWR
	type want struct{ src, dst, n int }
	var checks []want
	off := 0
	for i := range 40 {
		n := []int{1, 900, 1024, 4096, 5000, 70000, 200000, 300001}[rng.IntN(8)]
		if off+n > half {
			break
		}
		wr := SendWR{WRID: uint64(i), Flags: SendSignaled}
		switch k := rng.IntN(4); {
		case k == 0 || a.qp.Type == QPTypeUC && k == 3:
			wr.Opcode = WRSend
			recvs = append(recvs, RecvWR{WRID: uint64(i), SGL: []SGE{{Addr: 0x10000 + uint64(off), Length: uint32(n), LKey: b.mr.Key}}})
			wr.SGL = []SGE{{Addr: 0x10000 + uint64(off), Length: uint32(n), LKey: a.mr.Key}}
			checks = append(checks, want{off, off, n})
		case k == 1:
			// Two SGEs: the segment stops at the first's end.
			h := n / 3
			wr.Opcode = WRRDMAWrite
			wr.SGL = []SGE{{Addr: 0x10000 + uint64(off), Length: uint32(h), LKey: a.mr.Key},
				{Addr: 0x10000 + uint64(off+h), Length: uint32(n - h), LKey: a.mr.Key}}
			wr.RemoteAddr, wr.RKey = 0x10000+uint64(off), b.mr.Key
			checks = append(checks, want{off, off, n})
		case k == 2:
			wr.Opcode = WRRDMAWrite
			wr.SGL = []SGE{{Addr: 0x10000 + uint64(off), Length: uint32(n), LKey: a.mr.Key}}
			wr.RemoteAddr, wr.RKey = 0x10000+uint64(off), b.mr.Key
			checks = append(checks, want{off, off, n})
		default:
			// READ b's [half+off, +n) into a's [half+off, +n).
			for j := range n {
				b.mem[half+off+j] = byte(j * 13)
			}
			wr.Opcode = WRRDMARead
			wr.SGL = []SGE{{Addr: 0x10000 + uint64(half+off), Length: uint32(n), LKey: a.mr.Key}}
			wr.RemoteAddr, wr.RKey = 0x10000+uint64(half+off), b.mr.Key
			checks = append(checks, want{-1, half + off, n})
		}
		sends = append(sends, wr)
		off += n
	}
	if _, err := b.d.PostRecv(b.qp, recvs); err != nil {
		t.Fatal(err)
	}
	if _, err := a.d.PostSend(a.qp, sends); err != nil {
		t.Fatal(err)
	}
	return len(sends), func() {
		t.Helper()
		wcs := a.poll(a.scq)
		if len(wcs) != len(sends) {
			t.Fatalf("%d send completions, want %d", len(wcs), len(sends))
		}
		for i, wc := range wcs {
			if wc.Status != WCSuccess || wc.WRID != uint64(i) {
				t.Fatalf("completion %d: %+v", i, wc)
			}
		}
		if got := len(b.poll(b.rcq)); got != len(recvs) {
			t.Fatalf("%d receive completions, want %d", got, len(recvs))
		}
		for i, c := range checks {
			if c.src < 0 {
				if !bytes.Equal(a.mem[c.dst:c.dst+c.n], b.mem[c.dst:c.dst+c.n]) {
					t.Fatalf("READ %d: data differs", i)
				}
			} else if !bytes.Equal(b.mem[c.dst:c.dst+c.n], a.mem[c.src:c.src+c.n]) {
				t.Fatalf("WR %d (%d bytes): data differs", i, c.n)
			}
		}
	}
}

// Segments deliver what packets deliver, with the same completions and
// the same PSNs, and with loss they go back as packets and still deliver
// everything once.
func TestSegments(t *testing.T) {
	for _, typ := range []QPType{QPTypeRC, QPTypeUC} {
		for _, loss := range []float64{0, 0.05, 0.3} {
			if typ == QPTypeUC && loss > 0 {
				continue // UC loses messages by design: covered elsewhere
			}
			for seed := uint64(1); seed <= 8; seed++ {
				t.Run(fmt.Sprintf("%s/loss%.2f/seed%d", typ, loss, seed), func(t *testing.T) {
					var psns [2][2]uint32
					var sent [2]uint64 // packets the requester sent, as packets and as segments
					for k, useSeg := range []bool{false, true} {
						da, db := inProcessDevice(t, 1), inProcessDevice(t, 2)
						a, b := newEndpoint(t, da, typ, 1<<20, 1), newEndpoint(t, db, typ, 1<<20, 2)
						connect(t, a, b, 0xFFFF00, 200, MTU1024) // the PSNs wrap on the way
						n, check := segmentWorkload(t, a, b, seed)
						l := &segmentLink{devs: [2]*Device{da, db}, rng: rand.New(rand.NewPCG(seed, 1)), loss: loss, useSegments: useSeg}
						l.run(t, func() bool { return a.scq.Len() == n })
						check()
						aa, _ := da.QueryQP(a.qp)
						ba, _ := db.QueryQP(b.qp)
						psns[k] = [2]uint32{aa.SQPSN, ba.RQPSN}
						ca, cb := &da.Ports[0].Counters, &db.Ports[0].Counters
						sent[k] = ca.XmitPackets
						if loss == 0 && (ca.XmitPackets != cb.RcvPackets || cb.XmitPackets != ca.RcvPackets ||
							ca.XmitBytes != cb.RcvBytes || cb.XmitBytes != ca.RcvBytes) {
							t.Fatalf("sent and received differ without loss: %+v, %+v", ca, cb)
						}
						if useSeg && l.segments == 0 {
							t.Fatal("no segment was sent")
						}
						if useSeg && loss == 0 && l.frames > l.segments*4 {
							t.Fatalf("%d frames beside %d segments", l.frames, l.segments)
						}
					}
					if psns[0] != psns[1] {
						t.Fatalf("PSNs (sq, peer's rq) as packets %x, as segments %x", psns[0], psns[1])
					}
					// The port counters count the packets a segment
					// stands for, as a wire would carry them. (The
					// responder's ACKs coalesce as the frames come.)
					if loss == 0 && sent[0] != sent[1] {
						t.Fatalf("requests sent as packets %d, as segments %d", sent[0], sent[1])
					}
				})
			}
		}
	}
}
