package impair

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/netnsrun"
	"github.com/softib/softib/internal/testtools"
)

// Without faults the relay is a wire: ARP, ICMP, TCP
// (checksum offload and GSO super-frames from the veth) and a UDP stream
// with offloaded checksums all cross, the stream complete and in order.
func TestClean(t *testing.T) {
	l := newLab(t)
	r := l.start(t, Config{Seed: 1})
	ping(t, l.a, addrB, 2)

	start := time.Now()
	res := l.run(t, streamN, nil)
	el := time.Since(start)
	if res.bad != 0 || len(res.seqs) != streamN {
		t.Fatalf("%d intact datagrams and %d others arrived, want %d and 0", len(res.seqs), res.bad, streamN)
	}
	for i, s := range res.seqs {
		if s != uint32(i) {
			t.Fatalf("datagram %d arrived as number %d", s, i)
		}
	}
	t.Logf("%d datagrams in %v (paced)", streamN, el)

	before := r.Stats().Relayed
	tcp(t, l, 4<<20)
	t.Logf("TCP: %d frames both ways (GSO super-frames cross whole)", r.Stats().Relayed-before)
	if s := r.Stats(); s.Lost+s.Duplicated+s.Reordered+s.Corrupted+s.Delayed+s.Errors != 0 {
		t.Errorf("faults without asking: %+v", s)
	}
}

// A VLAN tag the kernel takes out of the frame into its metadata (it
// does so for every tagged frame it receives) is put back by the relay:
// tagged frames sent raw from a arrive at b tagged the same.
func TestVLAN(t *testing.T) {
	l := newLab(t)
	l.start(t, Config{Seed: 1})
	const tci, etype = 0x2064, 0x88b5 // priority 1, VLAN 100; local experimental
	tx := rawSocket(t, l.a, 0)
	// ETH_P_ALL: a socket for one ethertype gets frames of a VLAN no
	// netdev is for after the kernel has cleared the tag.
	rx := rawSocket(t, l.b, unix.ETH_P_ALL)
	if err := unix.SetsockoptInt(rx, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		t.Fatal(err)
	}
	frame := func(i int) []byte {
		f := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x81, 0, tci >> 8, tci & 0xff, etype >> 8, etype & 0xff}
		for j := range 46 {
			f = append(f, byte(i+j))
		}
		return f
	}
	const n = 10
	for i := range n {
		if err := unix.Send(tx, frame(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	buf, oob := make([]byte, 2048), make([]byte, 256)
	got := 0
	for deadline := time.Now().Add(2 * time.Second); got < n && time.Now().Before(deadline); {
		m, oobn, _, _, err := unix.Recvmsg(rx, buf, oob, unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m < 14 || buf[12] != etype>>8 || buf[13] != etype&0xff {
			continue // IPv6 chatter
		}
		c, tpid, ok := vlanTag(oob[:oobn])
		want := frame(got)
		want = append(want[:12:12], want[16:]...) // as the kernel shows it: untagged
		if !ok || c != tci || tpid != etherVLAN || !bytes.Equal(buf[:m], want) {
			t.Fatalf("frame %d: tag %v %#x %#x, % x", got, ok, c, tpid, buf[:m])
		}
		got++
	}
	if got != n {
		t.Fatalf("%d of %d tagged frames arrived", got, n)
	}
}

// rawSocket is an AF_PACKET socket on veth0 in ns for ethertype proto
// (0: sending only).
func rawSocket(t *testing.T, ns string, proto uint16) int {
	t.Helper()
	fd := -1
	err := netnsrun.RunNamed(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(proto)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	ifc, err := ifindexes(nsHandle(t, ns), "veth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifc[0]}); err != nil {
		t.Fatal(err)
	}
	return fd
}

// tcp moves size bytes from a to b over TCP and checks them.
func tcp(t *testing.T, l *lab, size int) {
	t.Helper()
	var ln net.Listener
	if err := netnsrun.RunNamed(l.b, func() (err error) {
		ln, err = net.Listen("tcp4", addrB+":5001")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sum := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			sum <- [32]byte{}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		h := sha256.New()
		io.Copy(h, c)
		sum <- [32]byte(h.Sum(nil))
	}()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	start := time.Now()
	var c net.Conn
	if err := netnsrun.RunNamed(l.a, func() (err error) {
		c, err = net.DialTimeout("tcp4", addrB+":5001", 2*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(data); err != nil {
		t.Fatalf("TCP: %v", err)
	}
	c.Close()
	if got := <-sum; got != sha256.Sum256(data) {
		t.Fatal("TCP: the bytes that arrived are not those sent")
	}
	t.Logf("TCP: %d MiB in %v", size>>20, time.Since(start))
}

// Loss on RoCEv2 only: about the share asked is lost, exactly as many as
// the relay says, and ping (ARP, ICMP) is untouched.
func TestLoss(t *testing.T) {
	l := newLab(t)
	r := l.start(t, Config{Seed: 42, Loss: 0.2, Only: roce})
	ping(t, l.a, addrB, 5) // every echo must come back: ping fails otherwise
	res := l.run(t, streamN, nil)
	s := r.Stats()
	missing := streamN - len(distinct(res.seqs))
	t.Logf("%d of %d lost (%.1f%%), stats %+v", missing, streamN, 100*float64(missing)/streamN, s)
	if res.bad != 0 || len(res.seqs) != len(distinct(res.seqs)) {
		t.Fatalf("%d changed datagrams, %d repeated", res.bad, len(res.seqs)-len(distinct(res.seqs)))
	}
	if missing < streamN/10 || missing > streamN*3/10 {
		t.Errorf("%d of %d lost, want 10..30%%", missing, streamN)
	}
	if s.Lost != uint64(missing) {
		t.Errorf("Stats.Lost = %d, %d datagrams missing", s.Lost, missing)
	}
	if inv := late(res.seqs); inv != 0 {
		t.Errorf("%d datagrams out of order", inv)
	}
	ping(t, l.a, addrB, 3)
}

// Duplication: every extra datagram is one the relay says it sent twice.
func TestDuplicate(t *testing.T) {
	l := newLab(t)
	r := l.start(t, Config{Seed: 7, Duplicate: 0.1, Only: roce})
	ping(t, l.a, addrB, 1)
	res := l.run(t, streamN, nil)
	s := r.Stats()
	d := distinct(res.seqs)
	extra := len(res.seqs) - streamN
	t.Logf("%d datagrams for %d sent, stats %+v", len(res.seqs), streamN, s)
	if res.bad != 0 || len(d) != streamN {
		t.Fatalf("%d distinct intact datagrams (and %d others), want %d", len(d), res.bad, streamN)
	}
	if extra <= 0 || s.Duplicated != uint64(extra) {
		t.Errorf("%d extra datagrams, Stats.Duplicated = %d", extra, s.Duplicated)
	}
	for seq, k := range d {
		if k > 2 {
			t.Errorf("datagram %d came %d times", seq, k)
		}
	}
}

// Reordering: everything arrives, not all in order.
func TestReorder(t *testing.T) {
	l := newLab(t)
	r := l.start(t, Config{Seed: 3, Reorder: 0.2, Only: roce})
	ping(t, l.a, addrB, 1)
	res := l.run(t, streamN, nil)
	s := r.Stats()
	inv, lt := inversions(res.seqs), late(res.seqs)
	t.Logf("%d inversions, %d datagrams late, stats %+v", inv, lt, s)
	if res.bad != 0 || len(res.seqs) != streamN || len(distinct(res.seqs)) != streamN {
		t.Fatalf("%d intact datagrams (%d distinct) and %d others, want all %d once", len(res.seqs), len(distinct(res.seqs)), res.bad, streamN)
	}
	if inv == 0 || s.Reordered == 0 {
		t.Errorf("%d inversions, Stats.Reordered = %d: want some", inv, s.Reordered)
	}
	if lt > int(s.Reordered) {
		t.Errorf("%d datagrams late, but the relay reordered only %d", lt, s.Reordered)
	}
}

// Delay: RoCEv2 datagrams take the delay one way, other traffic (a
// different port, ping) none; with Only 0 ping takes it both ways.
func TestDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	l := newLab(t)
	r := l.start(t, Config{Seed: 5, Delay: delay, Only: roce})
	ping(t, l.a, addrB, 1)

	// b echoes on 4791 and 4792; a times the round trips. Only the way
	// to b on 4791 is delayed: the answers go to a's own port.
	rtt := func(port int) time.Duration {
		echo := udp(t, l.b, fmt.Sprintf("%s:%d", addrB, port), "")
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := echo.ReadFromUDP(buf)
				if err != nil {
					return
				}
				echo.WriteToUDP(buf[:n], from)
			}
		}()
		c := udp(t, l.a, addrA+":0", fmt.Sprintf("%s:%d", addrB, port))
		best := time.Hour
		buf := make([]byte, 2048)
		for i := range 5 {
			start := time.Now()
			c.Write(datagram(uint32(i)))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Read(buf); err != nil {
				t.Fatalf("echo on port %d: %v", port, err)
			}
			best = min(best, time.Since(start))
		}
		echo.Close()
		return best
	}
	slow, fast := rtt(roce), rtt(roce+1)
	t.Logf("best round trip: %v to port %d, %v to port %d", slow, roce, fast, roce+1)
	if slow < delay {
		t.Errorf("round trip to port %d %v, want >= %v", roce, slow, delay)
	}
	if fast >= delay {
		t.Errorf("round trip to port %d %v, want < %v: it is not to be delayed", roce+1, fast, delay)
	}
	if s := r.Stats(); s.Delayed != 5 {
		t.Errorf("Stats.Delayed = %d, want 5", s.Delayed)
	}
	r.Close()

	l.start(t, Config{Seed: 5, Delay: delay})
	for _, d := range ping(t, l.a, addrB, 3) {
		if d < 2*delay {
			t.Errorf("ping round trip %v with Only 0, want >= %v", d, 2*delay)
		}
	}
}

// Corruption changes a byte after the UDP header: with UDP checksums off
// (SO_NO_CHECK) the receiver gets exactly as many changed datagrams as
// the relay corrupted; with them on (offloaded by the veth: the relay
// completes them first, as netem does) the receiver's kernel drops
// exactly those.
func TestCorrupt(t *testing.T) {
	l := newLab(t)
	r := l.start(t, Config{Seed: 11, Corrupt: 0.1, Only: roce})
	ping(t, l.a, addrB, 1)
	res := l.run(t, streamN, func(tx *net.UDPConn) { setsockopt(t, tx, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) })
	s := r.Stats()
	t.Logf("no checksum: %d intact, %d changed; stats %+v", len(res.seqs), res.bad, s)
	if res.bad == 0 || uint64(res.bad) != s.Corrupted || len(res.seqs)+res.bad != streamN {
		t.Errorf("%d changed datagrams of %d, Stats.Corrupted = %d", res.bad, len(res.seqs)+res.bad, s.Corrupted)
	}
	r.Close()

	r = l.start(t, Config{Seed: 12, Corrupt: 0.1, Only: roce})
	res = l.run(t, streamN, nil)
	s = r.Stats()
	t.Logf("checksum: %d intact, %d changed; stats %+v", len(res.seqs), res.bad, s)
	if res.bad != 0 || s.Corrupted == 0 || uint64(len(res.seqs))+s.Corrupted != streamN {
		t.Errorf("%d intact and %d changed datagrams of %d, Stats.Corrupted = %d", len(res.seqs), res.bad, streamN, s.Corrupted)
	}
}

// The same seed makes the same choices: two relays in turn, each given
// the same paced sequence of 1000 datagrams, lose the same ones.
func TestSameSeed(t *testing.T) {
	const n = 1000
	l := newLab(t)
	var lost [2][]uint32
	var stats [2]Stats
	for i := range 2 {
		r := l.start(t, Config{Seed: 99, Loss: 0.2, Duplicate: 0.05, Corrupt: 0.05, Only: roce})
		ping(t, l.a, addrB, 1)
		res := l.run(t, n, func(tx *net.UDPConn) { setsockopt(t, tx, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) })
		d := distinct(res.seqs)
		for s := range uint32(n) {
			if d[s] == 0 {
				lost[i] = append(lost[i], s)
			}
		}
		r.Close()
		stats[i] = r.Stats()
		// Relayed counts the untouched frames too: ARP, and IPv6
		// neighbour discovery as the namespaces' timers go.
		stats[i].Relayed = 0
	}
	t.Logf("stats %+v", stats[0])
	if stats[0] != stats[1] {
		t.Errorf("same seed, different stats: %+v and %+v", stats[0], stats[1])
	}
	if fmt.Sprint(lost[0]) != fmt.Sprint(lost[1]) {
		t.Errorf("same seed, different datagrams missing: %v and %v", lost[0], lost[1])
	}
}

// Close ends every goroutine of the relay, promptly, with frames held
// back for reordering and waiting out a delay.
func TestClose(t *testing.T) {
	l := newLab(t)
	before := runtime.NumGoroutine()
	r := l.start(t, Config{Seed: 1, Reorder: 0.5, Delay: 200 * time.Millisecond})
	tx := udp(t, l.a, addrA+":0", fmt.Sprintf("%s:%d", addrB, roce))
	for i := range 100 {
		tx.Write(datagram(uint32(i)))
	}
	tx.Close()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Close took %v", d)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if g := settle(before); g > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before Start, %d after Close:\n%s", before, g, buf[:runtime.Stack(buf, true)])
	}
}

// Start refuses what it cannot do.
func TestStartErrors(t *testing.T) {
	l := newLab(t)
	for _, c := range []Config{
		{A: "ra", B: "ra"},
		{A: "ra", B: "nosuch"},
		{A: "ra", B: "rb", Loss: 1.5},
		{A: "ra", B: "rb", Delay: -1},
	} {
		c.Netns = "/var/run/netns/" + l.r
		if r, err := Start(c); err == nil {
			r.Close()
			t.Errorf("Start(%+v) did not fail", c)
		}
	}
	testtools.IP(t, "-n", l.r, "link", "add", "br0", "type", "bridge")
	testtools.IP(t, "-n", l.r, "link", "set", "rb", "master", "br0")
	if r, err := Start(Config{Netns: "/var/run/netns/" + l.r, A: "ra", B: "rb"}); err == nil {
		r.Close()
		t.Error("Start with a bridge port did not fail")
	}
}

// The relay's rate: datagrams sent from a as fast as it goes, counted
// at b. Logged, not judged.
func TestThroughput(t *testing.T) {
	const n = 50000
	l := newLab(t)
	r := l.start(t, Config{Seed: 1, Only: roce})
	ping(t, l.a, addrB, 1)
	rx := udp(t, l.b, fmt.Sprintf("%s:%d", addrB, roce), "")
	tx := udp(t, l.a, addrA+":0", fmt.Sprintf("%s:%d", addrB, roce))
	got := collect(rx, n, 200*time.Millisecond)
	start := time.Now()
	var last time.Time
	for i := range n {
		tx.Write(datagram(uint32(i)))
	}
	sent := time.Since(start)
	// The time of the last arrival: poll Relayed until it stops moving.
	prev := uint64(0)
	for range 400 {
		time.Sleep(5 * time.Millisecond)
		s := r.Stats().Relayed
		if s == prev && s > 0 {
			break
		}
		prev, last = s, time.Now()
	}
	res := <-got
	el := last.Sub(start)
	fr := r.Stats().Relayed
	t.Logf("sent %d in %v; relayed %d frames, %d datagrams arrived, in %v: %.0f frames/s; stats %+v",
		n, sent, fr, len(res.seqs), el, float64(fr)/el.Seconds(), r.Stats())
	if len(res.seqs) == 0 {
		t.Fatal("nothing arrived")
	}
}

// All faults at once, netem-like: every datagram not lost arrives once,
// or twice if duplicated, late by the delay; the changed ones are those
// corrupted (with their copies).
func TestMix(t *testing.T) {
	l := newLab(t)
	r := l.start(t, Config{Seed: 2024, Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, Corrupt: 0.05, Delay: 5 * time.Millisecond, Only: roce})
	ping(t, l.a, addrB, 1)
	res := l.run(t, streamN, func(tx *net.UDPConn) { setsockopt(t, tx, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) })
	s := r.Stats()
	t.Logf("%d intact, %d changed, %d late; stats %+v", len(res.seqs), res.bad, late(res.seqs), s)
	if got, want := uint64(len(res.seqs)+res.bad), streamN-s.Lost+s.Duplicated; got != want {
		t.Errorf("%d datagrams arrived, want %d sent - %d lost + %d duplicated", got, streamN, s.Lost, s.Duplicated)
	}
	if res.bad < int(s.Corrupted) || res.bad > 2*int(s.Corrupted) {
		t.Errorf("%d changed datagrams, %d corrupted", res.bad, s.Corrupted)
	}
	if s.Delayed != streamN-s.Lost || s.Reordered == 0 || s.Errors != 0 {
		t.Errorf("stats %+v", s)
	}
}
