package cable

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// freePorts returns two UDP ports free on loopback now.
func freePorts(t *testing.T) (string, string) {
	t.Helper()
	var addrs [2]string
	for i := range addrs {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = c.LocalAddr().String()
		c.Close()
	}
	return addrs[0], addrs[1]
}

func openPair(t *testing.T, vls, buffer int) (*Cable, *Cable, string, string) {
	t.Helper()
	a, b := freePorts(t)
	ca, err := Open(Config{Name: "a", Local: a, Peer: b, VLs: vls, BufferBlocks: buffer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close() })
	cb, err := Open(Config{Name: "b", Local: b, Peer: a, VLs: vls, BufferBlocks: buffer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Close() })
	return ca, cb, a, b
}

// packet writes into buf a raw IB packet (LNH 0) of n bytes on vl whose
// payload starts with seq, and returns its length.
func packet(buf []byte, n int, vl uint8, seq uint32) int {
	n = n&^3 + wire.VCRCLen // LRH through ICRC is whole words, then the VCRC
	l := wire.LRH(buf)
	clear(buf[:wire.LRHLen])
	l.SetVL(vl)
	l.SetPktLen(uint16((n - wire.VCRCLen) / 4))
	binary.BigEndian.PutUint32(buf[wire.LRHLen:], seq)
	end := n - wire.VCRCLen
	binary.LittleEndian.PutUint16(buf[end:], wire.VCRC(buf[:end]))
	return n
}

// pump runs both ends' owners for d, calling each's fn on what arrives.
func pump(d time.Duration, ends []*Cable, fns []func([]byte) bool) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i, c := range ends {
			c.Recv(256, fns[i])
			c.Flush()
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func keep([]byte) bool { return true }

func waitUp(t *testing.T, a, b *Cable) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; {
		pump(5*time.Millisecond, []*Cable{a, b}, []func([]byte) bool{keep, keep})
		pa, la := a.State()
		pb, lb := b.State()
		if pa == PhysLinkUp && pb == PhysLinkUp && la == LogicalActive && lb == LogicalActive && a.Fits(0, 64) && b.Fits(0, 64) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not up within 2 s: %v/%v and %v/%v", pa, la, pb, lb)
		}
	}
}

// A receiver that frees its buffer slowly holds the sender back: every
// packet arrives, in order on each VL, none beyond the credits, and the
// sender's XmitWait shows the waiting.
func TestCableBackPressure(t *testing.T) {
	a, b, _, _ := openPair(t, 2, 80)
	waitUp(t, a, b)
	const total = 4000
	var next [2]uint32
	type held struct {
		vl uint8
		n  int
	}
	var holding []held
	got := [2]uint32{}
	recvB := func(p []byte) bool {
		vl := wire.LRH(p).VL()
		seq := binary.BigEndian.Uint32(p[wire.LRHLen:])
		if seq != got[vl] {
			t.Errorf("VL %d: packet %d, want %d", vl, seq, got[vl])
		}
		got[vl]++
		holding = append(holding, held{vl, len(p)})
		return false // held: released slowly below
	}
	deadline := time.Now().Add(20 * time.Second)
	for got[0]+got[1] < 2*total && time.Now().Before(deadline) {
		for vl := range uint8(2) {
			for next[vl] < total {
				buf := a.TxBuf()
				if buf == nil {
					break
				}
				a.Send(packet(buf, 100+int(next[vl]*37%4000), vl, next[vl]))
				next[vl]++
			}
		}
		a.Flush()
		b.Recv(256, recvB)
		// The slow receiver: a few packets a round.
		for k := 0; k < 3 && len(holding) > 0; k++ {
			b.Release(holding[0].vl, holding[0].n)
			holding = holding[1:]
		}
		b.Flush()
		a.Recv(256, keep)
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("A %+v\nB %+v", sa, sb)
	if got[0] != total || got[1] != total {
		t.Fatalf("received %v of %d per VL", got, total)
	}
	if sb.ExcessiveBufferOverrunErrors != 0 || sb.RcvErrors != 0 || sa.SendErrors != 0 {
		t.Fatalf("losses: A %+v, B %+v", sa, sb)
	}
	if sa.XmitWait == 0 {
		t.Fatal("the sender never waited for credit")
	}
}

// The far end going away takes the link down within DownAfter; a new far
// end on the same address brings it back up.
func TestCableLiveness(t *testing.T) {
	a, b, la, lb := openPair(t, 1, 256)
	waitUp(t, a, b)
	b.Close()
	start := time.Now()
	for {
		a.Recv(256, keep)
		a.Flush()
		if p, _ := a.State(); p == PhysPolling {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatal("the link stays up with its far end gone")
		}
		time.Sleep(time.Millisecond)
	}
	down := time.Since(start)
	if down > DefaultDownAfter+50*time.Millisecond {
		t.Errorf("down after %v, want about %v", down, DefaultDownAfter)
	}
	b2, err := Open(Config{Name: "b2", Local: lb, Peer: la})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	waitUp(t, a, b2)
	if s := a.Stats(); s.LinkDowned != 1 {
		t.Fatalf("LinkDowned %d, want 1", s.LinkDowned)
	}
	t.Logf("down %v after the far end went", down)
}

// A data packet with a bad VCRC is counted and dropped.
func TestCableVCRC(t *testing.T) {
	a, b, _, _ := openPair(t, 1, 256)
	waitUp(t, a, b)
	buf := a.TxBuf()
	n := packet(buf, 200, 0, 7)
	buf[20] ^= 1
	a.Send(n)
	a.Flush()
	seen := 0
	for deadline := time.Now().Add(time.Second); b.Stats().RcvErrors == 0 && time.Now().Before(deadline); {
		b.Recv(256, func([]byte) bool { seen++; return true })
		time.Sleep(time.Millisecond)
	}
	if s := b.Stats(); s.RcvErrors != 1 || seen != 0 {
		t.Fatalf("bad VCRC: %d delivered, %+v", seen, s)
	}
}

func BenchmarkCable(b *testing.B) {
	for _, size := range []int{64 + 30, 1024 + 30} {
		b.Run(fmt.Sprint(size), func(bb *testing.B) {
			a1, a2 := freePortsB(bb)
			x, err := Open(Config{Name: "x", Local: a1, Peer: a2, BufferBlocks: 2048})
			if err != nil {
				bb.Fatal(err)
			}
			defer x.Close()
			y, err := Open(Config{Name: "y", Local: a2, Peer: a1, BufferBlocks: 2048})
			if err != nil {
				bb.Fatal(err)
			}
			defer y.Close()
			for x.Fits(0, 64) == false {
				x.Recv(256, keep)
				x.Flush()
				y.Recv(256, keep)
				y.Flush()
				time.Sleep(100 * time.Microsecond)
			}
			got := 0
			bb.ResetTimer()
			sent := 0
			for deadline := time.Now().Add(30 * time.Second); got < bb.N && time.Now().Before(deadline); {
				for sent < bb.N {
					buf := x.TxBuf()
					if buf == nil {
						break
					}
					x.Send(packet(buf, size, 0, uint32(sent)))
					sent++
				}
				x.Flush()
				y.Recv(256, func([]byte) bool { got++; return true })
				y.Flush()
				x.Recv(256, keep)
			}
			if got < bb.N {
				bb.Fatalf("%d of %d packets arrived: %+v, %+v", got, bb.N, x.Stats(), y.Stats())
			}
			bb.ReportMetric(float64(got)/bb.Elapsed().Seconds(), "pkts/s")
		})
	}
}

func freePortsB(b *testing.B) (string, string) {
	var addrs [2]string
	for i := range addrs {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		addrs[i] = c.LocalAddr().String()
		c.Close()
	}
	return addrs[0], addrs[1]
}

// Sending, flushing and receiving allocate nothing per packet.
func TestCableAllocatesNothing(t *testing.T) {
	a, b, _, _ := openPair(t, 1, 1024)
	waitUp(t, a, b)
	recv := func([]byte) bool { return true }
	allocs := testing.AllocsPerRun(200, func() {
		for range 8 {
			if buf := a.TxBuf(); buf != nil {
				a.Send(packet(buf, 200, 0, 1))
			}
		}
		a.Flush()
		b.Recv(64, recv)
		b.Flush()
		a.Recv(64, recv)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations a round", allocs)
	}
}
