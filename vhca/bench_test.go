package vhca

import (
	"fmt"
	"testing"
)

// pump moves every frame the two devices have to send straight to the
// other, with no loss and no I/O, until neither has anything; it returns
// how many frames moved.
func pump(now Time, a, b *Device, buf []byte) int {
	moved := 0
	for {
		n, _ := a.Transmit(now, buf)
		if n > 0 {
			b.Receive(now, 1, buf[:n])
			moved++
		}
		m, _ := b.Transmit(now, buf)
		if m > 0 {
			a.Receive(now, 1, buf[:m])
			moved++
		}
		if n == 0 && m == 0 {
			return moved
		}
	}
}

// BenchmarkEngine runs two engines joined directly: messages of one kind
// and size, a window of them in flight. It reports messages/s, bytes/s of
// payload, packets per message and allocations per packet.
func BenchmarkEngine(b *testing.B) {
	cases := []struct {
		op   WROpcode
		size uint32
	}{
		{WRRDMAWrite, 64}, {WRRDMAWrite, 4096}, {WRRDMAWrite, 65536},
		{WRSend, 64}, {WRRDMARead, 64},
	}
	for _, c := range cases {
		name := map[WROpcode]string{WRRDMAWrite: "write", WRSend: "send", WRRDMARead: "read"}[c.op]
		b.Run(fmt.Sprintf("%s/%d", name, c.size), func(b *testing.B) {
			da, db := testDevice(b, 1), testDevice(b, 2)
			x, y := newEndpoint(b, da, QPTypeRC, 1<<20, 1), newEndpoint(b, db, QPTypeRC, 1<<20, 2)
			connect(b, x, y, 0, 0, MTU4096)
			wr := SendWR{Opcode: c.op, SGL: []SGE{{Addr: 0x10000, Length: c.size, LKey: x.mr.Key}},
				RemoteAddr: 0x10000, RKey: y.mr.Key}
			recv := []RecvWR{{SGL: []SGE{{Addr: 0x10000, Length: c.size, LKey: y.mr.Key}}}}
			const window = 64
			wrs := make([]SendWR, window)
			for i := range wrs {
				wrs[i] = wr
			}
			wrs[window-1].Flags = SendSignaled // one completion per window
			buf := make([]byte, 16384)
			wcs := make([]WC, 16)
			var frames int
			round := func() {
				if c.op == WRSend {
					for range window {
						if _, err := db.PostRecv(y.qp, recv); err != nil {
							b.Fatal(err)
						}
					}
				}
				if _, err := da.PostSend(x.qp, wrs); err != nil {
					b.Fatal(err)
				}
				frames += pump(1, da, db, buf)
				if x.scq.Poll(wcs) != 1 || wcs[0].Status != WCSuccess {
					b.Fatalf("completion %+v", wcs[0])
				}
				y.rcq.Poll(wcs)
				for y.rcq.Len() > 0 {
					y.rcq.Poll(wcs)
				}
			}
			round() // warm up: queues and slices reach their size
			frames = 0
			b.ReportAllocs()
			b.ResetTimer()
			rounds := 0
			for b.Loop() {
				round()
				rounds++
			}
			msgs := float64(rounds * window)
			b.ReportMetric(msgs/b.Elapsed().Seconds(), "msg/s")
			b.ReportMetric(msgs*float64(c.size)/b.Elapsed().Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(frames)/msgs, "frames/msg")
		})
	}
}

// BenchmarkCopy is the yardstick for BenchmarkEngine's bytes/s, measured
// in the same run: Go's copy of a 64 KiB buffer, reused (in cache).
func BenchmarkCopy(b *testing.B) {
	src, dst := make([]byte, 65536), make([]byte, 65536)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkLoopbackSend is the transport's share of a send_lat through
// verbsd between two QPs of one vHCA: one 8-byte inline SEND at a time,
// the receive re-posted. ns/op is one message's whole round in the
// transport, with no rings and no other core. "frames": its frame built
// and turned around (ReceiveOwn) on an in-process port, its ACK the same
// way; "LoopsOwn": as verbsd's engine has it, the request and its ACK
// without frames.
func BenchmarkLoopbackSend(b *testing.B) {
	for _, loops := range []bool{false, true} {
		name := "frames"
		if loops {
			name = "LoopsOwn"
		}
		b.Run(name, func(b *testing.B) { benchmarkLoopbackSend(b, loops) })
	}
}

func benchmarkLoopbackSend(b *testing.B, loops bool) {
	d := inProcessDevice(b, 1)
	d.LoopsOwn = loops
	x, y := newEndpoint(b, d, QPTypeRC, 1<<16, 1), newEndpoint(b, d, QPTypeRC, 1<<16, 1)
	connect(b, x, y, 0, 0, MTU1024)
	payload := []byte("8 bytes!")
	send := []SendWR{{Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: payload}}
	recv := []RecvWR{{SGL: []SGE{{Addr: 0x10000, Length: 64, LKey: y.mr.Key}}}}
	buf := make([]byte, 16384)
	wcs := make([]WC, 4)
	round := func() {
		if _, err := d.PostRecv(y.qp, recv); err != nil {
			b.Fatal(err)
		}
		if _, err := d.PostSend(x.qp, send); err != nil {
			b.Fatal(err)
		}
		for {
			n, _, port := d.TransmitSegment(1, buf)
			if n == 0 && port == 0 {
				break
			}
			if n != 0 {
				d.ReceiveOwn(1, port)
			}
		}
		if y.rcq.Poll(wcs) != 1 || x.scq.Poll(wcs[1:]) != 1 || wcs[0].Status != WCSuccess || wcs[1].Status != WCSuccess {
			b.Fatalf("completions %+v", wcs[:2])
		}
	}
	round()
	b.ReportAllocs()
	for b.Loop() {
		round()
	}
}
