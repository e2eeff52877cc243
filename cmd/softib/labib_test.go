package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/internal/testtools"
	"github.com/softib/softib/vhca"
)

// RC, UC and UD between vHCAs on native InfiniBand ports through one, two
// and three vswitches (cables over loopback, credits, LFTs by min-hop).
func TestLabIB(t *testing.T) {
	for _, switches := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("%dswitches", switches), func(t *testing.T) {
			var topo strings.Builder
			for i := 1; i <= switches; i++ {
				fmt.Fprintf(&topo, "switch s%d vls=2\n", i)
			}
			topo.WriteString("hca a vls=2\nhca b vls=2\nhca c vls=2\ncable a s1\ncable c s1\n")
			for i := 1; i < switches; i++ {
				fmt.Fprintf(&topo, "cable s%d s%d\n", i, i+1)
			}
			fmt.Fprintf(&topo, "cable s%d b\n", switches)
			pcap := filepath.Join(t.TempDir(), "s1.pcap")
			fmt.Fprintf(&topo, "capture s1:1 %s\n", pcap) // a's port
			softib, _, file := allPairs(t, fmt.Sprintf("i%d", switches), topo.String())
			if switches != 2 {
				return
			}
			// What crossed a's switch port is IBA 1.4 on the wire: every
			// ICRC and VCRC right, Wireshark dissects it cleanly.
			out, err := exec.Command(softib, "lab", "down", file).CombinedOutput()
			if err != nil {
				t.Fatalf("lab down: %v\n%s", err, out)
			}
			python := testtools.Require(t, "python3")
			out, err = exec.Command(python, testtools.CheckPcap(t), "-q", "--expect-opcodes",
				"RC_RDMA_WRITE_FIRST,RC_RDMA_WRITE_LAST,RC_ACKNOWLEDGE,UD_SEND_ONLY,UC_RDMA_WRITE_FIRST", "--expect-min", "100", pcap).CombinedOutput()
			if err != nil {
				t.Fatalf("check_pcap on the switch port's capture: %v\n%s", err, out)
			}
		})
	}
}

// A router between two subnets: RC, UC and UD cross it with a GRH (the
// DLID is the router port's on the sender's subnet, the DGID the
// destination's), their LRHs rewritten for the next subnet; an attempt
// by LID alone dies in the sender's subnet, as on real fabrics, and the
// switch counts it.
func TestLabRouter(t *testing.T) {
	softib, name, file := labFile(t, "r", "switch sa\nswitch sb\nrouter r1 ports=2\n"+
		"hca a prefix=fe800000000000aa\nhca b prefix=fe800000000000bb\n"+
		"cable a sa\ncable sa r1:1\ncable r1:2 sb\ncable sb b\n")
	if out, err := exec.Command(softib, "lab", "up", file).CombinedOutput(); err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	l, err := parseLab(file)
	if err != nil {
		t.Fatal(err)
	}
	opts := &client.Options{Socket: "/run/softib/" + name + ".sock"}
	acc := labAccess
	type end struct {
		*labVHCA
		router uint16
	}
	open := func(n string) *end {
		e := &end{labVHCA: openVHCA(t, opts, n), router: l.ib.RouterLID(n)}
		g, _ := e.ctx.QueryGID(1, 0)
		e.gid = g.GID
		if e.router == 0 {
			t.Fatalf("%s: no router LID", n)
		}
		return e
	}
	a, b := open("a"), open("b")
	wait := func(cq *client.CQ) client.WC { t.Helper(); return waitCQ(t, cq) }
	qp := func(e *end, typ vhca.QPType) *client.QP { return e.qp(t, typ) }
	for k := range a.mr.Buf[:200000] {
		a.mr.Buf[k] = byte(k * 13)
	}
	for _, typ := range []vhca.QPType{vhca.QPTypeRC, vhca.QPTypeUC, vhca.QPTypeUD} {
		qa, qb := qp(a, typ), qp(b, typ)
		// Across the router: the DLID is the router's on one's own subnet.
		ea := client.Endpoint{QPN: qa.Num, PSN: 100, GID: a.gid, LID: b.router}
		eb := client.Endpoint{QPN: qb.Num, PSN: 200, GID: b.gid, LID: a.router}
		if err := qa.Connect(client.Path{MTU: vhca.MTU4096, Access: acc, LocalPSN: 100, Remote: eb, QKey: 7}); err != nil {
			t.Fatal(err)
		}
		if err := qb.Connect(client.Path{MTU: vhca.MTU4096, Access: acc, LocalPSN: 200, Remote: ea, QKey: 7}); err != nil {
			t.Fatal(err)
		}
		n := 100000
		if typ == vhca.QPTypeUD {
			n = 4096
			ah, err := a.pd.CreateAH(client.AV{Port: 1, DLID: a.router, IsGlobal: true, GRH: vhca.GlobalRoute{DGID: b.gid, HopLimit: 8}})
			if err != nil {
				t.Fatal(err)
			}
			qb.PostRecv([]client.RecvWR{{WRID: 1, SGL: []client.SGE{{Addr: b.mr.Addr + 500000, Length: uint32(n + 40), LKey: b.mr.LKey}}}})
			qa.PostSend([]client.SendWR{{Opcode: vhca.WRSend, Flags: vhca.SendSignaled, AH: ah, RemoteQPN: qb.Num, RemoteQKey: 7,
				SGL: []client.SGE{{Addr: a.mr.Addr, Length: uint32(n), LKey: a.mr.LKey}}}})
			wait(a.cq)
			if wc := wait(b.cq); wc.Status != vhca.WCSuccess || !bytes.Equal(b.mr.Buf[500040:500040+n], a.mr.Buf[:n]) {
				t.Fatalf("UD across the router: %+v", wc)
			}
			continue
		}
		qa.PostSend([]client.SendWR{{Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey,
			SGL: []client.SGE{{Addr: a.mr.Addr, Length: uint32(n), LKey: a.mr.LKey}}}})
		if wc := wait(a.cq); wc.Status != vhca.WCSuccess {
			t.Fatalf("%v WRITE across the router: %+v", typ, wc)
		}
		for deadline := time.Now().Add(5 * time.Second); !bytes.Equal(b.mr.Buf[:n], a.mr.Buf[:n]) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if !bytes.Equal(b.mr.Buf[:n], a.mr.Buf[:n]) {
			t.Fatalf("%v WRITE across the router: data differs", typ)
		}
		clear(b.mr.Buf[:n])
	}

	// By LID alone (no GRH), as if b were on a's subnet: the packets never
	// cross; the requester retries, then gives up.
	before, err := switchStatus("/run/softib/" + name + "-sa.status")
	if err != nil {
		t.Fatal(err)
	}
	qa, qb := qp(a, vhca.QPTypeRC), qp(b, vhca.QPTypeRC)
	if err := qa.Connect(client.Path{MTU: vhca.MTU4096, Access: acc, LocalPSN: 1, Timeout: 8, RetryCnt: 1,
		Remote: client.Endpoint{QPN: qb.Num, PSN: 2, LID: b.lid}}); err != nil {
		t.Fatal(err)
	}
	qa.PostSend([]client.SendWR{{Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey,
		SGL: []client.SGE{{Addr: a.mr.Addr, Length: 64, LKey: a.mr.LKey}}}})
	if wc := wait(a.cq); wc.Status != vhca.WCRetryExcErr {
		t.Fatalf("a LID-only WRITE to another subnet: %+v, want RETRY_EXC_ERR", wc)
	}
	after, _ := switchStatus("/run/softib/" + name + "-sa.status")
	relay := func(st swStatus) (n uint64) {
		for _, p := range st.Ports {
			n += p.Counters["PortRcvSwitchRelayErrors"]
		}
		return n
	}
	if relay(after) <= relay(before) {
		t.Fatalf("subnet A's switch did not count the LID-only packets it could not relay: %d then %d", relay(before), relay(after))
	}
}

// An InfiniBand lab whose nodes each have a network namespace, the cables
// veth pairs between them: the same traffic crosses them.
func TestLabIBNetns(t *testing.T) {
	softib, name, file := allPairsOpts(t, "n", "netns", "switch s1\nswitch s2\nhca a\nhca b\ncable a s1\ncable s1 s2\ncable s2 b\n")
	nss, _ := exec.Command("ip", "netns", "list").Output()
	for _, n := range []string{"s1", "s2", "a", "b"} {
		if !strings.Contains(string(nss), name+"-"+n) {
			t.Fatalf("no namespace for %s: %s", n, nss)
		}
	}
	// Each switch runs in its own namespace.
	for _, sw := range []string{"s1", "s2"} {
		b, err := os.ReadFile("/run/softib/" + name + "-" + sw + ".pid")
		if err != nil {
			t.Fatal(err)
		}
		var in, want syscall.Stat_t
		pid := strings.TrimSpace(string(b))
		if syscall.Stat("/proc/"+pid+"/ns/net", &in) != nil || syscall.Stat("/var/run/netns/"+name+"-"+sw, &want) != nil || in.Ino != want.Ino {
			t.Fatalf("vswitch %s (pid %s) is not in namespace %s-%s", sw, pid, name, sw)
		}
	}
	// The cable between the switches is a veth in their namespaces.
	if out, err := exec.Command("ip", "-n", name+"-s1", "-s", "link", "show", "c1").CombinedOutput(); err != nil || !strings.Contains(string(out), "veth") && !strings.Contains(string(out), "c1@") {
		t.Fatalf("cable s1-s2 is no veth in s1's namespace: %v\n%s", err, out)
	}
	if out, err := exec.Command(softib, "lab", "down", file).CombinedOutput(); err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	nss, _ = exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(nss), name+"-") {
		t.Fatalf("namespaces left after lab down: %s", nss)
	}
}
