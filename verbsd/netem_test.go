package verbsd_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/internal/impair"
	"github.com/softib/softib/internal/testtools"

	"github.com/softib/softib/client"
	"github.com/softib/softib/vhca"
)

var netemMB = flag.Int("verbsd.netem-mb", 100, "megabytes each netem fault test moves")

// RC across the TAP lab with the kernel's netem disturbing both TAPs:
// loss, reordering, duplication, corruption, delay. Every transfer of
// -verbsd.netem-mb MB (in 1 MiB RDMA WRITEs, each into its own place)
// arrives exactly once, checked by SHA-256, and the port counters show
// the going back and the drops.
func TestNetemRC(t *testing.T) {
	faults(t, vhca.MTU4096, func(t *testing.T) (sock, devA, devB, ns string, qdiscs []string) {
		sock, devA, devB = tapLab(t, 9000)
		ns = fmt.Sprintf("sibt%d", os.Getpid()%100000)
		return sock, devA, devB, ns, []string{devA, devB}
	})
}

// The same faults on the fast path: netem (or the relay) on the switch
// between the two namespaces, whose veths carry RoCEv2 through AF_XDP.
func TestNetemFastPath(t *testing.T) {
	faults(t, vhca.MTU1024, func(t *testing.T) (sock, devA, devB, ns string, qdiscs []string) {
		_, sock, devA, devB = fastLab(t)
		ns = fmt.Sprintf("sibfs%d", os.Getpid()%100000)
		return sock, devA, devB, ns, []string{"vA", "vB"}
	})
}

// faults moves -verbsd.netem-mb MB over RC under each fault, on the
// set-up lab makes: ns is the namespace whose bridge joins the two
// vHCAs, qdiscs the two netdevs netem goes on. Where the kernel has no
// netem (this project's CI machines), the two netdevs leave the bridge
// and a seeded relay joins them (internal/impair) making the same
// faults on RoCEv2 frames, ARP and ND untouched.
func faults(t *testing.T, mtu vhca.MTU, lab func(t *testing.T) (sock, devA, devB, ns string, qdiscs []string)) {
	for _, f := range []struct {
		name  string
		netem []string
		relay impair.Config // where netem is missing
	}{
		{"loss1", []string{"loss", "1%"}, impair.Config{Loss: 0.01}},
		{"loss5", []string{"loss", "5%"}, impair.Config{Loss: 0.05}},
		{"reorder", []string{"delay", "1ms", "reorder", "25%", "50%"}, impair.Config{Reorder: 0.25}},
		{"duplicate", []string{"duplicate", "5%"}, impair.Config{Duplicate: 0.05}},
		{"corrupt", []string{"corrupt", "2%"}, impair.Config{Corrupt: 0.02}},
		{"delay1ms", []string{"delay", "1ms"}, impair.Config{Delay: time.Millisecond}},
	} {
		t.Run(f.name, func(t *testing.T) {
			sock, devA, devB, ns, qdiscs := lab(t)
			var relay *impair.Relay
			for _, dev := range qdiscs {
				args := append([]string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem"}, f.netem...)
				if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
					if !bytes.Contains(out, []byte("qdisc kind is unknown")) {
						t.Fatalf("tc: %v: %s", err, out)
					}
					relay = faultRelay(t, ns, qdiscs, f.name, f.relay)
					break
				}
			}
			const msg = 1 << 20
			a, b := newPeer(t, sock, devA, 4*msg), newPeer(t, sock, devB, 64*msg)
			for _, x := range [][2]*peer{{a, b}, {b, a}} {
				// Timeout 10 (4 ms): a lost tail comes back soon.
				p := client.Path{GIDIndex: 1, MTU: mtu, Access: acc, LocalPSN: x[0].ep.PSN, Remote: x[1].ep, Timeout: 10}
				if err := x[0].qp.Connect(p); err != nil {
					t.Fatal(err)
				}
			}
			mb := *netemMB
			if raceDetector {
				mb = min(mb, 10)
			}
			rng := rand.New(rand.NewPCG(uint64(len(f.name)), 1))
			sent, got := sha256.New(), sha256.New()
			start := time.Now()
			for i := 0; i < mb; i++ {
				src := a.buf.B[(i%4)*msg : (i%4+1)*msg]
				for k := 0; k < len(src); k += 8 {
					v := rng.Uint64()
					for j := range 8 {
						src[k+j] = byte(v >> (8 * j))
					}
				}
				sent.Write(src)
				slot := uint64(i%64) * msg
				if wc := a.write(t, (i%4)*msg, msg, b.mr.Addr+slot, b.mr.RKey); wc.Status != vhca.WCSuccess {
					t.Fatalf("WRITE %d under %v: %+v", i, f.netem, wc)
				}
				got.Write(b.buf.B[slot : slot+msg])
			}
			if string(sent.Sum(nil)) != string(got.Sum(nil)) {
				t.Fatalf("%d MB under %v: checksums differ", mb, f.netem)
			}
			ca, _ := a.ctx.QueryCounters(1)
			cb, _ := b.ctx.QueryCounters(1)
			how := "netem " + strings.Join(f.netem, " ")
			if relay != nil {
				how = fmt.Sprintf("the relay (no netem here): %+v", relay.Stats())
			}
			t.Logf("%d MB under %s in %v: A retransmits %d, timeouts %d, NAKs received %d; B PSN drops %d, malformed %d",
				mb, how, time.Since(start).Round(time.Millisecond), ca.Retransmits, ca.Timeouts, ca.NAKsRcvd, cb.PSNDrops, cb.Malformed)
			switch f.name {
			case "loss1", "loss5":
				if ca.Retransmits == 0 {
					t.Error("loss without retransmissions")
				}
			case "duplicate":
				if cb.PSNDrops == 0 {
					t.Error("duplicates not dropped")
				}
			case "reorder":
				if relay != nil && relay.Stats().Reordered == 0 {
					t.Error("nothing reordered")
				}
			case "corrupt":
				if cb.Malformed+ca.Malformed == 0 {
					t.Error("corruption not seen by the ICRC check")
				}
			}
		})
	}
}

// faultRelay takes the two netdevs out of their bridge and joins them by
// a relay making the fault on RoCEv2 frames, seeded by the fault's name.
func faultRelay(t *testing.T, ns string, devs []string, name string, c impair.Config) *impair.Relay {
	t.Helper()
	for _, d := range devs {
		testtools.IP(t, "-n", ns, "link", "set", d, "nomaster")
	}
	c.Netns, c.A, c.B, c.Only = "/var/run/netns/"+ns, devs[0], devs[1], 4791
	for _, b := range []byte(name) {
		c.Seed = c.Seed*31 + uint64(b)
	}
	r, err := impair.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// UC and UD across the TAP lab losing 5% of RoCEv2 frames (netem, or the
// relay where there is none), as the spec has them: UC never retransmits;
// a SEND missing a packet never completes at the responder, whose receive
// WQE takes the next message instead (IBA 1.4 §9.7.5.2.6), while the
// requester completes every one; UD datagrams are lost or arrive whole,
// once each. The counters show the drops and no retransmission.
func TestLossUCUD(t *testing.T) {
	sock, devA, devB := tapLab(t, 1500)
	ns := fmt.Sprintf("sibt%d", os.Getpid()%100000)
	args := []string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", devA, "root", "netem", "loss", "5%"}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		if !bytes.Contains(out, []byte("qdisc kind is unknown")) {
			t.Fatalf("tc: %v: %s", err, out)
		}
		faultRelay(t, ns, []string{devA, devB}, "lossucud", impair.Config{Loss: 0.05})
	}
	for _, c := range []struct {
		typ  vhca.QPType
		size int // bytes a message: UC 8 packets at MTU 1024; UD one
	}{{vhca.QPTypeUC, 8 * 1024}, {vhca.QPTypeUD, 1000}} {
		t.Run(c.typ.String(), func(t *testing.T) {
			lossyMessages(t, sock, devA, devB, c.typ, c.size)
		})
	}
}

// lossyMessages sends 500 SENDs of size bytes from devA to devB, each
// carrying its number, and checks what arrived: whole, once, in order,
// not all of them, none sent again.
func lossyMessages(t *testing.T, sock, devA, devB string, typ vhca.QPType, size int) {
	const msgs = 500
	type end struct {
		ctx *client.Context
		pd  *client.PD
		cq  *client.CQ
		mr  *client.MR
		qp  *client.QP
		gid [16]byte
	}
	open := func(dev string) *end {
		ctx, err := client.Open(dev, &client.Options{Socket: sock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
		e := &end{ctx: ctx}
		e.pd, _ = ctx.AllocPD()
		e.cq, _ = ctx.CreateCQ(1024, nil)
		buf, _ := ctx.Alloc(msgs * (size + 40))
		if e.mr, err = e.pd.RegMR(buf.B, acc); err != nil {
			t.Fatal(err)
		}
		if e.qp, err = e.pd.CreateQP(client.QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: client.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		g, _ := ctx.QueryGID(1, 1)
		e.gid = g.GID
		return e
	}
	a, b := open(devA), open(devB)
	var ah *client.AH
	if typ == vhca.QPTypeUD {
		for _, e := range []*end{a, b} {
			if err := e.qp.Connect(client.Path{QKey: 9}); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if ah, err = a.pd.CreateAH(client.AV{Port: 1, IsGlobal: true, GRH: vhca.GlobalRoute{DGID: b.gid, SGIDIndex: 1, HopLimit: 64}}); err != nil {
			t.Fatal(err)
		}
	} else {
		for _, x := range [][2]*end{{a, b}, {b, a}} {
			if err := x[0].qp.Connect(client.Path{GIDIndex: 1, MTU: vhca.MTU1024, Access: acc, LocalPSN: 7,
				Remote: client.Endpoint{QPN: x[1].qp.Num, PSN: 7, GID: x[1].gid}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	slot := size + 40 // room for a UD receive's GRH
	for i := range msgs {
		b.qp.PostRecv([]client.RecvWR{{WRID: uint64(i), SGL: []client.SGE{{Addr: b.mr.Addr + uint64(i*slot), Length: uint32(slot), LKey: b.mr.LKey}}}})
	}
	drain := func(cq *client.CQ, want int) []client.WC {
		var out []client.WC
		var wc [64]client.WC
		for deadline := time.Now().Add(10 * time.Second); len(out) < want && time.Now().Before(deadline); {
			n, _ := cq.Poll(wc[:])
			out = append(out, wc[:n]...)
			if n == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		return out
	}
	for i := range msgs {
		m := a.mr.Buf[i*size : (i+1)*size]
		for k := range m {
			m[k] = byte(i)
		}
		binary.BigEndian.PutUint16(m, uint16(i))
		if _, err := a.qp.PostSend([]client.SendWR{{Opcode: vhca.WRSend, Flags: vhca.SendSignaled, AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 9,
			SGL: []client.SGE{{Addr: a.mr.Addr + uint64(i*size), Length: uint32(size), LKey: a.mr.LKey}}}}); err != nil {
			t.Fatal(err)
		}
		if i%256 == 255 {
			for _, w := range drain(a.cq, 256) {
				if w.Status != vhca.WCSuccess {
					t.Fatalf("%v requester: %+v", typ, w)
				}
			}
		}
	}
	if got := drain(a.cq, msgs%256); len(got) != msgs%256 {
		t.Fatalf("%v requester: %d of its last %d completions", typ, len(got), msgs%256)
	}
	time.Sleep(200 * time.Millisecond)
	var wc [512]client.WC
	n, _ := b.cq.Poll(wc[:])
	last := -1
	off := 0
	if typ == vhca.QPTypeUD {
		off = 40
	}
	for _, w := range wc[:n] {
		if w.Status != vhca.WCSuccess || int(w.ByteLen) != size+off {
			t.Fatalf("%v receive: %+v", typ, w)
		}
		d := b.mr.Buf[int(w.WRID)*slot+off : int(w.WRID)*slot+off+size]
		id := int(binary.BigEndian.Uint16(d))
		if id <= last || id >= msgs || bytes.Count(d[2:], []byte{byte(id)}) != size-2 {
			t.Fatalf("%v message %d (after %d) torn, repeated or out of order", typ, id, last)
		}
		last = id
	}
	ca, _ := a.ctx.QueryCounters(1)
	cb, _ := b.ctx.QueryCounters(1)
	t.Logf("%v: %d of %d messages arrived, each whole, once, in order; A retransmits %d; B PSN drops %d", typ, n, msgs, ca.Retransmits, cb.PSNDrops)
	if n == 0 || n == msgs {
		t.Fatalf("with 5%% loss, %d of %d messages arrived", n, msgs)
	}
	if ca.Retransmits != 0 {
		t.Fatalf("%v sent %d packets again", typ, ca.Retransmits)
	}
}
