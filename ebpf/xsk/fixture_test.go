package xsk_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/softib/softib/ebpf/xsk"
	"github.com/softib/softib/internal/netnsrun"
	"github.com/softib/softib/internal/testtools"
)

// pair is two network namespaces joined by a veth pair, veth0 at both
// ends, one queue each way: with the default of a queue per CPU, the
// peer's transmit queue (and so our receive queue) would depend on the
// CPU the sender ran on.
type pair struct {
	a, b         string // namespace names
	aPath, bPath string // their paths, for Config.Netns
	aIdx, bIdx   int    // veth0's ifindex in each
}

func newPair(t testing.TB, name string) *pair {
	t.Helper()
	testtools.Root(t)
	p := &pair{a: testtools.Netns(t, "xsk"+name+"a"), b: testtools.Netns(t, "xsk"+name+"b")}
	p.aPath, p.bPath = "/var/run/netns/"+p.a, "/var/run/netns/"+p.b
	q := []string{"numtxqueues", "1", "numrxqueues", "1"}
	args := append([]string{"-n", p.a, "link", "add", "veth0", "mtu", "1500"}, q...)
	args = append(append(append(args, "type", "veth", "peer", "name", "veth0", "mtu", "1500"), q...), "netns", p.b)
	testtools.IP(t, args...)
	for _, ns := range []string{p.a, p.b} {
		testtools.IP(t, "-n", ns, "link", "set", "veth0", "up")
	}
	p.aIdx = ifindex(t, p.a)
	p.bIdx = ifindex(t, p.b)
	return p
}

func ifindex(t testing.TB, ns string) int {
	t.Helper()
	var idx int
	err := netnsrun.RunNamed(ns, func() error {
		ifc, err := net.InterfaceByName("veth0")
		if err == nil {
			idx = ifc.Index
		}
		return err
	})
	if err != nil {
		t.Fatalf("veth0 in %s: %v", ns, err)
	}
	return idx
}

func openSocket(t testing.TB, c xsk.Config) *xsk.Socket {
	t.Helper()
	s, err := xsk.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// redirect attaches to veth0 in ns an XDP program that redirects every
// frame to the socket in an XSKMAP at the frame's RX queue (s at queue),
// and passes it to the stack if there is none. It tries driver (native)
// mode first, and returns the mode it got.
func redirect(t testing.TB, ns string, ifindex int, s *xsk.Socket, queue int) string {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 4})
	if err != nil {
		t.Fatalf("XSKMAP: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	load := asm.LoadMapPtr(asm.R1, 0)
	if err := load.AssociateMap(m); err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "xsk_redirect",
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 16, asm.Word), // ctx->rx_queue_index
			load,
			asm.Mov.Imm(asm.R3, 2), // XDP_PASS where the map has no socket
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("XDP program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	if err := m.Put(uint32(queue), uint32(s.FD())); err != nil {
		t.Fatalf("XSKMAP[%d] = fd %d: %v", queue, s.FD(), err)
	}
	var l link.Link
	mode := "driver"
	err = netnsrun.RunNamed(ns, func() error {
		var err error
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
		if err != nil {
			t.Logf("XDP in driver mode: %v; trying generic mode", err)
			mode = "generic"
			l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPGenericMode})
		}
		return err
	})
	if err != nil {
		t.Fatalf("attaching XDP to veth0 in %s: %v", ns, err)
	}
	t.Cleanup(func() { l.Close() })
	return mode
}

// packetSocket is a non-blocking AF_PACKET socket bound to veth0 in ns,
// receiving the frames of ethertype proto (none if 0: a socket that only
// sends should not queue every frame on the link).
func packetSocket(t testing.TB, ns string, ifindex int, proto uint16) int {
	t.Helper()
	fd := -1
	err := netnsrun.RunNamed(ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(proto)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex})
	})
	if fd >= 0 {
		t.Cleanup(func() { unix.Close(fd) })
	}
	if err != nil {
		t.Fatalf("AF_PACKET socket in %s: %v", ns, err)
	}
	if proto != 0 {
		// Room for everything a test sends before it drains.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
			t.Fatalf("SO_RCVBUFFORCE: %v", err)
		}
	}
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Test frames: broadcast, ethertype 0x88b5 (IEEE local experimental, so
// that the IPv6 chatter of a new link is told apart), a big-endian
// sequence number, then bytes that depend on it; 60 to 1514 bytes long.
const etherType = 0x88b5

var srcMAC = [6]byte{0x02, 0, 0, 0x78, 0x73, 0x6b}

func frameLen(seq int) int { return 60 + seq*37%(1514-60+1) }

func buildFrame(b []byte, seq int) int {
	n := frameLen(seq)
	for i := range 6 {
		b[i] = 0xff
	}
	copy(b[6:12], srcMAC[:])
	binary.BigEndian.PutUint16(b[12:], etherType)
	binary.BigEndian.PutUint32(b[14:], uint32(seq))
	for i := 18; i < n; i++ {
		b[i] = byte(seq*7 + i)
	}
	return n
}

// ours reports whether f is a test frame.
func ours(f []byte) bool {
	return len(f) >= 18 && binary.BigEndian.Uint16(f[12:]) == etherType
}

func seqOf(f []byte) int { return int(binary.BigEndian.Uint32(f[14:])) }

var errFrame = errors.New("frame differs")

// checkFrame compares f with test frame seq (without allocating but
// when it differs).
func checkFrame(f []byte, seq int) error {
	if len(f) != frameLen(seq) {
		return fmt.Errorf("%d bytes, want %d", len(f), frameLen(seq))
	}
	if got := seqOf(f); got != seq {
		return fmt.Errorf("sequence %d, want %d", got, seq)
	}
	for i := range 6 {
		if f[i] != 0xff || f[6+i] != srcMAC[i] {
			return fmt.Errorf("%w: addresses % x", errFrame, f[:12])
		}
	}
	for i := 18; i < len(f); i++ {
		if f[i] != byte(seq*7+i) {
			return fmt.Errorf("%w at byte %d: %#x, want %#x", errFrame, i, f[i], byte(seq*7+i))
		}
	}
	return nil
}

// wait polls fd for events for up to d (EINTR is a short wait).
func wait(fd int, events int16, d time.Duration) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
	unix.Poll(pfd, int(d/time.Millisecond))
}
