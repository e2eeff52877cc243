package impair

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/netnsrun"
	"github.com/softib/softib/internal/testtools"
)

// lab is three namespaces in a row, a - r - b, joined by two veth
// pairs: a's veth0 to r's ra, r's rb to b's veth0. The relay runs in r
// between ra and rb; a is 10.66.0.1/24, b 10.66.0.2/24.
type lab struct{ a, r, b string }

const (
	addrA   = "10.66.0.1"
	addrB   = "10.66.0.2"
	roce    = 4791
	streamN = 2000
)

func newLab(t *testing.T) *lab {
	t.Helper()
	testtools.Root(t)
	l := &lab{a: testtools.Netns(t, "impa"), r: testtools.Netns(t, "impr"), b: testtools.Netns(t, "impb")}
	testtools.IP(t, "-n", l.r, "link", "add", "ra", "type", "veth", "peer", "name", "veth0", "netns", l.a)
	testtools.IP(t, "-n", l.r, "link", "add", "rb", "type", "veth", "peer", "name", "veth0", "netns", l.b)
	// r has no business on either link.
	for _, dev := range []string{"ra", "rb"} {
		testtools.IP(t, "-n", l.r, "link", "set", dev, "up")
	}
	testtools.IP(t, "-n", l.a, "addr", "add", addrA+"/24", "dev", "veth0", "nodad")
	testtools.IP(t, "-n", l.b, "addr", "add", addrB+"/24", "dev", "veth0", "nodad")
	testtools.IP(t, "-n", l.a, "link", "set", "veth0", "up")
	testtools.IP(t, "-n", l.b, "link", "set", "veth0", "up")
	return l
}

// start runs a relay between ra and rb, closed when the test ends.
func (l *lab) start(t *testing.T, c Config) *Relay {
	t.Helper()
	c.Netns, c.A, c.B = "/var/run/netns/"+l.r, "ra", "rb"
	r, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

var pingTime = regexp.MustCompile(`time=([0-9.]+) ms`)

// ping pings from namespace ns and returns the round-trip times.
func ping(t *testing.T, ns, addr string, count int) []time.Duration {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-n", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "2", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %s from %s: %v: %s", addr, ns, err, out)
	}
	var rtts []time.Duration
	for _, m := range pingTime.FindAllSubmatch(out, -1) {
		ms, _ := strconv.ParseFloat(string(m[1]), 64)
		rtts = append(rtts, time.Duration(ms*float64(time.Millisecond)))
	}
	return rtts
}

func nsHandle(t *testing.T, ns string) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// udp opens a UDP socket in ns bound to laddr, and connected to raddr
// unless it is "". Its receive buffer holds all a test sends.
func udp(t *testing.T, ns, laddr, raddr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := netnsrun.RunNamed(ns, func() error {
		la, err := net.ResolveUDPAddr("udp4", laddr)
		if err != nil {
			return err
		}
		if raddr == "" {
			c, err = net.ListenUDP("udp4", la)
			return err
		}
		ra, err := net.ResolveUDPAddr("udp4", raddr)
		if err != nil {
			return err
		}
		c, err = net.DialUDP("udp4", la, ra)
		return err
	})
	if err != nil {
		t.Fatalf("UDP socket in %s: %v", ns, err)
	}
	t.Cleanup(func() { c.Close() })
	setsockopt(t, c, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	return c
}

func setsockopt(t *testing.T, c *net.UDPConn, level, opt, v int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("setsockopt %d/%d: %v", level, opt, serr)
	}
}

// A test datagram: a sequence number, its complement, then 56 bytes that
// depend on it, so that any changed byte shows.
const dgramLen = 64

func datagram(seq uint32) []byte {
	b := make([]byte, dgramLen)
	binary.BigEndian.PutUint32(b, seq)
	binary.BigEndian.PutUint32(b[4:], ^seq)
	x := seq*2654435761 + 12345
	for i := 8; i < len(b); i++ {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// check returns the sequence number of a received datagram, and false if
// it is not one datagram sent, unchanged.
func check(b []byte, n int) (uint32, bool) {
	if len(b) != dgramLen {
		return 0, false
	}
	seq := binary.BigEndian.Uint32(b)
	if int(seq) >= n || string(b) != string(datagram(seq)) {
		return 0, false
	}
	return seq, true
}

// stream sends datagrams 0..n-1 on c, paced so that no queue on the way
// overflows: only the relay is to lose frames.
func stream(t *testing.T, c *net.UDPConn, n int) {
	t.Helper()
	for i := range n {
		if _, err := c.Write(datagram(uint32(i))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%50 == 49 {
			time.Sleep(time.Millisecond)
		}
	}
}

// result is what a collector read: the sequence numbers of the intact
// datagrams in arrival order, and how many others came.
type result struct {
	seqs []uint32
	bad  int
}

// collect reads datagrams on c until none has come for idle (or 8 s
// have passed), in the background; the result comes on the channel.
func collect(c *net.UDPConn, n int, idle time.Duration) <-chan result {
	ch := make(chan result, 1)
	go func() {
		var r result
		buf := make([]byte, 2048)
		end := time.Now().Add(8 * time.Second)
		for time.Now().Before(end) {
			c.SetReadDeadline(time.Now().Add(idle))
			m, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && (len(r.seqs) > 0 || r.bad > 0) {
					break
				}
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				break
			}
			if seq, ok := check(buf[:m], n); ok {
				r.seqs = append(r.seqs, seq)
			} else {
				r.bad++
			}
		}
		ch <- r
	}()
	return ch
}

// run sends n datagrams from a to b's port 4791 through the lab and
// returns what arrived.
func (l *lab) run(t *testing.T, n int, tweak func(tx *net.UDPConn)) result {
	t.Helper()
	rx := udp(t, l.b, fmt.Sprintf("%s:%d", addrB, roce), "")
	tx := udp(t, l.a, addrA+":0", fmt.Sprintf("%s:%d", addrB, roce))
	if tweak != nil {
		tweak(tx)
	}
	got := collect(rx, n, 300*time.Millisecond)
	stream(t, tx, n)
	r := <-got
	rx.Close()
	tx.Close()
	return r
}

// late counts the datagrams that arrived after one sent later than them.
func late(seqs []uint32) int {
	n, hi := 0, -1
	for _, s := range seqs {
		if int(s) < hi {
			n++
		} else {
			hi = int(s)
		}
	}
	return n
}

// inversions counts the pairs that arrived in the wrong order.
func inversions(seqs []uint32) int {
	n := 0
	for i := range seqs {
		for j := i + 1; j < len(seqs); j++ {
			if seqs[i] > seqs[j] {
				n++
			}
		}
	}
	return n
}

// distinct counts the different sequence numbers in seqs.
func distinct(seqs []uint32) map[uint32]int {
	m := make(map[uint32]int)
	for _, s := range seqs {
		m[s]++
	}
	return m
}

// settle waits (boundedly) for the goroutine count to fall to n.
func settle(n int) int {
	var g int
	for range 200 {
		if g = runtime.NumGoroutine(); g <= n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return g
}
