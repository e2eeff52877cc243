package xsk_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/ebpf/xsk"
)

func TestConfigChecked(t *testing.T) {
	for _, c := range []xsk.Config{
		{Ifindex: 0},
		{Ifindex: 1, Queue: -1},
		{Ifindex: 1, Frames: 3},
		{Ifindex: 1, Frames: 1},
		{Ifindex: 1, FrameSize: 1000},
		{Ifindex: 1, RingSize: 100},
	} {
		if s, err := xsk.Open(c); err == nil {
			s.Close()
			t.Errorf("Open(%+v) succeeded", c)
		} else if !strings.HasPrefix(err.Error(), "xsk: ") {
			t.Errorf("Open(%+v): %v: no xsk prefix", c, err)
		}
	}
}

// TestRecv sends frames of varied sizes from the peer namespace with an
// AF_PACKET socket and receives them on the socket, redirected by XDP,
// in order and intact. The sender stays a window ahead of the receiver,
// well within the veth's and the socket's rings, so that none may be
// lost.
func TestRecv(t *testing.T) {
	p := newPair(t, "rx")
	s := openSocket(t, xsk.Config{Ifindex: p.aIdx, Netns: p.aPath})
	mode := redirect(t, p.a, p.aIdx, s, 0)
	t.Logf("XDP %s mode, socket zero-copy %v", mode, s.ZeroCopy())
	tx := packetSocket(t, p.b, p.bIdx, 0)

	const n, window = 2000, 256
	buf := make([]byte, 1514)
	sent, next, other, bad := 0, 0, 0, 0
	fn := func(f, segment []byte) {
		if segment != nil {
			t.Errorf("segment %d bytes", len(segment))
		}
		if !ours(f) {
			other++
			return
		}
		if err := checkFrame(f, next); err != nil {
			if bad++; bad <= 5 {
				t.Errorf("frame %d: %v", next, err)
			}
			next = seqOf(f)
		}
		next++
	}
	deadline := time.Now().Add(5 * time.Second)
	for next < n && time.Now().Before(deadline) {
		for sent < n && sent-next < window {
			_, err := unix.Write(tx, buf[:buildFrame(buf, sent)])
			if err == unix.ENOBUFS || err == unix.EAGAIN {
				break // dropped on a full queue: send it again
			}
			if err != nil {
				t.Fatalf("sending frame %d: %v", sent, err)
			}
			sent++
		}
		if s.Pending() == 0 {
			wait(s.FD(), unix.POLLIN, 10*time.Millisecond)
		}
		s.Recv(64, fn)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d frames received in order (and %d others); stats %+v", next, other, st)
	if next != n || bad != 0 {
		t.Fatalf("received %d of %d frames (%d sent), %d bad", next, n, sent, bad)
	}
	if st.Received != uint64(n+other) {
		t.Errorf("Stats.Received %d, want %d", st.Received, n+other)
	}
	if st.RxDropped != 0 || st.RxRingFull != 0 || st.RxInvalidDescs != 0 {
		t.Errorf("kernel counted drops: %+v", st)
	}
	if s.Pending() != 0 || s.Recv(64, fn) != 0 {
		t.Errorf("frames after the last")
	}
}

// TestSend sends more frames than the free list (first UMEM) or the TX
// ring (second) holds, without flushing until TxBuf says no more, so
// that back pressure and the reclaiming of completions carry it; the
// peer namespace captures them all, intact.
func TestSend(t *testing.T) {
	p := newPair(t, "tx")
	for _, c := range []struct {
		name           string
		frames, ring   int
		wantFreeFrames int
	}{
		{"free list bound", 64, 64, 32},
		{"TX ring bound", 1024, 64, 1024 - 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openSocket(t, xsk.Config{Ifindex: p.aIdx, Netns: p.aPath, Frames: c.frames, FrameSize: 2048, RingSize: c.ring})
			capture := packetSocket(t, p.b, p.bIdx, etherType)
			if s.MaxFrame() != 2048 {
				t.Errorf("MaxFrame %d", s.MaxFrame())
			}

			b1, b2 := s.TxBuf(), s.TxBuf()
			if b1 == nil || len(b1) != 2048 || &b1[0] != &b2[0] {
				t.Fatalf("TxBuf twice: %d bytes at %p, then %d at %p", len(b1), b1, len(b2), b2)
			}

			const n = 3000
			seen := make([]bool, n)
			got, bad, reordered, last := 0, 0, 0, -1
			rbuf := make([]byte, 4096)
			drain := func() {
				for {
					m, _, err := unix.Recvfrom(capture, rbuf, 0)
					if err != nil {
						return
					}
					f := rbuf[:m]
					if !ours(f) {
						continue
					}
					seq := seqOf(f)
					if seq < 0 || seq >= n || seen[seq] {
						if bad++; bad <= 5 {
							t.Errorf("frame %d unexpected (duplicate?)", seq)
						}
						continue
					}
					if err := checkFrame(f, seq); err != nil {
						if bad++; bad <= 5 {
							t.Errorf("frame %d: %v", seq, err)
						}
					}
					if seq < last {
						reordered++
					}
					last = seq
					seen[seq] = true
					got++
				}
			}

			sent, nils, run, maxRun := 0, 0, 0, 0
			deadline := time.Now().Add(5 * time.Second)
			for sent < n && time.Now().Before(deadline) {
				b := s.TxBuf()
				if b == nil {
					nils++
					maxRun = max(maxRun, run)
					run = 0
					s.Flush()
					drain()
					if s.TxBuf() == nil {
						wait(s.FD(), unix.POLLOUT, time.Millisecond)
					}
					continue
				}
				s.Send(buildFrame(b, sent))
				sent++
				run++
			}
			s.Flush()
			for got < n && time.Now().Before(deadline) {
				drain()
				if got < n {
					s.Flush()
					wait(capture, unix.POLLIN, 10*time.Millisecond)
				}
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("sent %d, captured %d (%d out of order); TxBuf nil %d times, longest run %d; stats %+v",
				sent, got, reordered, nils, maxRun, st)
			if got != n || bad != 0 {
				t.Fatalf("captured %d of %d frames (%d sent), %d bad", got, n, sent, bad)
			}
			if nils == 0 {
				t.Errorf("TxBuf never pushed back")
			}
			if want := min(c.wantFreeFrames, c.ring); maxRun != want {
				t.Errorf("longest run of TxBuf %d, want %d", maxRun, want)
			}
			if st.Sent != n || st.TxInvalidDescs != 0 || st.KickErrors != 0 {
				t.Errorf("stats %+v: want %d sent, no invalid descriptors, no kick errors", st, n)
			}
		})
	}
}

// TestReopen binds, closes and binds again on the same queue (the queue
// is free only once the socket and all four ring mappings are gone), and
// fails a second socket on a bound queue with a clear error.
func TestReopen(t *testing.T) {
	p := newPair(t, "re")
	c := xsk.Config{Ifindex: p.aIdx, Netns: p.aPath, Frames: 64, FrameSize: 2048, RingSize: 64}
	for i := range 4 {
		c.ZeroCopy = i%2 == 1
		t0 := time.Now()
		s, err := xsk.Open(c)
		if err != nil {
			t.Fatalf("Open #%d: %v", i, err)
		}
		t.Logf("Open #%d (zero-copy asked %v, got %v) took %v", i, c.ZeroCopy, s.ZeroCopy(), time.Since(t0))
		if i == 0 {
			t0 := time.Now()
			s2, err := xsk.Open(c)
			if err == nil {
				s2.Close()
				t.Fatal("two sockets bound to the same queue")
			}
			t.Logf("second socket, after %v: %v", time.Since(t0), err)
			want := fmt.Sprintf("xsk: bind ifindex %d queue 0: device or resource busy (another AF_XDP socket on this queue?)", p.aIdx)
			if !errors.Is(err, unix.EBUSY) || err.Error() != want {
				t.Errorf("second socket: %q, want %q (and EBUSY)", err, want)
			}
		}
		if _, err := s.Stats(); err != nil {
			t.Error(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i, err)
		}
		if err := s.Close(); !errors.Is(err, xsk.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
		if _, err := s.Stats(); !errors.Is(err, xsk.ErrClosed) {
			t.Errorf("Stats after Close: %v", err)
		}
	}
	// A queue the netdev does not have, and a netdev the namespace does
	// not have, say so.
	c.ZeroCopy = false
	for _, bad := range []xsk.Config{
		{Ifindex: p.aIdx, Queue: 5, Netns: p.aPath, Frames: 64, FrameSize: 2048, RingSize: 64},
		{Ifindex: p.aIdx + 100, Netns: p.aPath, Frames: 64, FrameSize: 2048, RingSize: 64},
	} {
		s, err := xsk.Open(bad)
		if err == nil {
			s.Close()
			t.Errorf("Open(%+v) succeeded", bad)
			continue
		}
		t.Logf("Open(ifindex %d, queue %d): %v", bad.Ifindex, bad.Queue, err)
		if !strings.Contains(err.Error(), fmt.Sprintf("ifindex %d queue %d", bad.Ifindex, bad.Queue)) {
			t.Errorf("error %q does not name the ifindex and queue", err)
		}
	}
}

// TestNoAllocs runs the fast path, socket A sending to socket B across
// the veth pair, and counts allocations: none.
func TestNoAllocs(t *testing.T) {
	p := newPair(t, "al")
	sa := openSocket(t, xsk.Config{Ifindex: p.aIdx, Netns: p.aPath, Frames: 256, FrameSize: 2048, RingSize: 128})
	sb := openSocket(t, xsk.Config{Ifindex: p.bIdx, Netns: p.bPath, Frames: 256, FrameSize: 2048, RingSize: 128})
	redirect(t, p.b, p.bIdx, sb, 0)

	seq, received := 0, 0
	fn := func(f, _ []byte) {
		if ours(f) {
			received++
		}
	}
	step := func() {
		for range 16 {
			b := sa.TxBuf()
			if b == nil {
				break
			}
			sa.Send(buildFrame(b, seq))
			seq++
		}
		sa.Flush()
		for sb.Pending() > 0 {
			sb.Recv(32, fn)
		}
		sb.Recv(32, fn)
	}
	for range 10 {
		step()
	}
	if allocs := testing.AllocsPerRun(200, step); allocs != 0 {
		t.Errorf("%v allocations per batch", allocs)
	}
	deadline := time.Now().Add(2 * time.Second)
	for received < seq && time.Now().Before(deadline) {
		wait(sb.FD(), unix.POLLIN, 10*time.Millisecond)
		sb.Recv(64, fn)
	}
	sta, err := sa.Stats()
	if err != nil {
		t.Fatal(err)
	}
	stb, err := sb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d, received %d\nA: %+v\nB: %+v", seq, received, sta, stb)
	if received != seq || sta.Sent != uint64(seq) {
		t.Errorf("sent %d (stats %d), received %d", seq, sta.Sent, received)
	}
}

// BenchmarkSendRecv moves frames of 60 to 1514 bytes from socket A to
// socket B through the veth pair (copy mode both ways).
func BenchmarkSendRecv(b *testing.B) {
	p := newPair(b, "bn")
	sa := openSocket(b, xsk.Config{Ifindex: p.aIdx, Netns: p.aPath})
	sb := openSocket(b, xsk.Config{Ifindex: p.bIdx, Netns: p.bPath})
	redirect(b, p.b, p.bIdx, sb, 0)
	received := 0
	fn := func(f, _ []byte) {
		if ours(f) {
			received++
		}
	}
	b.ResetTimer()
	sent := 0
	deadline := time.Now().Add(10 * time.Second)
	for sent < b.N && time.Now().Before(deadline) {
		for sent < b.N {
			buf := sa.TxBuf()
			if buf == nil {
				break
			}
			sa.Send(buildFrame(buf, sent))
			if sent++; sent%64 == 0 {
				sa.Flush()
				sb.Recv(256, fn)
			}
		}
		sa.Flush()
		sb.Recv(256, fn)
	}
	for idle := 0; received < sent && idle < 10; idle++ {
		sa.Flush()
		wait(sb.FD(), unix.POLLIN, 10*time.Millisecond)
		if sb.Recv(1024, fn) > 0 {
			idle = 0
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(received)/b.Elapsed().Seconds(), "frames/s")
	if received < sent {
		st, _ := sb.Stats()
		b.Logf("%d of %d frames lost; receiver %+v", sent-received, sent, st)
	}
}
