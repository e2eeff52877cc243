package ebpf

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/internal/netnsrun"
	"github.com/softib/softib/internal/testtools"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// veths is two namespaces joined by a veth pair: the uplink in a, the
// peer that sends in b.
func veths(t *testing.T) (a, b string) {
	testtools.Root(t)
	a, b = testtools.Netns(t, "sibxa"), testtools.Netns(t, "sibxb")
	testtools.VethPair(t, a, b, 1500, []string{"10.88.0.1/24", "fd88::1/64"}, []string{"10.88.0.2/24", "fd88::2/64"})
	return a, b
}

func macOf(t *testing.T, ns, name string) (mac [6]byte, index int) {
	t.Helper()
	err := netnsrun.RunNamed(ns, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		copy(mac[:], l.Attrs().HardwareAddr)
		index = l.Attrs().Index
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac, index
}

// rawSender is an AF_PACKET socket on a netdev of a namespace.
func rawSender(t *testing.T, ns, name string) func(frame []byte) {
	t.Helper()
	_, index := macOf(t, ns, name)
	var fd int
	err := netnsrun.RunNamed(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	to := &unix.SockaddrLinklayer{Ifindex: index}
	return func(frame []byte) {
		t.Helper()
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			t.Fatal(err)
		}
	}
}

// udpFrame is an Ethernet frame carrying a UDP datagram to dst:port, as
// a RoCEv2 frame is (its contents do not matter to the steering), with a
// VLAN tag when vlan is not zero.
func udpFrame(dmac [6]byte, dst netip.Addr, port uint16, vlan uint16) []byte {
	f := append([]byte{}, dmac[:]...)
	f = append(f, 0x02, 0, 0, 0, 0, 0x99)
	if vlan != 0 {
		f = binary.BigEndian.AppendUint16(f, 0x8100)
		f = binary.BigEndian.AppendUint16(f, vlan)
	}
	payload := make([]byte, 40) // a BTH and more: not looked at
	udp := binary.BigEndian.AppendUint16(nil, 0xC000)
	udp = binary.BigEndian.AppendUint16(udp, port)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(payload)))
	udp = append(udp, 0, 0)
	udp = append(udp, payload...)
	if dst.Is4() {
		f = binary.BigEndian.AppendUint16(f, 0x0800)
		ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 88, 0, 2}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		d := dst.As4()
		ip = append(ip, d[:]...)
		return append(append(f, ip...), udp...)
	}
	f = binary.BigEndian.AppendUint16(f, 0x86DD)
	ip := []byte{0x60, 0, 0, 0, 0, 0, 17, 64}
	binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
	src := netip.MustParseAddr("fd88::2").As16()
	d := dst.As16()
	ip = append(append(ip, src[:]...), d[:]...)
	return append(append(f, ip...), udp...)
}

func TestSteering(t *testing.T) {
	a, b := veths(t)
	s, err := Attach(Config{Netdev: "veth0", Netns: "/var/run/netns/" + a})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if s.link != nil {
			s.Close()
		}
	}()
	t.Logf("attached in %v mode", s.Mode())
	if s.Mode() != ModeNative {
		t.Errorf("mode %v on a veth, want native", s.Mode())
	}

	// A second attach on the same netdev is refused, saying why.
	if s2, err := Attach(Config{Netdev: "veth0", Netns: "/var/run/netns/" + a}); err == nil {
		s2.Close()
		t.Fatal("a second steering program attached to the same netdev")
	} else if !strings.Contains(err.Error(), "already has an XDP program") {
		t.Fatalf("second attach: %v", err)
	}

	mac, _ := macOf(t, a, "veth0")
	owned4, owned6 := netip.MustParseAddr("10.88.0.1"), netip.MustParseAddr("fd88::1")
	for _, ip := range []netip.Addr{owned4, owned6} {
		if err := s.Own(mac, ip, 7); err != nil {
			t.Fatal(err)
		}
	}
	send := rawSender(t, b, "veth0")
	// No socket is registered: a vHCA's RoCEv2 frames are counted as
	// dropped, never handed to the kernel.
	for range 5 {
		send(udpFrame(mac, owned4, 4791, 0))
	}
	for range 2 {
		send(udpFrame(mac, owned4, 4791, 0x0064))
	}
	send(udpFrame(mac, owned6, 4791, 0))
	// Not a vHCA's: another address, another port, another MAC.
	send(udpFrame(mac, netip.MustParseAddr("10.88.0.9"), 4791, 0))
	send(udpFrame(mac, owned4, 4792, 0))
	send(udpFrame([6]byte{0x02, 1, 2, 3, 4, 5}, owned4, 4791, 0))

	// ARP, ping and TCP keep working through the program.
	if out, err := exec.Command("ip", "netns", "exec", b, "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.88.0.1").CombinedOutput(); err != nil {
		t.Fatalf("ping through the steering program: %v\n%s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "exec", b, "ping", "-6", "-c", "1", "-W", "2", "fd88::1").CombinedOutput(); err != nil {
		t.Fatalf("ping -6 through the steering program: %v\n%s", err, out)
	}
	tcpEcho(t, a, b)

	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counters %+v", c)
	if c.Dropped != 8 || c.Steered != 0 || c.Passed < 3+4 {
		t.Errorf("counters %+v, want 8 dropped (no socket), 0 steered, ≥ 7 passed", c)
	}
	// Disowned, the address's frames go to the kernel again.
	s.Disown(mac, owned4)
	send(udpFrame(mac, owned4, 4791, 0))
	if c2, _ := s.Counters(); c2.Dropped != c.Dropped || c2.Passed <= c.Passed {
		t.Errorf("after Disown: %+v, then %+v", c, c2)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Close() == nil {
		t.Error("second Close gave no error")
	}
	netnsrun.RunNamed(a, func() error {
		l, err := netlink.LinkByName("veth0")
		if err != nil {
			t.Fatal(err)
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			t.Errorf("XDP program %d still attached after Close", x.ProgId)
		}
		return nil
	})
}

// tcpEcho opens a TCP connection from b to a's 10.88.0.1 and echoes a
// message over it.
func tcpEcho(t *testing.T, a, b string) {
	t.Helper()
	var ln net.Listener
	if err := netnsrun.RunNamed(a, func() (err error) {
		ln, err = net.Listen("tcp", "10.88.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 5)
		if _, err := c.Read(buf); err == nil {
			c.Write(buf)
		}
	}()
	var conn net.Conn
	if err := netnsrun.RunNamed(b, func() (err error) {
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("TCP through the steering program: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	conn.Write([]byte("hello"))
	buf := make([]byte, 5)
	if _, err := conn.Read(buf); err != nil || string(buf) != "hello" {
		t.Fatalf("TCP echo through the steering program: %q, %v", buf, err)
	}
}
