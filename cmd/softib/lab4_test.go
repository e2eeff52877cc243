package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
)

// A four-node lab: every ordered pair of nodes does RC SEND, WRITE, READ
// and fetch-and-add, UC WRITE and a UD datagram across the lab's bridges,
// veths and TAPs.
func TestLabFourNodes(t *testing.T) {
	var topo bytes.Buffer
	for i := 1; i <= 4; i++ {
		fmt.Fprintf(&topo, "node n%d addr=10.13.0.%d/24 host=10.13.0.%d/24 mtu=%d\n", i, i, 100+i, []int{1500, 9000}[i%2])
	}
	allPairs(t, "f", topo.String())
}

// The same across a lab of fast-path nodes: two vHCAs with TAPs whose
// RoCEv2 goes through AF_XDP on their veths (path=xdp), and two attached
// to their namespaces' veths (path=attach), sharing the kernel's
// addresses, the kernel resolving their neighbours.
func TestLabFastPath(t *testing.T) {
	softib, name, _ := allPairs(t, "x", "node n1 addr=10.14.0.1/24 host=10.14.0.101/24 path=xdp\n"+
		"node n2 addr=10.14.0.2/24 host=10.14.0.102/24 path=xdp xdpmode=native\n"+
		"node n3 host=10.14.0.3/24 path=attach\n"+
		"node n4 host=10.14.0.4/24 path=attach xdpmode=generic\n")
	// An attached vHCA's GIDs follow its netdev's addresses, as softib
	// gids shows them.
	gids := func() string {
		out, err := exec.Command(softib, "-netns", name+"-n3", "gids", "vhca-n3").CombinedOutput()
		if err != nil {
			t.Fatalf("softib gids: %v\n%s", err, out)
		}
		return string(out)
	}
	if out, err := exec.Command("ip", "-n", name+"-n3", "addr", "add", "10.14.9.3/24", "dev", "veth0").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(gids(), "10.14.9.3"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the added address is not in softib gids:\n%s", gids())
		}
	}
	if out := gids(); !strings.Contains(out, "veth0") {
		t.Fatalf("softib gids does not name the attached netdev:\n%s", out)
	}
	exec.Command("ip", "-n", name+"-n3", "addr", "del", "10.14.9.3/24", "dev", "veth0").Run()
	for deadline := time.Now().Add(3 * time.Second); strings.Contains(gids(), "10.14.9.3"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the removed address stays in softib gids:\n%s", gids())
		}
	}
}

// allPairs brings up the lab of the topology lines, and has every ordered
// pair of vHCAs do RC SEND, WRITE, READ and fetch-and-add, UC WRITE and a
// UD datagram: on Ethernet with GID 1 (the first address), on InfiniBand
// by LID.
func allPairs(t *testing.T, prefix, topo string) (softib, name, file string) {
	return allPairsOpts(t, prefix, "", topo)
}

// allPairsOpts is allPairs with options on the lab line, and flags of
// lab up.
func allPairsOpts(t *testing.T, prefix, labOpts, topo string, upFlags ...string) (softib, name, file string) {
	softib, name, file = labFileOpts(t, prefix, labOpts, topo)
	if out, err := exec.Command(softib, append(append([]string{"lab", "up"}, upFlags...), file)...).CombinedOutput(); err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	opts := &client.Options{Socket: "/run/softib/" + name + ".sock"}
	l, err := parseLab(file)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range l.nodes {
		names = append(names, n.name)
	}
	if l.ib != nil {
		for _, n := range l.ib.nodes {
			if !n.sw {
				names = append(names, n.name)
			}
		}
	}
	var nodes []*labVHCA
	for _, name := range names {
		n := openVHCA(t, opts, name)
		if pa, _ := n.ctx.QueryPort(1); pa.LinkLayer == vhca.LinkLayerEthernet {
			g, _ := n.ctx.QueryGID(1, 1)
			n.gid = g.GID // InfiniBand: by LID alone, no GRH
		}
		nodes = append(nodes, n)
	}
	wait := func(cq *client.CQ) client.WC { t.Helper(); return waitCQ(t, cq) }
	qp := func(n *labVHCA, typ vhca.QPType) *client.QP { return n.qp(t, typ) }
	for i, a := range nodes {
		for j, b := range nodes {
			if i == j {
				continue
			}
			mtu := min(a.mtu, b.mtu)
			for _, typ := range []vhca.QPType{vhca.QPTypeRC, vhca.QPTypeUC, vhca.QPTypeUD} {
				qa, qb := qp(a, typ), qp(b, typ)
				ea := client.Endpoint{QPN: qa.Num, PSN: 1000, GID: a.gid, LID: a.lid}
				eb := client.Endpoint{QPN: qb.Num, PSN: 2000, GID: b.gid, LID: b.lid}
				if err := qa.Connect(client.Path{GIDIndex: 1, MTU: mtu, Access: labAccess, LocalPSN: ea.PSN, Remote: eb, QKey: 7}); err != nil {
					t.Fatal(err)
				}
				if err := qb.Connect(client.Path{GIDIndex: 1, MTU: mtu, Access: labAccess, LocalPSN: eb.PSN, Remote: ea, QKey: 7}); err != nil {
					t.Fatal(err)
				}
				src, dst := a.mr.Buf[:100000], b.mr.Buf[:100000]
				for k := range src {
					src[k] = byte(i*7 + j*13 + k)
				}
				n := 100000
				if typ == vhca.QPTypeUD {
					n = mtu.Bytes()
				}
				sge := []client.SGE{{Addr: a.mr.Addr, Length: uint32(n), LKey: a.mr.LKey}}
				if typ == vhca.QPTypeUD {
					ah, err := a.pd.CreateAH(client.AV{Port: 1, DLID: b.lid, IsGlobal: b.gid != [16]byte{}, GRH: vhca.GlobalRoute{DGID: b.gid, SGIDIndex: 1, HopLimit: 64}})
					if err != nil {
						t.Fatal(err)
					}
					// A datagram once went missing here under make test's
					// load (3 switches, CI); UD may lose one, but this
					// fabric should not: say what the ports counted, and
					// try once more.
					for try := 0; ; try++ {
						qb.PostRecv([]client.RecvWR{{WRID: 1, SGL: []client.SGE{{Addr: b.mr.Addr + 200000, Length: uint32(n + 40), LKey: b.mr.LKey}}}})
						qa.PostSend([]client.SendWR{{Opcode: vhca.WRSend, Flags: vhca.SendSignaled, SGL: sge, AH: ah, RemoteQPN: qb.Num, RemoteQKey: 7}})
						if wc := wait(a.cq); wc.Status != vhca.WCSuccess {
							t.Fatalf("UD %d->%d send: %+v", i, j, wc)
						}
						wc, ok := pollCQ(b.cq, 10*time.Second)
						if !ok && try == 0 {
							t.Logf("UD %d->%d: no datagram within 10 s; sender's port %+v; receiver's %+v", i, j, labCounters(a), labCounters(b))
							continue
						}
						if !ok || wc.Status != vhca.WCSuccess || !bytes.Equal(b.mr.Buf[200040:200040+n], src[:n]) {
							t.Fatalf("UD %d->%d receive: %+v (a completion: %v)", i, j, wc, ok)
						}
						if try > 0 {
							// The first may still come: its completion
							// must not meet a later wait on this CQ.
							time.Sleep(100 * time.Millisecond)
							pollCQ(b.cq, 0)
						}
						break
					}
					continue
				}
				qa.PostSend([]client.SendWR{{Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled, SGL: sge, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
				if typ == vhca.QPTypeUC {
					wait(a.cq)
					// UC has no ACK: wait until the last byte is there.
					for deadline := time.Now().Add(5 * time.Second); dst[n-1] != src[n-1] && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
				} else if wc := wait(a.cq); wc.Status != vhca.WCSuccess {
					t.Fatalf("RC WRITE %d->%d: %+v", i, j, wc)
				}
				if !bytes.Equal(dst[:n], src[:n]) {
					t.Fatalf("%v WRITE %d->%d: data differs", typ, i, j)
				}
				if typ != vhca.QPTypeRC {
					continue
				}
				// READ it back, SEND, and a fetch-and-add.
				qa.PostSend([]client.SendWR{{Opcode: vhca.WRRDMARead, Flags: vhca.SendSignaled,
					SGL: []client.SGE{{Addr: a.mr.Addr + 300000, Length: uint32(n), LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
				if wc := wait(a.cq); wc.Status != vhca.WCSuccess || !bytes.Equal(a.mr.Buf[300000:300000+n], src[:n]) {
					t.Fatalf("RC READ %d->%d: %+v", i, j, wc)
				}
				qb.PostRecv([]client.RecvWR{{WRID: 3, SGL: []client.SGE{{Addr: b.mr.Addr + 500000, Length: 200000, LKey: b.mr.LKey}}}})
				qa.PostSend([]client.SendWR{{Opcode: vhca.WRSend, Flags: vhca.SendSignaled, SGL: sge}})
				wait(a.cq)
				if wc := wait(b.cq); wc.Status != vhca.WCSuccess || wc.ByteLen != uint32(n) || !bytes.Equal(b.mr.Buf[500000:500000+n], src[:n]) {
					t.Fatalf("RC SEND %d->%d: %+v", i, j, wc)
				}
				b.mr.Buf[900000] = 5
				qa.PostSend([]client.SendWR{{Opcode: vhca.WRAtomicFetchAdd, Flags: vhca.SendSignaled, CompareAdd: 10,
					SGL: []client.SGE{{Addr: a.mr.Addr + 900000, Length: 8, LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr + 900000, RKey: b.mr.RKey}})
				if wc := wait(a.cq); wc.Status != vhca.WCSuccess || a.mr.Buf[900000] != 5 || b.mr.Buf[900000] != 15 {
					t.Fatalf("fetch-add %d->%d: %+v, got %d, now %d", i, j, wc, a.mr.Buf[900000], b.mr.Buf[900000])
				}
			}
		}
	}
	return softib, name, file
}

// labVHCA is a lab's vHCA opened for a test: a PD, a CQ, 1 MiB
// registered for every remote access.
type labVHCA struct {
	ctx *client.Context
	pd  *client.PD
	cq  *client.CQ
	mr  *client.MR
	gid [16]byte
	lid uint16
	mtu vhca.MTU
}

const labAccess = vhca.AccessLocalWrite | vhca.AccessRemoteWrite | vhca.AccessRemoteRead | vhca.AccessRemoteAtomic

func openVHCA(t *testing.T, opts *client.Options, name string) *labVHCA {
	t.Helper()
	ctx, err := client.Open("vhca-"+name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	n := &labVHCA{ctx: ctx}
	n.pd, _ = ctx.AllocPD()
	n.cq, _ = ctx.CreateCQ(256, nil)
	buf, _ := ctx.Alloc(1 << 20)
	if n.mr, err = n.pd.RegMR(buf.B, labAccess); err != nil {
		t.Fatal(err)
	}
	pa, _ := ctx.QueryPort(1)
	n.mtu, n.lid = pa.ActiveMTU, pa.LID
	return n
}

func (n *labVHCA) qp(t *testing.T, typ vhca.QPType) *client.QP {
	t.Helper()
	q, err := n.pd.CreateQP(client.QPInitAttr{Type: typ, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: client.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// waitCQ polls cq for a completion, failing the test after 10 s.
func waitCQ(t *testing.T, cq *client.CQ) client.WC {
	t.Helper()
	wc, ok := pollCQ(cq, 10*time.Second)
	if !ok {
		t.Fatal("no completion within 10 s")
	}
	return wc
}

// pollCQ polls cq for a completion for up to d (once if d is 0).
func pollCQ(cq *client.CQ, d time.Duration) (client.WC, bool) {
	var wc [1]client.WC
	for deadline := time.Now().Add(d); ; {
		if k, _ := cq.Poll(wc[:]); k == 1 {
			return wc[0], true
		}
		if !time.Now().Before(deadline) {
			return client.WC{}, false
		}
		client.Relax()
	}
}

// labCounters is port 1's counters of n, for a test's log.
func labCounters(n *labVHCA) abi.Counters {
	c, _ := n.ctx.QueryCounters(1)
	return c
}

// lab NAME direct: two nodes on the two ends of one veth pair, with no
// switch namespace, one on the fast path (its veth's NAPI threaded) and
// one on the TAP path; every transport works both ways. Brought up with
// the poll-mode layout where there are two CPUs: verbsd's engine thread
// on CPU 0, the fast-path veth's NAPI threads on the last CPU.
func TestLabDirect(t *testing.T) {
	var upFlags []string
	last := strconv.Itoa(runtime.NumCPU() - 1)
	if runtime.NumCPU() >= 2 {
		upFlags = []string{"-engine-cpus", "0", "-napi-cpus", last}
	}
	_, name, _ := allPairsOpts(t, "d", "direct", "node a addr=10.16.0.1/24 host=10.16.0.101/24 path=xdp\n"+
		"node b addr=10.16.0.2/24 host=10.16.0.102/24\n", upFlags...)
	if upFlags != nil {
		pid, _ := os.ReadFile("/run/softib/" + name + ".pid")
		if engine := threadsBound(t, "/proc/"+strings.TrimSpace(string(pid))+"/task/*/status", "0"); engine != 1 {
			t.Errorf("%d verbsd threads bound to CPU 0, want the engine's alone", engine)
		}
		if napi := threadsBound(t, "/proc/[0-9]*/status", last); napi == 0 {
			t.Errorf("no NAPI thread bound to CPU %s", last)
		}
		// The threads bound are the ones the kernel names for the
		// fast-path node's veth.
		pids, err := napiThreadsOf(name+"-a", "veth0")
		if err != nil || len(pids) == 0 {
			t.Fatalf("NAPI threads of %s-a veth0: %v, %v", name, pids, err)
		}
		for _, pid := range pids {
			if n := threadsBound(t, "/proc/"+strconv.Itoa(pid)+"/status", last); n != 1 {
				t.Errorf("NAPI thread %d of %s-a veth0 not bound to CPU %s", pid, name, last)
			}
		}
	}
	nss, _ := exec.Command("ip", "netns", "list").Output()
	for _, ns := range strings.Fields(string(nss)) {
		if ns == name {
			t.Fatalf("a direct lab made a switch namespace %s", name)
		}
	}
	out, err := exec.Command("ip", "-n", name+"-a", "-d", "link", "show", "veth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "veth") {
		t.Fatalf("node a's veth0: %v\n%s", err, out)
	}
	threaded, err := exec.Command("ip", "netns", "exec", name+"-a", "cat", "/sys/class/net/veth0/threaded").CombinedOutput()
	if err != nil || strings.TrimSpace(string(threaded)) != "1" {
		t.Fatalf("node a's veth0 threaded NAPI = %q (%v), want 1", threaded, err)
	}
}

func TestParseLabDirect(t *testing.T) {
	for _, tc := range []struct{ lab, err string }{
		{"lab x direct\nnode a addr=10.1.0.1/24 host=10.1.0.101/24\nnode b addr=10.1.0.2/24 host=10.1.0.102/24\n", ""},
		{"lab x direct\nnode a addr=10.1.0.1/24 host=10.1.0.101/24\n", "joins two nodes"},
		{"lab x direct\nnode a addr=10.1.0.1/24 host=10.1.0.101/24\nnode b addr=10.1.0.2/24 host=10.1.0.102/24 mtu=9000\n", "one MTU"},
		{"lab x sideways\nnode a addr=10.1.0.1/24 host=10.1.0.101/24\n", "netns|direct"},
	} {
		f := filepath.Join(t.TempDir(), "lab")
		if err := os.WriteFile(f, []byte(tc.lab), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := parseLab(f)
		switch {
		case tc.err == "" && (err != nil || !l.direct):
			t.Errorf("%q: %v, direct=%v", tc.lab, err, l != nil && l.direct)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one that says %q", tc.lab, err, tc.err)
		}
	}
}

// threadsBound counts the tasks of the /proc status files that glob
// matches whose CPUs are exactly cpus (a Cpus_allowed_list); for
// /proc/PID/status, only kernel NAPI threads are counted.
func threadsBound(t *testing.T, glob, cpus string) int {
	t.Helper()
	files, _ := filepath.Glob(glob)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the task ended
		}
		st := string(b)
		if !strings.Contains(glob, "/task/") && !strings.HasPrefix(st, "Name:\tnapi/") {
			continue
		}
		for _, line := range strings.Split(st, "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) == cpus {
				n++
			}
		}
	}
	return n
}
