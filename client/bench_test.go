package client

import (
	"testing"

	"github.com/softib/softib/vhca"
)

// BenchmarkRCWrite measures RC RDMA WRITE between two clients through
// verbsd (two vHCAs joined by a pipe), the way perftest's write_bw posts:
// a window of WRs, every 16th signaled. BenchmarkMemcpy is the yardstick:
// one copy of the same size with buffers reused.
func BenchmarkRCWrite(b *testing.B) {
	for _, size := range []int{64, 65536} {
		b.Run(sizeName(size), func(b *testing.B) {
			o := startVerbsd(b)
			a := newSide(b, o, "vhca0", vhca.QPTypeRC, 1<<20)
			c := newSide(b, o, "vhca1", vhca.QPTypeRC, 1<<20)
			connect(b, a, c)
			const window, every = 64, 16
			wrs := make([]SendWR, every)
			for i := range wrs {
				wrs[i] = SendWR{Opcode: vhca.WRRDMAWrite, SGL: []SGE{{Addr: a.mr.Addr, Length: uint32(size), LKey: a.mr.LKey}},
					RemoteAddr: c.mr.Addr, RKey: c.mr.RKey}
			}
			wrs[every-1].Flags = vhca.SendSignaled
			var wc [16]WC
			b.SetBytes(int64(size))
			b.ResetTimer()
			posted, done := 0, 0
			for done < b.N {
				for posted-done < window && posted < b.N {
					n, err := a.qp.PostSend(wrs)
					if err != nil && n == 0 {
						break
					}
					posted += n
				}
				n, err := a.cq.Poll(wc[:])
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					if wc[i].Status != vhca.WCSuccess {
						b.Fatalf("completion %+v", wc[i])
					}
					done += every
				}
			}
		})
	}
}

func BenchmarkMemcpy(b *testing.B) {
	for _, size := range []int{64, 65536} {
		b.Run(sizeName(size), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			for range b.N {
				copy(dst, src)
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return itoa(n/1024) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		if n /= 10; n == 0 {
			return s
		}
	}
}
