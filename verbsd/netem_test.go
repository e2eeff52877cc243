package verbsd_test

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

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

// The same faults on the fast path: netem (or nftables) on the switch
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
// vHCAs, qdiscs the netdevs netem goes on.
func faults(t *testing.T, mtu vhca.MTU, lab func(t *testing.T) (sock, devA, devB, ns string, qdiscs []string)) {
	for _, f := range []struct {
		name  string
		netem []string
		// Where netem is missing: the percentage of RoCE frames nftables
		// treats, and how (drop, or overwrite a byte after the BTH).
		nftPct    int
		nftAction []string
	}{
		{"loss1", []string{"loss", "1%"}, 1, []string{"drop"}},
		{"loss5", []string{"loss", "5%"}, 5, []string{"drop"}},
		{"reorder", []string{"delay", "1ms", "reorder", "25%", "50%"}, 0, nil},
		{"duplicate", []string{"duplicate", "5%"}, 0, nil},
		{"corrupt", []string{"corrupt", "2%"}, 2, []string{"@th,160,8", "set", "0x55"}},
		{"delay1ms", []string{"delay", "1ms"}, 0, nil},
	} {
		t.Run(f.name, func(t *testing.T) {
			sock, devA, devB, ns, qdiscs := lab(t)
			for _, dev := range qdiscs {
				args := append([]string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem"}, f.netem...)
				if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
					if !bytes.Contains(out, []byte("qdisc kind is unknown")) {
						t.Fatalf("tc: %v: %s", err, out)
					}
					// A kernel without sch_netem (this project's CI
					// machines): random loss can still be had from
					// nftables on the bridge; the other faults cannot.
					if f.nftPct == 0 {
						t.Skip("the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), and nftables cannot " + f.name)
					}
					nftFault(t, ns, f.nftPct, f.nftAction)
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
			rng := rand.New(rand.NewPCG(uint64(len(f.name)), 1))
			sent, got := sha256.New(), sha256.New()
			start := time.Now()
			for i := 0; i < *netemMB; i++ {
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
				t.Fatalf("%d MB under %v: checksums differ", *netemMB, f.netem)
			}
			ca, _ := a.ctx.QueryCounters(1)
			cb, _ := b.ctx.QueryCounters(1)
			t.Logf("%d MB under %v in %v: A retransmits %d, timeouts %d, NAKs received %d; B PSN drops %d, malformed %d",
				*netemMB, f.netem, time.Since(start).Round(time.Millisecond), ca.Retransmits, ca.Timeouts, ca.NAKsRcvd, cb.PSNDrops, cb.Malformed)
			switch f.name {
			case "loss1", "loss5":
				if ca.Retransmits == 0 {
					t.Error("loss without retransmissions")
				}
			case "duplicate":
				if cb.PSNDrops == 0 {
					t.Error("duplicates not dropped")
				}
			case "corrupt":
				if cb.Malformed+ca.Malformed == 0 {
					t.Error("corruption not seen by the ICRC check")
				}
			}
		})
	}
}

// nftFault applies action to pct percent of the RoCEv2 frames the lab's
// bridge forwards, chosen at random (nftables' numgen), both ways.
func nftFault(t *testing.T, ns string, pct int, action []string) {
	t.Helper()
	nft := testtools.Require(t, "nft")
	for _, args := range [][]string{
		{"add", "table", "bridge", "lossy"},
		{"add", "chain", "bridge", "lossy", "fw", "{ type filter hook forward priority 0; }"},
		append([]string{"add", "rule", "bridge", "lossy", "fw", "udp", "dport", "4791", "numgen", "random", "mod", "100", "<", fmt.Sprint(pct), "counter"}, action...),
	} {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", ns, nft}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("nft %v: %v: %s", args, err, out)
		}
	}
}
