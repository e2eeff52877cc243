package verbsd_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softib/softib/internal/testtools"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/vhca"
)

// tapLab is a network namespace with a bridge, and a verbsd whose two
// vHCAs have TAP ports moved into it and enslaved to the bridge: two
// Ethernet endpoints on one segment, as two hosts' RoCE NICs would be.
func tapLab(t *testing.T, mtu int) (sock, devA, devB string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("TAP tests need root")
		}
		t.Skip("TAP tests need root")
	}
	id := os.Getpid() % 100000
	ns := fmt.Sprintf("sibt%d", id)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	devA, devB = fmt.Sprintf("sibA%d", id), fmt.Sprintf("sibB%d", id)
	path := "/var/run/netns/" + ns
	_, sock = startServer(t, verbsd.Config{Devices: []verbsd.DeviceConfig{
		{Name: devA, TAP: true, MTU: mtu, Netns: path, RoCEv1: true, Addrs: []netip.Addr{netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("fd77::1")}},
		{Name: devB, TAP: true, MTU: mtu, Netns: path, RoCEv1: true, Addrs: []netip.Addr{netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("fd77::2")}},
	}})
	run("-n", ns, "link", "add", "br0", "mtu", fmt.Sprint(mtu), "type", "bridge")
	run("-n", ns, "link", "set", devA, "master", "br0")
	run("-n", ns, "link", "set", devB, "master", "br0")
	run("-n", ns, "link", "set", "br0", "up")
	return sock, devA, devB
}

// capture runs dumpcap on the lab's bridge until stop is called, and
// returns the capture's path.
func capture(t *testing.T, iface string) (string, func()) {
	t.Helper()
	dumpcap := testtools.Require(t, "dumpcap")
	file := filepath.Join(t.TempDir(), "bridge.pcap")
	ns := fmt.Sprintf("sibt%d", os.Getpid()%100000)
	cmd := exec.Command("ip", "netns", "exec", ns, dumpcap, "-q", "-P", "-i", iface, "-w", file)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		time.Sleep(300 * time.Millisecond) // the last frames reach dumpcap
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}
	t.Cleanup(stop)
	for i := 0; i < 100; i++ { // dumpcap writes the file's header once it captures
		if fi, err := os.Stat(file); err == nil && fi.Size() > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	return file, stop
}

// RC and UD between two vHCAs whose frames cross a real bridge through
// their TAPs: the destination's MAC comes from ARP, the data arrives, and
// the kernel counts the frames on the netdevs.
func TestTAPBridge(t *testing.T) {
	for _, c := range []struct {
		mtu  int
		path vhca.MTU
		// GIDs: 0 link-local, 1 IPv4 (ARP), 2 IPv6 (neighbour
		// discovery), all RoCEv2; then 3, 4, 5 the same as RoCEv1.
		gidIndex int
	}{{1500, vhca.MTU1024, 1}, {9000, vhca.MTU4096, 1}, {1500, vhca.MTU1024, 2}, {1500, vhca.MTU1024, 4}} {
		t.Run(fmt.Sprintf("mtu%d/gid%d", c.mtu, c.gidIndex), func(t *testing.T) {
			sock, devA, devB := tapLab(t, c.mtu)
			ctx, err := client.Open(devA, &client.Options{Socket: sock})
			if err != nil {
				t.Fatal(err)
			}
			pa, err := ctx.QueryPort(1)
			ctx.Close()
			if err != nil || pa.ActiveMTU != c.path || pa.Netdev != devA {
				t.Fatalf("active MTU %v on a %d-byte netdev %q, want %v on %s (%v)", pa.ActiveMTU, c.mtu, pa.Netdev, c.path, devA, err)
			}
			pcap, stop := capture(t, "br0")
			a, b := newPeer(t, sock, devA, 1<<20), newPeer(t, sock, devB, 1<<20)
			for _, p := range []*peer{a, b} {
				g, err := p.ctx.QueryGID(1, c.gidIndex)
				if err != nil {
					t.Fatal(err)
				}
				p.ep.GID = g.GID
			}
			for _, x := range [][2]*peer{{a, b}, {b, a}} {
				if err := x[0].qp.Connect(client.Path{GIDIndex: c.gidIndex, MTU: c.path, Access: acc, LocalPSN: x[0].ep.PSN, Remote: x[1].ep}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range a.buf.B {
				a.buf.B[i] = byte(i * 31)
			}
			n := 300000
			if wc := a.write(t, 0, n, b.mr.Addr, b.mr.RKey); wc.Status != vhca.WCSuccess {
				t.Fatalf("RDMA WRITE across the bridge: %+v", wc)
			}
			if !bytes.Equal(b.buf.B[:n], a.buf.B[:n]) {
				t.Fatal("data differs after the bridge")
			}
			out, err := exec.Command("ip", "-n", fmt.Sprintf("sibt%d", os.Getpid()%100000), "-s", "link", "show", devB).CombinedOutput()
			if err != nil {
				t.Fatal(err, string(out))
			}
			// The netdev of B's port carried the packets to B: its TX
			// (towards the vHCA) counts at least n/MTU frames.
			lines := strings.Split(string(out), "\n")
			var tx int
			for i, l := range lines {
				if strings.Contains(l, "TX:") && i+1 < len(lines) {
					fmt.Sscan(strings.Fields(lines[i+1])[1], &tx)
				}
			}
			if tx < n/c.path.Bytes() {
				t.Fatalf("netdev %s sent %d frames, want at least %d:\n%s", devB, tx, n/c.path.Bytes(), out)
			}
			// What crossed the bridge is RoCEv2 as the spec and rxe
			// write it: every ICRC right, Wireshark dissects it cleanly.
			stop()
			python := testtools.Require(t, "python3")
			cmd := exec.Command(python, testtools.CheckPcap(t), "-q", "--no-scapy", "--require-roce",
				"--expect-opcodes", "RC_RDMA_WRITE_FIRST,RC_RDMA_WRITE_MIDDLE,RC_RDMA_WRITE_LAST,RC_ACKNOWLEDGE",
				"--expect-min", fmt.Sprint(n/c.path.Bytes()), pcap)
			out, err = cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("check_pcap on the bridge's capture: %v\n%s", err, out)
			}
			encap := map[int]string{1: "RoCEv2/IPv4", 2: "RoCEv2/IPv6", 4: "RoCEv1"}[c.gidIndex]
			if !strings.Contains(string(out), encap) {
				t.Fatalf("no %s packet in the capture:\n%s", encap, out)
			}
		})
	}
}

// An address added at run time: its GID appears (GID_CHANGE to the
// device's clients), answers ARP, and carries RDMA; removed, its entry
// is empty and nothing else moved.
func TestTAPAddressAtRunTime(t *testing.T) {
	sock, devA, devB := tapLab(t, 1500)
	a, b := newPeer(t, sock, devA, 1<<20), newPeer(t, sock, devB, 1<<20)
	i, err := b.ctx.AddAddr(1, netip.MustParseAddr("10.77.0.22"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.ctx.QueryGID(1, i)
	if err != nil || netip.AddrFrom16(g.GID).Unmap() != netip.MustParseAddr("10.77.0.22") {
		t.Fatalf("GID %d: %+v, %v", i, g, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ev, err := b.ctx.AsyncEvent(ctx); err != nil || ev.Type != vhca.EventGIDChange || ev.Port != 1 {
		t.Fatalf("event %+v, %v", ev, err)
	}
	b.ep.GID = g.GID
	if err := a.qp.Connect(client.Path{GIDIndex: 1, MTU: vhca.MTU1024, Access: acc, LocalPSN: a.ep.PSN, Remote: b.ep}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(client.Path{GIDIndex: i, MTU: vhca.MTU1024, Access: acc, LocalPSN: b.ep.PSN, Remote: a.ep}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf.B, "to the new address")
	if wc := a.write(t, 0, 18, b.mr.Addr, b.mr.RKey); wc.Status != vhca.WCSuccess || string(b.buf.B[:18]) != "to the new address" {
		t.Fatalf("WRITE to the new address: %+v", wc)
	}
	if err := b.ctx.DelAddr(1, netip.MustParseAddr("10.77.0.22")); err != nil {
		t.Fatal(err)
	}
	if g, _ := b.ctx.QueryGID(1, i); g.GID != ([16]byte{}) {
		t.Fatalf("entry %d after DelAddr: %+v", i, g)
	}
	if g, _ := b.ctx.QueryGID(1, 1); netip.AddrFrom16(g.GID).Unmap() != netip.MustParseAddr("10.77.0.2") {
		t.Fatalf("entry 1 moved: %+v", g)
	}
}
