package vswitch

import (
	"testing"
	"time"
)

// BenchmarkForward is packets through Input and Output, in batches of 32,
// of UD packets with 64-byte payloads (98 bytes with LRH, BTH, DETH, ICRC
// and VCRC; 138 with a GRH) or 4096-byte ones, on one core. Input verifies
// the VCRC; Output patches it when the VL changes (vlchange), Input when
// the router rewrites the LRH (router).
func BenchmarkForward(b *testing.B) {
	const batch = 32
	for _, bc := range []struct {
		name string
		cfg  Config
		set  func(*Switch)
		p    pkt
		outs []int
		size int
	}{
		{"unicast", Config{}, nil, pkt{DLID: 2}, []int{2}, 64},
		{"unicast/4096", Config{}, nil, pkt{DLID: 2}, []int{2}, 4096},
		{"vlchange/4096", Config{VLs: 2}, func(s *Switch) {
			var tab [16]uint8
			tab[0] = 1
			must(b, s.SetSL2VL(1, 2, tab))
		}, pkt{DLID: 2}, []int{2}, 4096},
		{"vlchange", Config{VLs: 2}, func(s *Switch) {
			var tab [16]uint8
			tab[0] = 1
			must(b, s.SetSL2VL(1, 2, tab))
		}, pkt{DLID: 2}, []int{2}, 64},
		{"multicast3", Config{}, func(s *Switch) { must(b, s.SetMFT(0xC000, []int{1, 2, 3, 4})) }, pkt{DLID: 0xC000}, []int{2, 3, 4}, 64},
		{"router", Config{Router: true}, func(s *Switch) {
			must(b, s.SetRoute(0xFE80_0000_0000_00BB, 2, 0x55))
			must(b, s.SetRouterLID(2, 0x20))
		}, pkt{DLID: 0x10, GRH: true, DGID: gid(0xFE80_0000_0000_00BB, 2), HopLimit: 64}, []int{2}, 64},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := bc.cfg
			c.Ports = 4
			if c.VLs == 0 {
				c.VLs = 1
			}
			c.BufferBlocks = 32 * maxPacketBlocks
			c.HOQLife, c.SwitchLife = time.Second, time.Second
			s := newSwitch(b, c)
			for p := 1; p <= 4; p++ {
				must(b, s.SetLFT(uint16(p), p))
			}
			if bc.set != nil {
				bc.set(s)
			}
			bc.p.Payload = bc.size
			pk := build(b, bc.p)
			sent := 0
			send := func(p []byte) { sent++ }
			drop := func(int, uint8, int) {}
			now := time.Duration(0)
			b.SetBytes(int64(len(pk)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				now += time.Microsecond
				for range batch {
					if err := s.Input(now, 1, pk); err != nil {
						b.Fatal(err)
					}
				}
				for more := true; more; {
					more = false
					for _, o := range bc.outs {
						more = s.Output(now, o, always, send) > 0 || more
					}
				}
				s.Freed(drop)
			}
			b.StopTimer()
			if want := ((b.N + batch - 1) / batch) * batch * len(bc.outs); sent != want {
				b.Fatalf("sent %d, want %d", sent, want)
			}
			el := b.Elapsed().Seconds()
			b.ReportMetric(float64((b.N+batch-1)/batch*batch)/el, "pkts/s")
		})
	}
}
