package verbsd_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/ebpf"
	"github.com/softib/softib/internal/testtools"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/vhca"
)

// fastLab is two namespaces, each with a bridge holding the TAP of a
// vHCA and a veth to a third namespace, the switch (bridge br0, ports vA
// and vB); the vHCAs' RoCEv2 goes through AF_XDP on the veths (the fast
// path), as a VM's NIC bridged to an uplink.
func fastLab(t *testing.T) (srv *verbsd.Server, sock, devA, devB string) {
	testtools.Root(t)
	a, b, sw := testtools.Netns(t, "sibfa"), testtools.Netns(t, "sibfb"), testtools.Netns(t, "sibfs")
	testtools.IP(t, "-n", sw, "link", "add", "br0", "type", "bridge")
	testtools.IP(t, "-n", sw, "link", "set", "br0", "up")
	for ns, port := range map[string]string{a: "vA", b: "vB"} {
		testtools.IP(t, "-n", ns, "link", "add", "veth0", "type", "veth", "peer", "name", port, "netns", sw)
		testtools.IP(t, "-n", sw, "link", "set", port, "master", "br0")
		testtools.IP(t, "-n", sw, "link", "set", port, "up")
		testtools.IP(t, "-n", ns, "link", "set", "veth0", "up")
	}
	devA, devB = "sibfA", "sibfB"
	srv, sock = startServer(t, verbsd.Config{Devices: []verbsd.DeviceConfig{
		{Name: devA, TAP: true, Netns: "/var/run/netns/" + a, Uplink: "veth0",
			Addrs: []netip.Addr{netip.MustParseAddr("10.79.0.1"), netip.MustParseAddr("fd79::1")}},
		{Name: devB, TAP: true, Netns: "/var/run/netns/" + b, Uplink: "veth0",
			Addrs: []netip.Addr{netip.MustParseAddr("10.79.0.2"), netip.MustParseAddr("fd79::2")}},
	}})
	for ns, dev := range map[string]string{a: devA, b: devB} {
		testtools.IP(t, "-n", ns, "link", "add", "br0", "type", "bridge")
		testtools.IP(t, "-n", ns, "link", "set", "veth0", "master", "br0")
		testtools.IP(t, "-n", ns, "link", "set", dev, "master", "br0")
		testtools.IP(t, "-n", ns, "link", "set", "br0", "up")
	}
	return srv, sock, devA, devB
}

// RC over the fast path, IPv4 and IPv6: the data arrives, every frame one
// vHCA sent through its socket was steered into the other's (the counters
// match exactly), none reached the kernel; switched to the TAP path, the
// same works without the sockets.
func TestFastPath(t *testing.T) {
	srv, sock, devA, devB := fastLab(t)
	for _, gidIndex := range []int{1, 2} {
		t.Run(fmt.Sprintf("gid%d", gidIndex), func(t *testing.T) {
			a, b := newPeer(t, sock, devA, 1<<20), newPeer(t, sock, devB, 1<<20)
			pa, err := a.ctx.QueryPort(1)
			if err != nil || pa.Paths != client.DataPathTAP|client.DataPathXDP || pa.Path != client.DataPathXDP || pa.ActiveMTU != vhca.MTU1024 {
				t.Fatalf("port: paths %v, path %v, MTU %v (%v)", pa.Paths, pa.Path, pa.ActiveMTU, err)
			}
			for _, p := range []*peer{a, b} {
				g, err := p.ctx.QueryGID(1, gidIndex)
				if err != nil {
					t.Fatal(err)
				}
				p.ep.GID = g.GID
			}
			for _, x := range [][2]*peer{{a, b}, {b, a}} {
				if err := x[0].qp.Connect(client.Path{GIDIndex: gidIndex, MTU: vhca.MTU1024, Access: acc, LocalPSN: x[0].ep.PSN, Remote: x[1].ep}); err != nil {
					t.Fatal(err)
				}
			}
			beforeA, beforeB := linkStats(t, srv, devA), linkStats(t, srv, devB)
			for i := range a.buf.B {
				a.buf.B[i] = byte(i*7 + gidIndex)
			}
			const n = 500000
			if wc := a.write(t, 0, n, b.mr.Addr, b.mr.RKey); wc.Status != vhca.WCSuccess {
				t.Fatalf("RDMA WRITE over the fast path: %+v", wc)
			}
			if !bytes.Equal(b.buf.B[:n], a.buf.B[:n]) {
				t.Fatal("data differs after the fast path")
			}
			time.Sleep(50 * time.Millisecond) // the last ACK lands
			sa, sb := linkStats(t, srv, devA).since(beforeA), linkStats(t, srv, devB).since(beforeB)
			t.Logf("A %+v\nB %+v", sa, sb)
			if sa.Sent < n/1024 || sa.Sent != sb.Steered || sb.Sent != sa.Steered || sb.Received != sb.Steered || sa.Received != sa.Steered {
				t.Errorf("frames sent by one socket and steered into the other differ: A %+v, B %+v", sa, sb)
			}
			if sa.Dropped+sb.Dropped+sa.RxRingFull+sb.RxRingFull+sa.RxDropped+sb.RxDropped != 0 {
				t.Errorf("drops on the fast path: A %+v, B %+v", sa, sb)
			}

			// The TAP path, on the same set-up: the sockets stay idle.
			for _, p := range []*peer{a, b} {
				if err := p.ctx.SetPath(1, client.DataPathTAP); err != nil {
					t.Fatal(err)
				}
			}
			defer func() {
				a.ctx.SetPath(1, client.DataPathXDP)
				b.ctx.SetPath(1, client.DataPathXDP)
			}()
			if pa, _ := a.ctx.QueryPort(1); pa.Path != client.DataPathTAP {
				t.Fatalf("path %v after SetPath(tap)", pa.Path)
			}
			beforeA, beforeB = linkStats(t, srv, devA), linkStats(t, srv, devB)
			for i := range a.buf.B[:n] {
				a.buf.B[i] ^= 0x5A
			}
			if wc := a.write(t, 0, n, b.mr.Addr, b.mr.RKey); wc.Status != vhca.WCSuccess || !bytes.Equal(b.buf.B[:n], a.buf.B[:n]) {
				t.Fatalf("RDMA WRITE over the TAP path: %+v", wc)
			}
			sa, sb = linkStats(t, srv, devA).since(beforeA), linkStats(t, srv, devB).since(beforeB)
			if sa.Sent+sb.Sent+sa.Steered+sb.Steered != 0 {
				t.Errorf("the TAP path used the sockets: A %+v, B %+v", sa, sb)
			}
		})
	}
	// A third device on a netdev already carrying a steering program is
	// refused, saying why.
	_, err := verbsd.New(verbsd.Config{Socket: t.TempDir() + "/x.sock", Devices: []verbsd.DeviceConfig{
		{Name: "sibfC", TAP: true, Netns: "/var/run/netns/" + fmt.Sprintf("sibfa%d", os.Getpid()%100000), Uplink: "veth0"}}})
	if err == nil || !strings.Contains(err.Error(), "already has an XDP program") {
		t.Fatalf("a second fast path on one netdev: %v", err)
	}
}

func linkStats(t *testing.T, srv *verbsd.Server, dev string) stats {
	t.Helper()
	s, err := srv.LinkStats(dev)
	if err != nil {
		t.Fatal(err)
	}
	return stats(s)
}

type stats verbsd.LinkStats

func (s stats) since(b stats) stats {
	return stats{Steered: s.Steered - b.Steered, Passed: s.Passed - b.Passed, Dropped: s.Dropped - b.Dropped,
		Received: s.Received - b.Received, Sent: s.Sent - b.Sent, RxRingFull: s.RxRingFull - b.RxRingFull, RxDropped: s.RxDropped - b.RxDropped}
}

// Attach mode: two vHCAs share their namespaces' veths, as rxe shares a
// NIC: the netdev's MAC and addresses make the GID table and follow
// `ip addr`, the kernel resolves the peer, RC crosses, ARP and ping go
// on, and verbsd's shutdown leaves no program attached.
func TestAttach(t *testing.T) {
	testtools.Root(t)
	a, b := testtools.Netns(t, "sibaa"), testtools.Netns(t, "sibab")
	testtools.VethPair(t, a, b, 1500, []string{"10.80.0.1/24", "fd80::1/64"}, []string{"10.80.0.2/24", "fd80::2/64"})
	srv, sock := startServer(t, verbsd.Config{Devices: []verbsd.DeviceConfig{
		{Name: "sibaA", Attach: "veth0", Netns: "/var/run/netns/" + a},
		{Name: "sibaB", Attach: "veth0", Netns: "/var/run/netns/" + b},
	}})
	p, q := newPeer(t, sock, "sibaA", 1<<20), newPeer(t, sock, "sibaB", 1<<20)
	pa, err := p.ctx.QueryPort(1)
	if err != nil || pa.Netdev != "veth0" || pa.Paths != client.DataPathXDP || pa.ActiveMTU != vhca.MTU1024 {
		t.Fatalf("port: netdev %q, paths %v, MTU %v (%v)", pa.Netdev, pa.Paths, pa.ActiveMTU, err)
	}
	out, _ := exec.Command("ip", "-n", a, "-br", "link", "show", "veth0").Output()
	if !strings.Contains(string(out), fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", pa.MAC[0], pa.MAC[1], pa.MAC[2], pa.MAC[3], pa.MAC[4], pa.MAC[5])) {
		t.Fatalf("the vHCA's MAC %x is not its netdev's: %s", pa.MAC, out)
	}
	for i, want := range []string{"", "10.80.0.1", "fd80::1"} {
		g, err := p.ctx.QueryGID(1, i)
		if err != nil {
			t.Fatal(err)
		}
		got := netip.AddrFrom16(g.GID).Unmap()
		if i == 0 && !got.IsLinkLocalUnicast() || i > 0 && got.String() != want {
			t.Fatalf("GID %d: %v, want %s", i, got, want)
		}
	}
	for _, gidIndex := range []int{1, 2} {
		for _, x := range []*peer{p, q} {
			g, _ := x.ctx.QueryGID(1, gidIndex)
			x.ep.GID = g.GID
		}
		qa, qb := p, q
		if gidIndex == 2 {
			qa, qb = newPeer(t, sock, "sibaA", 1<<20), newPeer(t, sock, "sibaB", 1<<20)
			qa.ep.GID, qb.ep.GID = p.ep.GID, q.ep.GID
		}
		for _, x := range [][2]*peer{{qa, qb}, {qb, qa}} {
			if err := x[0].qp.Connect(client.Path{GIDIndex: gidIndex, MTU: vhca.MTU1024, Access: acc, LocalPSN: x[0].ep.PSN, Remote: x[1].ep}); err != nil {
				t.Fatalf("connect over GID %d (the kernel resolving the peer): %v", gidIndex, err)
			}
		}
		for i := range qa.buf.B {
			qa.buf.B[i] = byte(i*3 + gidIndex)
		}
		beforeA, beforeB := linkStats(t, srv, "sibaA"), linkStats(t, srv, "sibaB")
		if wc := qa.write(t, 0, 300000, qb.mr.Addr, qb.mr.RKey); wc.Status != vhca.WCSuccess || !bytes.Equal(qb.buf.B[:300000], qa.buf.B[:300000]) {
			t.Fatalf("RDMA WRITE between attached vHCAs over GID %d: %+v", gidIndex, wc)
		}
		time.Sleep(50 * time.Millisecond) // the last ACK lands
		sa, sb := linkStats(t, srv, "sibaA").since(beforeA), linkStats(t, srv, "sibaB").since(beforeB)
		if sa.Sent < 300000/1024 || sa.Sent != sb.Steered || sb.Sent != sa.Steered || sa.Dropped+sb.Dropped != 0 {
			t.Errorf("GID %d: frames sent and steered differ: A %+v, B %+v", gidIndex, sa, sb)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", b, "ping", "-c", "1", "-W", "2", "10.80.0.1").CombinedOutput(); err != nil {
		t.Fatalf("ping beside the attached vHCA: %v\n%s", err, out)
	}

	// The GID table follows the netdev's addresses.
	testtools.IP(t, "-n", a, "addr", "add", "10.80.1.1/24", "dev", "veth0")
	added := netip.MustParseAddr("10.80.1.1")
	index := waitGID(t, p.ctx, added, true)
	testtools.IP(t, "-n", a, "addr", "del", "10.80.1.1/24", "dev", "veth0")
	waitGID(t, p.ctx, added, false)
	if index < 3 {
		t.Errorf("the added address took GID %d, an entry in use", index)
	}
	if _, err := p.ctx.AddAddr(1, netip.MustParseAddr("10.80.2.1")); err == nil || !strings.Contains(err.Error(), "ip addr") {
		t.Errorf("AddAddr on an attached vHCA: %v", err)
	}

	srv.Shutdown()
	for _, ns := range []string{a, b} {
		out, _ := exec.Command("ip", "-n", ns, "link", "show", "veth0").CombinedOutput()
		if strings.Contains(string(out), "xdp") {
			t.Errorf("an XDP program stays attached after shutdown:\n%s", out)
		}
	}
}

// waitGID waits up to 3 s for addr's RoCEv2 GID to be in the table (or
// gone) and returns its index.
func waitGID(t *testing.T, ctx *client.Context, addr netip.Addr, present bool) int {
	t.Helper()
	pa, _ := ctx.QueryPort(1)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		found := -1
		for i := range pa.GIDTblLen {
			if g, err := ctx.QueryGID(1, i); err == nil && netip.AddrFrom16(g.GID).Unmap() == addr {
				found = i
				break
			}
		}
		if present == (found >= 0) {
			return found
		}
	}
	t.Fatalf("GID of %v present=%v: not within 3 s", addr, present)
	return -1
}

// The real binary attached to a netdev: while it runs the program is
// there, a second verbsd on the same netdev is refused saying why, and
// once it is killed (SIGKILL: no clean-up of its own) nothing stays
// attached and a new verbsd attaches again.
func TestFastPathCrash(t *testing.T) {
	testtools.Root(t)
	a, b := testtools.Netns(t, "sibka"), testtools.Netns(t, "sibkb")
	testtools.VethPair(t, a, b, 1500, []string{"10.81.0.1/24"}, []string{"10.81.0.2/24"})
	bin := buildVerbsd(t)
	dev := "sibkA,attach=veth0,netns=/var/run/netns/" + a
	xdp := func() bool {
		out, _ := exec.Command("ip", "-n", a, "link", "show", "veth0").CombinedOutput()
		return strings.Contains(string(out), "xdp")
	}
	d := startDaemon(t, bin, "-device", dev)
	if !xdp() {
		t.Fatal("no XDP program on the attached netdev")
	}
	out, err := exec.Command(bin, "-socket", t.TempDir()+"/second.sock", "-device", dev).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already has an XDP program") {
		t.Fatalf("a second verbsd on the same netdev: %v\n%s", err, out)
	}
	d.cmd.Process.Kill()
	<-d.exited
	for deadline := time.Now().Add(2 * time.Second); xdp(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the XDP program stays attached after verbsd was killed")
		}
	}
	pinned, _ := filepath.Glob("/sys/fs/bpf/*")
	for _, p := range pinned {
		if b := filepath.Base(p); strings.Contains(b, "vhca_addrs") || strings.Contains(b, "xsks") || strings.Contains(b, "steer_rocev2") {
			t.Fatalf("left pinned: %s", p)
		}
	}
	d2 := startDaemon(t, bin, "-device", dev)
	p := newPeer(t, d2.sock, "sibkA", 4096)
	if pa, err := p.ctx.QueryPort(1); err != nil || pa.Paths != client.DataPathXDP {
		t.Fatalf("the restarted verbsd's port: %+v, %v", pa, err)
	}
}

// A fast path whose frames would not fit its AF_XDP frames is refused at
// start, saying the largest MTU it takes, and leaves nothing behind.
func TestFastPathMTU(t *testing.T) {
	testtools.Root(t)
	a, b := testtools.Netns(t, "sibma"), testtools.Netns(t, "sibmb")
	testtools.VethPair(t, a, b, 9000, nil, nil)
	_, err := verbsd.New(verbsd.Config{Socket: t.TempDir() + "/m.sock", Devices: []verbsd.DeviceConfig{
		{Name: "sibmA", TAP: true, MTU: 9000, Netns: "/var/run/netns/" + a, Uplink: "veth0", XDPMode: ebpf.ModeGeneric}}})
	if err == nil || !strings.Contains(err.Error(), "MTU of at most 3822") {
		t.Fatalf("a 9000-byte MTU on the fast path: %v", err)
	}
	out, _ := exec.Command("ip", "-n", a, "link", "show").CombinedOutput()
	if strings.Contains(string(out), "xdp") || strings.Contains(string(out), "sibmA") {
		t.Fatalf("left behind after a refused start:\n%s", out)
	}
}
