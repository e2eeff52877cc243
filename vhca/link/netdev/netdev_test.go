package netdev

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A wire is two namespaces joined by a veth pair: vA in a, vB in b, with
// 10.77.0.1/24 and fd77::1/64 on vA, 10.77.0.2/24 and fd77::2/64 on vB.
type wire struct {
	a, b string // namespace names
}

var wires atomic.Int32

func (w *wire) pathA() string { return "/var/run/netns/" + w.a }

// ip runs ip(8) and fails the test if it fails.
func ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newWire builds the namespaces, deleted when the test ends however it
// ends. With dad false, vA and vB skip duplicate address detection, so
// that their link-local addresses are usable at once.
func newWire(t *testing.T, dad bool) *wire {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	n := wires.Add(1)
	w := &wire{a: fmt.Sprintf("sibnd-%d-%d-a", os.Getpid(), n), b: fmt.Sprintf("sibnd-%d-%d-b", os.Getpid(), n)}
	for _, ns := range []string{w.a, w.b} {
		ip(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ip(t, "link", "add", "vA", "netns", w.a, "type", "veth", "peer", "name", "vB", "netns", w.b)
	for _, side := range []struct{ ns, dev, v4, v6 string }{
		{w.a, "vA", "10.77.0.1/24", "fd77::1/64"},
		{w.b, "vB", "10.77.0.2/24", "fd77::2/64"},
	} {
		if !dad {
			ip(t, "netns", "exec", side.ns, "sysctl", "-qw", "net.ipv6.conf."+side.dev+".accept_dad=0")
		}
		ip(t, "-n", side.ns, "addr", "add", side.v4, "dev", side.dev)
		ip(t, "-n", side.ns, "addr", "add", side.v6, "dev", side.dev, "nodad")
		ip(t, "-n", side.ns, "link", "set", "lo", "up")
		ip(t, "-n", side.ns, "link", "set", side.dev, "up")
	}
	return w
}

// linkShow is what `ip -j link show` says of a netdev.
type linkShow struct {
	Index   int    `json:"ifindex"`
	MTU     int    `json:"mtu"`
	Address string `json:"address"`
}

func showLink(t *testing.T, ns, dev string) linkShow {
	t.Helper()
	var links []linkShow
	if err := json.Unmarshal([]byte(ip(t, "-j", "-n", ns, "link", "show", "dev", dev)), &links); err != nil || len(links) != 1 {
		t.Fatalf("ip link show %s: %v %v", dev, links, err)
	}
	return links[0]
}

func macOf(t *testing.T, s string) [6]byte {
	t.Helper()
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		t.Fatalf("MAC %q: %v", s, err)
	}
	return [6]byte(hw)
}

func open(t *testing.T, w *wire) *Netdev {
	t.Helper()
	d, err := Open(Config{Name: "vA", Netns: w.pathA()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// eventually polls cond until it holds or the time is up.
func eventually(within time.Duration, cond func() bool) bool {
	for end := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

func linkLocal(addrs []netip.Addr) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.IsLinkLocalUnicast() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

var (
	a1 = netip.MustParseAddr("10.77.0.1")
	a2 = netip.MustParseAddr("10.77.0.2")
	b1 = netip.MustParseAddr("fd77::1")
	b2 = netip.MustParseAddr("fd77::2")
)

func TestOpen(t *testing.T) {
	w := newWire(t, true)
	d := open(t, w)
	want := showLink(t, w.a, "vA")
	if d.Index() != want.Index || d.MAC() != macOf(t, want.Address) || d.MTU() != want.MTU || d.Name() != "vA" {
		t.Errorf("Open: index %d MAC %x MTU %d, ip link show: %+v", d.Index(), d.MAC(), d.MTU(), want)
	}
	// The link-local address passes DAD after Open, most likely: it
	// arrives through the subscription.
	if !eventually(4*time.Second, func() bool { _, ok := linkLocal(d.Addrs()); return ok }) {
		t.Fatalf("no link-local address: %v", d.Addrs())
	}
	addrs := d.Addrs()
	ll, _ := linkLocal(addrs)
	if len(addrs) != 3 || addrs[0] != a1 || !slices.Contains(addrs[1:], b1) {
		t.Errorf("Addrs %v, want [%v %v %v] (IPv4 first)", addrs, a1, b1, ll)
	}
	if !d.Up() {
		t.Error("vA is up with its carrier on, Up says not")
	}

	_, err := Open(Config{Name: "vZ", Netns: w.pathA()})
	if want := fmt.Sprintf("netdev %q in %s: not found", "vZ", w.pathA()); err == nil || err.Error() != want || !errors.Is(err, ErrNotFound) {
		t.Errorf("Open(vZ): %v, want %q", err, want)
	}
	if _, err := Open(Config{Name: "lo", Netns: w.pathA()}); err == nil || !strings.Contains(err.Error(), "not an Ethernet netdev") {
		t.Errorf("Open(lo): %v, want a refusal", err)
	}
	if _, err := Open(Config{Name: "vA", Netns: "/var/run/netns/sibnd-none"}); err == nil {
		t.Error("Open in a missing namespace succeeded")
	}
	// In the current namespace, looking only.
	if _, err := Open(Config{Name: "sibnd-absent"}); err == nil || err.Error() != `netdev "sibnd-absent": not found` {
		t.Errorf("Open(sibnd-absent): %v", err)
	}
}

// ready waits for the wire to settle: the kernel turns a veth's carrier
// on (and lets packets through) up to a second after the link came up,
// and only then configures IPv6 on it (its link-local address, after
// DAD if it runs, and its multicast routes, without which vB would drop
// neighbour solicitations). Changes is drained, for tests that expect
// exact ones.
func ready(t *testing.T, w *wire, d *Netdev) {
	t.Helper()
	if !eventually(4*time.Second, func() bool { _, ok := linkLocal(d.Addrs()); return ok && d.Up() }) {
		t.Fatalf("not ready: up %v, addresses %v", d.Up(), d.Addrs())
	}
	if !eventually(4*time.Second, func() bool {
		return strings.Contains(ip(t, "-n", w.b, "-6", "addr", "show", "dev", "vB", "scope", "link"), "fe80::")
	}) {
		t.Fatal("vB has no link-local address")
	}
	for len(d.Changes()) > 0 {
		<-d.Changes()
	}
}

// expect waits for the change, up to 2 s, failing on any other.
func expect(t *testing.T, d *Netdev, want AddrChange) {
	t.Helper()
	select {
	case c := <-d.Changes():
		if c != want {
			t.Fatalf("change %+v, want %+v", c, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("no change %+v in 2 s", want)
	}
}

func TestChanges(t *testing.T) {
	w := newWire(t, true)
	d := open(t, w)
	ready(t, w, d)

	added := netip.MustParseAddr("10.77.1.5")
	ip(t, "-n", w.a, "addr", "add", "10.77.1.5/24", "dev", "vA")
	expect(t, d, AddrChange{added, true})
	if !slices.Contains(d.Addrs(), added) {
		t.Errorf("Addrs %v lacks %v", d.Addrs(), added)
	}
	// The same address under a second prefix length is no new address,
	// and stays while one of them does.
	ip(t, "-n", w.a, "addr", "add", "10.77.1.5/32", "dev", "vA")
	ip(t, "-n", w.a, "addr", "del", "10.77.1.5/24", "dev", "vA")
	ip(t, "-n", w.a, "addr", "del", "10.77.1.5/32", "dev", "vA")
	expect(t, d, AddrChange{added, false})
	if slices.Contains(d.Addrs(), added) {
		t.Errorf("Addrs %v still has %v", d.Addrs(), added)
	}

	// An IPv6 address under DAD is not usable until DAD passed.
	tentative := netip.MustParseAddr("fd78::5")
	ip(t, "-n", w.a, "addr", "add", "fd78::5/64", "dev", "vA")
	if slices.Contains(d.Addrs(), tentative) {
		t.Errorf("Addrs %v has %v under DAD", d.Addrs(), tentative)
	}
	select {
	case c := <-d.Changes():
		if c != (AddrChange{tentative, true}) {
			t.Fatalf("change %+v, want %v added", c, tentative)
		}
	case <-time.After(4 * time.Second):
		t.Fatalf("%v not added after DAD", tentative)
	}

	// Another netdev's addresses are not this one's.
	// (A veth pair within the namespace: this kernel may lack dummy.)
	ip(t, "-n", w.a, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	ip(t, "-n", w.a, "addr", "add", "10.77.2.1/24", "dev", "d0")
	ip(t, "-n", w.a, "addr", "add", "fd79::1/64", "dev", "d0", "nodad")
	ip(t, "-n", w.a, "link", "set", "d0", "up")
	ip(t, "-n", w.a, "link", "set", "d1", "up")
	select {
	case c := <-d.Changes():
		t.Errorf("change %+v from d0", c)
	case <-time.After(500 * time.Millisecond):
	}

	// The link's MTU is followed too.
	ip(t, "-n", w.a, "link", "set", "vA", "mtu", "1400")
	if !eventually(2*time.Second, func() bool { return d.MTU() == 1400 }) {
		t.Errorf("MTU %d after setting 1400", d.MTU())
	}
	ip(t, "-n", w.a, "link", "set", "vA", "down")
	if !eventually(2*time.Second, func() bool { return !d.Up() }) {
		t.Error("Up after the link went down")
	}
	if d.Dropped() != 0 {
		t.Errorf("Dropped %d", d.Dropped())
	}
}

func TestResolve(t *testing.T) {
	w := newWire(t, false)
	d := open(t, w)
	ready(t, w, d)
	peer := macOf(t, showLink(t, w.b, "vB").Address)
	for _, target := range []netip.Addr{a2, b2} {
		if mac, ok := d.Neighbour(target); ok {
			t.Fatalf("Neighbour(%v) = %x before resolving", target, mac)
		}
		if err := d.Resolve(target); err != nil {
			t.Fatal(err)
		}
		var mac [6]byte
		if !eventually(2*time.Second, func() (ok bool) { mac, ok = d.Neighbour(target); return ok }) {
			t.Fatalf("Neighbour(%v) unresolved 2 s after Resolve", target)
		}
		if mac != peer {
			t.Errorf("Neighbour(%v) = %x, want vB's %x", target, mac, peer)
		}
	}
	// An IPv4 GID is the IPv4 address.
	if mac, ok := d.Neighbour(netip.AddrFrom16(a2.As16())); !ok || mac != peer {
		t.Errorf("Neighbour(::ffff:%v) = %x %v", a2, mac, ok)
	}

	nobody := netip.MustParseAddr("10.77.0.99")
	if err := d.Resolve(nobody); err != nil {
		t.Fatalf("Resolve(%v): %v", nobody, err)
	}
	if eventually(300*time.Millisecond, func() bool { _, ok := d.Neighbour(nobody); return ok }) {
		t.Errorf("Neighbour(%v) resolved", nobody)
	}
	// Resolving again, while the entry is incomplete, is no error.
	if err := d.Resolve(nobody); err != nil {
		t.Errorf("Resolve(%v) again: %v", nobody, err)
	}
}

func TestClose(t *testing.T) {
	w := newWire(t, false)
	base := runtime.NumGoroutine()
	d, err := Open(Config{Name: "vA", Netns: w.pathA()})
	if err != nil {
		t.Fatal(err)
	}
	ready(t, w, d)
	ip(t, "-n", w.a, "addr", "add", "10.77.1.7/24", "dev", "vA")
	expect(t, d, AddrChange{netip.MustParseAddr("10.77.1.7"), true})
	d.Resolve(a2)
	d.Neighbour(a2)

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err == nil || !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, open := <-d.Changes(); open {
		t.Error("Changes open after Close")
	}
	if err := d.Resolve(a2); !errors.Is(err, ErrClosed) {
		t.Errorf("Resolve after Close: %v", err)
	}
	if _, ok := d.Neighbour(a2); ok {
		t.Error("Neighbour after Close")
	}
	var n int
	if !eventually(2*time.Second, func() bool { n = runtime.NumGoroutine(); return n <= base }) {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before Open:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// TestResync makes the kernel drop the address subscription (its socket
// overflows while the follow goroutine is held), and checks the netdev
// comes back to the kernel's addresses, announcing the difference.
func TestResync(t *testing.T) {
	w := newWire(t, false)
	saved := subscriptionBuffer
	subscriptionBuffer = 4096
	t.Cleanup(func() { subscriptionBuffer = saved })
	var log strings.Builder
	var logMu sync.Mutex
	d, err := Open(Config{Name: "vA", Netns: w.pathA(), Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &log}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	const n = 40
	announced := map[netip.Addr]bool{}
	read := make(chan struct{})
	go func() {
		defer close(read)
		for c := range d.Changes() {
			announced[c.Addr] = c.Added
		}
	}()
	// Hold the follow goroutine at its first address, while the kernel
	// has more to say than the socket holds.
	d.mu.Lock()
	var batch strings.Builder
	for i := range n {
		fmt.Fprintf(&batch, "addr add 10.77.3.%d/24 dev vA\n", i+1)
	}
	fmt.Fprintf(&batch, "addr del 10.77.0.1/24 dev vA\n")
	cmd := exec.Command("ip", "-n", w.a, "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		d.mu.Unlock()
		t.Fatalf("ip -batch: %v: %s", err, out)
	}
	time.Sleep(100 * time.Millisecond)
	d.mu.Unlock()

	want := []netip.Addr{}
	for i := range n {
		want = append(want, netip.AddrFrom4([4]byte{10, 77, 3, byte(i + 1)}))
	}
	if !eventually(3*time.Second, func() bool {
		addrs := d.Addrs()
		return len(addrs) >= n && slices.Equal(addrs[:n], want) && !slices.Contains(addrs, a1)
	}) {
		t.Fatalf("Addrs %v after resync", d.Addrs())
	}
	logMu.Lock()
	logged := log.String()
	logMu.Unlock()
	if !strings.Contains(logged, "no buffer space") {
		t.Errorf("the subscription did not overflow; log: %s", logged)
	}
	d.Close()
	<-read
	for _, a := range want {
		if !announced[a] {
			t.Errorf("%v not announced added", a)
		}
	}
	if added, ok := announced[a1]; !ok || added {
		t.Errorf("%v not announced removed", a1)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
