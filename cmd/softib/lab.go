package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/internal/cpulist"
)

// A lab is network namespaces joined into one Ethernet segment, each
// with a vHCA behind a TAP and a kernel address of its own for the TCP
// setup exchanges of perftest and the pingpongs (the vHCA's address is
// not the kernel's). The topology file:
//
//	# comment
//	lab NAME
//	node NAME addr=IP/LEN host=IP/LEN [mtu=N] [path=tap|xdp] [xdpmode=M]
//	node NAME host=IP/LEN path=attach [mtu=N] [xdpmode=M]
//
// addr= and host= may repeat (an IPv4 and an IPv6 address, say).
// path=xdp gives the node's vHCA the RoCEv2 fast path: AF_XDP on the
// node's veth, beside its TAP (which keeps ARP and ND); `softib perf
// --path tap` can still choose the TAP. path=attach gives it no TAP: the
// vHCA attaches to the node's veth, which holds the kernel's address, and
// shares it, as rxe shares a NIC. xdpmode= is auto, native or generic.
//
// `lab L direct` joins its two nodes' veth0s as the two ends of one veth
// pair, with no switch between them.
//
// For lab L and node N: namespace L-N holds bridge br0 (the node's
// segment: the TAP of vHCA N, the kernel's address, and a veth to the
// switch); namespace L holds the switch, bridge br0, joining the nodes'
// veths. One verbsd serves every vHCA of the lab, on
// /run/softib/L.sock. A verbs program reaches the vHCA of its namespace
// with `ip netns exec L-N softib -socket /run/softib/L.sock ...`.

type labNode struct {
	name        string
	addrs, host []string // the vHCA's and the kernel's, IPv4 and/or IPv6
	mtu         int
	path        string // tap, xdp or attach
	xdpMode     string
}

type lab struct {
	name  string
	nodes []labNode
	ib    *ibLab // an InfiniBand lab: switches, vHCAs, cables (labib.go)
	netns bool   // an InfiniBand lab whose nodes each have a namespace
	// direct: two nodes whose veths are the two ends of one pair, with no
	// switch namespace between them.
	direct bool
	// engineCPUs and napiCPUs place the work of the fast path on the
	// host's CPUs (lab up -engine-cpus, -napi-cpus): verbsd's engine on
	// the first, the NAPI threads of the fast-path veths on the others.
	engineCPUs string
	napiCPUs   []int
}

func parseLab(path string) (*lab, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l := &lab{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(strings.SplitN(sc.Text(), "#", 2)[0])
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, a...))
		}
		switch fields[0] {
		case "lab":
			if len(fields) < 2 || len(fields) > 3 || !validName(fields[1], 8) || len(fields) == 3 && fields[2] != "netns" && fields[2] != "direct" {
				return nil, bad("lab NAME [netns|direct] (NAME: letters and digits, up to 8)")
			}
			l.name = fields[1]
			l.netns = len(fields) == 3 && fields[2] == "netns"
			l.direct = len(fields) == 3 && fields[2] == "direct"
		case "node":
			if len(fields) < 2 || !validName(fields[1], 6) {
				return nil, bad("node NAME (letters and digits, up to 6) addr=IP/LEN host=IP/LEN [mtu=N] [path=tap|xdp|attach]")
			}
			n := labNode{name: fields[1], mtu: 1500, path: "tap"}
			for _, kv := range fields[2:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "addr", "host":
					if _, err := netip.ParsePrefix(v); err != nil {
						return nil, bad("%s=%s: %v", k, v, err)
					}
					if k == "addr" {
						n.addrs = append(n.addrs, v)
					} else {
						n.host = append(n.host, v)
					}
				case "mtu":
					m, err := strconv.Atoi(v)
					if err != nil || m < 1280 || m > 9000 {
						return nil, bad("mtu=%s (1280..9000)", v)
					}
					n.mtu = m
				case "path":
					if v != "tap" && v != "xdp" && v != "attach" {
						return nil, bad("path=%s (tap, xdp or attach)", v)
					}
					n.path = v
				case "xdpmode":
					if v != "auto" && v != "native" && v != "generic" {
						return nil, bad("xdpmode=%s (auto, native or generic)", v)
					}
					n.xdpMode = v
				default:
					return nil, bad("unknown node option %q", k)
				}
			}
			switch {
			case n.path == "attach" && (len(n.addrs) > 0 || len(n.host) == 0):
				return nil, bad("node %s: path=attach shares the kernel's address: host= and no addr=", n.name)
			case n.path != "attach" && (len(n.addrs) == 0 || len(n.host) == 0):
				return nil, bad("node %s needs addr= and host=", n.name)
			}
			l.nodes = append(l.nodes, n)
		case "switch", "router", "hca", "cable", "sl2vl", "vlarb", "capture", "mcast", "lft":
			if l.ib == nil {
				l.ib = &ibLab{}
			}
			if err := l.ib.parse(fields); err != nil {
				return nil, bad("%v", err)
			}
		default:
			return nil, bad("unknown line %q (lab, node; switch, router, hca, cable, sl2vl, vlarb, capture, mcast)", fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if l.ib != nil {
		if len(l.nodes) > 0 {
			return nil, fmt.Errorf("%s: node lines (Ethernet) and switch/hca/cable lines (InfiniBand) do not mix", path)
		}
		if l.name == "" {
			return nil, fmt.Errorf("%s: a lab line", path)
		}
		return l, l.ib.resolve()
	}
	if l.name == "" || len(l.nodes) == 0 {
		return nil, fmt.Errorf("%s: a lab line and at least one node", path)
	}
	if l.netns {
		return nil, fmt.Errorf("%s: lab %s netns is for InfiniBand labs (switch, hca, cable lines)", path, l.name)
	}
	if l.direct && (len(l.nodes) != 2 || l.nodes[0].mtu != l.nodes[1].mtu) {
		return nil, fmt.Errorf("%s: lab %s direct joins two nodes of one MTU by a veth pair", path, l.name)
	}
	return l, nil
}

func validName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (l *lab) ns(n labNode) string   { return l.name + "-" + n.name }
func (l *lab) vhca(n labNode) string { return "vhca-" + n.name }
func (l *lab) socket() string        { return "/run/softib/" + l.name + ".sock" }
func (l *lab) pidFile() string       { return "/run/softib/" + l.name + ".pid" }

func labCmd(opts *client.Options, args []string) error {
	usage := errors.New("lab up [-engine-cpus LIST -napi-cpus LIST] FILE | lab down FILE | lab counters FILE SWITCH [PORT]")
	if len(args) < 2 {
		return usage
	}
	var engineCPUs, napiCPUs string
	if args[0] == "up" {
		fs := flag.NewFlagSet("lab up", flag.ContinueOnError)
		fs.StringVar(&engineCPUs, "engine-cpus", "", "bind verbsd's engine to these CPUs (verbsd -cpus)")
		fs.StringVar(&napiCPUs, "napi-cpus", "", "bind the NAPI threads of the fast-path veths to these CPUs")
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
			return usage
		}
		args = []string{"up", fs.Arg(0)}
	}
	l, err := parseLab(args[1])
	if err != nil {
		return err
	}
	if engineCPUs != "" || napiCPUs != "" {
		if l.ib != nil {
			return fmt.Errorf("lab %s: -engine-cpus and -napi-cpus place an Ethernet lab's fast path", l.name)
		}
		if l.napiCPUs, err = cpulist.Parse(napiCPUs); err != nil {
			return fmt.Errorf("lab up -napi-cpus: %w", err)
		}
		l.engineCPUs = engineCPUs
	}
	switch {
	case args[0] == "down" && len(args) == 2:
		return l.down()
	case args[0] == "up" && len(args) == 2:
		return l.up()
	case args[0] == "counters" && (len(args) == 3 || len(args) == 4):
		return l.counters(args[2:])
	}
	return usage
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// threadedNAPI gives netdev dev of namespace ns a NAPI thread of its own
// (Linux 5.12 and later), where a fast-path node's veth runs its XDP
// program and copies frames into AF_XDP rings. Without it that work runs
// in the softirq of the core whose sendto kicked the peer's transmission:
// verbsd's engine, which then carries both ends of every frame. A kernel
// without the knob keeps softirq processing.
func threadedNAPI(ns, dev string) {
	out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo 1 >/sys/class/net/"+dev+"/threaded").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab: %s %s keeps softirq NAPI: %v %s\n", ns, dev, err, strings.TrimSpace(string(out)))
	}
}

// bridgeWithoutNetfilter makes the bridges of namespace ns plain
// Ethernet switches: where br_netfilter is loaded (container hosts load
// it), every bridged IP frame would otherwise go through the iptables
// hooks (net.bridge.bridge-nf-call-*; per namespace), which cost the
// lab's TAP path about a fifth of its bandwidth here. Nothing to do where
// the module is not loaded.
func bridgeWithoutNetfilter(ns string) {
	const script = `for f in /proc/sys/net/bridge/bridge-nf-call-iptables /proc/sys/net/bridge/bridge-nf-call-ip6tables /proc/sys/net/bridge/bridge-nf-call-arptables; do
	[ -e "$f" ] && echo 0 >"$f"
done; true`
	out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", script).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab: %s: bridges keep calling netfilter: %v %s\n", ns, err, strings.TrimSpace(string(out)))
	}
}

// down removes what up made, and whatever a crashed up left: it stops
// the lab's verbsd (by its pid file) and deletes the namespaces, which
// takes their bridges, veths and TAPs with them.
func (l *lab) down() error {
	if l.ib != nil {
		return l.ib.down(l)
	}
	stop(l.pidFile(), "verbsd")
	for _, n := range l.nodes {
		exec.Command("ip", "netns", "del", l.ns(n)).Run()
	}
	exec.Command("ip", "netns", "del", l.name).Run()
	return nil
}

// stop ends the daemon whose pid the file holds, if it is still the
// program named (a pid file may be stale), and removes the file.
func stop(pidFile, program string) {
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isProgram(pid, program) {
			syscall.Kill(pid, syscall.SIGTERM)
			for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
		os.Remove(pidFile)
	}
}

// spawn starts program (found beside self, else in $PATH) with args in
// a session of its own, so that it outlives this command, its output to
// logFile, its pid in pidFile.
func spawn(self, program string, args []string, pidFile, logFile string) error {
	return spawnIn("", self, program, args, pidFile, logFile)
}

// spawnIn is spawn inside the network namespace ns (`ip netns exec`,
// which execs the program: the pid is the program's), or where softib
// is if ns is empty.
func spawnIn(ns, self, program string, args []string, pidFile, logFile string) error {
	bin := filepath.Join(filepath.Dir(self), program)
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath(program); err != nil {
			return fmt.Errorf("%s not found beside softib nor in $PATH", program)
		}
	}
	os.MkdirAll("/run/softib", 0o755)
	logf, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	if ns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	cmd.Process.Release()
	return nil
}

// waitFor waits up to 5 s for a daemon's socket to appear.
func waitFor(path, program, logFile string) error {
	for i := 0; i < 250; i++ {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not start: see %s", program, logFile)
}

// isProgram reports whether pid runs program.
func isProgram(pid int, program string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(filepath.Base(strings.SplitN(string(b), "\x00", 2)[0]), program)
}

func (l *lab) up() error {
	if l.ib != nil {
		return l.ib.up(l)
	}
	l.down() // leftovers of an earlier run
	fail := func(err error) error {
		l.down()
		return err
	}
	var steps [][]string
	if !l.direct {
		if err := ip("netns", "add", l.name); err != nil {
			return fail(err)
		}
		steps = [][]string{{"-n", l.name, "link", "add", "br0", "type", "bridge"}, {"-n", l.name, "link", "set", "br0", "up"}}
	}
	verbsdArgs := []string{"-socket", l.socket()}
	if l.engineCPUs != "" {
		verbsdArgs = append(verbsdArgs, "-cpus", l.engineCPUs)
	}
	for i, n := range l.nodes {
		ns := l.ns(n)
		if err := ip("netns", "add", ns); err != nil {
			return fail(err)
		}
		mtu := strconv.Itoa(n.mtu)
		// The node's veth0: to the switch's bridge, or (direct) to the
		// other node's veth0, made with the first node.
		var veth [][]string
		switch {
		case !l.direct:
			veth = [][]string{
				{"-n", ns, "link", "add", "veth0", "mtu", mtu, "type", "veth", "peer", "name", "v-" + n.name, "mtu", mtu, "netns", l.name},
				{"-n", l.name, "link", "set", "v-" + n.name, "mtu", mtu, "master", "br0"},
				{"-n", l.name, "link", "set", "v-" + n.name, "up"},
			}
		case i == 0:
			veth = [][]string{{"-n", ns, "link", "add", "veth0", "mtu", mtu, "type", "veth", "peer", "name", "veth0", "mtu", mtu, "netns", l.ns(l.nodes[1])}}
		}
		if n.path == "attach" {
			// No TAP and no bridge: the kernel's address on the veth the
			// vHCA attaches to.
			steps = append(steps, []string{"-n", ns, "link", "set", "lo", "up"})
			steps = append(steps, veth...)
			steps = append(steps, []string{"-n", ns, "link", "set", "veth0", "up"})
			for _, h := range n.host {
				steps = append(steps, []string{"-n", ns, "addr", "add", h, "dev", "veth0", "nodad"})
			}
			dev := fmt.Sprintf("%s,attach=veth0,netns=/var/run/netns/%s", l.vhca(n), ns)
			if n.xdpMode != "" {
				dev += ",xdpmode=" + n.xdpMode
			}
			verbsdArgs = append(verbsdArgs, "-device", dev)
			continue
		}
		steps = append(steps,
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "link", "add", "br0", "mtu", mtu, "type", "bridge"},
		)
		steps = append(steps, veth...)
		steps = append(steps,
			[]string{"-n", ns, "link", "set", "veth0", "master", "br0"},
			[]string{"-n", ns, "link", "set", "veth0", "up"},
			[]string{"-n", ns, "link", "set", "br0", "up"},
		)
		for _, h := range n.host {
			steps = append(steps, []string{"-n", ns, "addr", "add", h, "dev", "br0", "nodad"})
		}
		dev := fmt.Sprintf("%s,tap,mtu=%d,netns=/var/run/netns/%s", l.vhca(n), n.mtu, ns)
		for _, a := range n.addrs {
			p, _ := netip.ParsePrefix(a)
			dev += ",addr=" + p.Addr().String()
		}
		if n.path == "xdp" {
			dev += ",xdp=veth0"
		}
		if n.xdpMode != "" {
			dev += ",xdpmode=" + n.xdpMode
		}
		verbsdArgs = append(verbsdArgs, "-device", dev)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return fail(err)
		}
	}
	if !l.direct {
		bridgeWithoutNetfilter(l.name)
	}
	for _, n := range l.nodes {
		if n.path != "attach" {
			bridgeWithoutNetfilter(l.ns(n))
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	if err := spawn(self, "verbsd", verbsdArgs, l.pidFile(), "/run/softib/"+l.name+".log"); err != nil {
		return fail(err)
	}
	if err := waitFor(l.socket(), "verbsd", "/run/softib/"+l.name+".log"); err != nil {
		return fail(err)
	}
	for _, n := range l.nodes {
		if n.path != "tap" {
			// Once verbsd's XDP program is on the veth: a veth has NAPI
			// only with one.
			if err := bindNAPI(l.napiCPUs, l.ns(n), "veth0", func() { threadedNAPI(l.ns(n), "veth0") }); err != nil {
				return fail(err)
			}
		}
		if n.path == "attach" {
			continue
		}
		if err := ip("-n", l.ns(n), "link", "set", l.vhca(n), "master", "br0"); err != nil {
			return fail(err)
		}
	}
	fmt.Printf("lab %s up: verbsd on %s (log /run/softib/%s.log)\n", l.name, l.socket(), l.name)
	if l.engineCPUs != "" {
		fmt.Printf("  verbsd's engine on CPUs %s\n", l.engineCPUs)
	}
	if len(l.napiCPUs) > 0 {
		fmt.Printf("  the fast-path veths' NAPI threads on CPUs %v\n", l.napiCPUs)
	}
	for _, n := range l.nodes {
		at := strings.Join(n.addrs, " ")
		if n.path == "attach" {
			at = "(attached to veth0)"
		}
		fmt.Printf("  node %-6s namespace %-12s vHCA %-10s %-5s at %s, kernel at %s\n", n.name, l.ns(n), l.vhca(n), n.path,
			at, strings.Join(n.host, " "))
	}
	fmt.Printf("use: softib -netns %s devinfo   (or ip netns exec %s softib -socket %s ...)\n", l.ns(l.nodes[0]), l.ns(l.nodes[0]), l.socket())
	return nil
}
