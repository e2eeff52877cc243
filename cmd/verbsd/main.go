// Command verbsd hosts vHCAs and serves them to verbs programs over
// shared memory. With no arguments it serves one vHCA, vhca0, on
// /run/softib/verbsd.sock.
//
//	verbsd [-socket PATH] [-device SPEC]... [-group NAME] [limits]
//
// A device SPEC is a name followed by comma-separated options:
// guid=0x..., addr=IP (repeatable: one RoCEv2 GID each), pipe=OTHER (an
// in-memory link to another device of this verbsd), tap (a TAP netdev
// named after the device, the vHCA behind it owning its addresses),
// mtu=N and netns=PATH for the TAP, rocev1 (RoCEv1 GIDs too, after the
// RoCEv2 ones), xdp=NETDEV (with tap: RoCEv2 through AF_XDP on the
// netdev the TAP is bridged to, the fast path), attach=NETDEV (share an
// existing netdev in netns=, its MAC and addresses, as `rdma link add
// rxe0 type rxe netdev NETDEV` does), xdpmode=auto|native|generic;
// for a native InfiniBand port on a cable to a vswitch or another vHCA:
// local=HOST:PORT and peer=HOST:PORT (the cable's UDP ends), lid=N,
// lmc=N, smlid=N, vls=N, buffer=BLOCKS, prefix=HEX (the GID's subnet
// prefix), sl2vl=VL:VL:... (by SL), e.g.
//
//	verbsd -device vhca0,addr=10.0.0.1,pipe=vhca1 -device vhca1,addr=10.0.0.2
//	verbsd -device rxe0,attach=eth0
//	verbsd -device mlx0,local=127.0.0.1:7001,peer=127.0.0.1:7002,lid=10
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/softib/softib/ebpf"
	"github.com/softib/softib/internal/cpulist"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/abi"
)

type deviceFlags []verbsd.DeviceConfig

func (d *deviceFlags) String() string { return fmt.Sprint(len(*d), " devices") }

func (d *deviceFlags) Set(spec string) error {
	parts := strings.Split(spec, ",")
	c := verbsd.DeviceConfig{Name: parts[0]}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "guid":
			g, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
			if err != nil {
				return fmt.Errorf("guid %q: %v", v, err)
			}
			c.NodeGUID = g
		case "addr":
			a, err := netip.ParseAddr(v)
			if err != nil {
				return err
			}
			c.Addrs = append(c.Addrs, a)
		case "pipe":
			c.Pipe = v
		case "tap":
			c.TAP = true
		case "mtu":
			m, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("mtu %q: %v", v, err)
			}
			c.MTU = m
		case "netns":
			c.Netns = v
		case "rocev1":
			c.RoCEv1 = true
		case "xdp":
			c.Uplink = v
		case "attach":
			c.Attach = v
		case "local", "peer", "lid", "lmc", "smlid", "vls", "buffer", "prefix", "sl2vl":
			if c.Cable == nil {
				c.Cable = &verbsd.CableConfig{}
			}
			if err := cableOption(c.Cable, k, v); err != nil {
				return err
			}
		case "xdpmode":
			m, err := ebpf.ParseMode(v)
			if err != nil {
				return err
			}
			c.XDPMode = m
		default:
			return fmt.Errorf("unknown device option %q (guid=, addr=, pipe=, tap, mtu=, netns=, rocev1, xdp=, attach=, xdpmode=, local=, peer=, lid=, lmc=, smlid=, vls=, buffer=, prefix=, sl2vl=)", k)
		}
	}
	*d = append(*d, c)
	return nil
}

func main() {
	var devs deviceFlags
	lim := verbsd.DefaultLimits()
	socket := flag.String("socket", abi.DefaultSocket, "control socket")
	group := flag.String("group", "", "group allowed to connect besides root (default: softib, if it exists)")
	flag.Var(&devs, "device", "a vHCA: NAME[,guid=0x..][,addr=IP]...[,pipe=OTHER] (repeatable; default vhca0)")
	flag.IntVar(&lim.QPs, "max-qps", lim.QPs, "QPs per client")
	flag.IntVar(&lim.CQs, "max-cqs", lim.CQs, "CQs per client")
	flag.IntVar(&lim.MRs, "max-mrs", lim.MRs, "MRs per client")
	flag.Uint64Var(&lim.MappedBytes, "max-mapped", lim.MappedBytes, "registered bytes per client")
	spin := flag.Duration("spin", 0, "how long the engine polls after its last work before sleeping (default 200µs)")
	engineCPUs := flag.String("cpus", "", "bind the engine's thread to these CPUs (taskset -c's list: 0 or 0,2 or 2-3): a poll-mode core")
	verbose := flag.Bool("v", false, "debug logging")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile (go tool pprof) to this file until shutdown")
	flag.Parse()
	if *verbose {
		slog.SetLogLoggerLevel(slog.LevelDebug)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "verbsd: -cpuprofile:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	cpus, err := cpulist.Parse(*engineCPUs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "verbsd: -cpus:", err)
		os.Exit(2)
	}
	srv, err := verbsd.New(verbsd.Config{Socket: *socket, Devices: devs, Group: *group, Limits: lim, Spin: *spin, EngineCPUs: cpus})
	if err == nil {
		err = srv.Listen()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "verbsd:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	down := make(chan struct{})
	go func() {
		s := <-sig
		slog.Info("shutting down", "signal", s.String())
		srv.Shutdown()
		close(down)
	}()
	slog.Info("verbsd serving", "socket", *socket, "devices", max(len(devs), 1))
	if err := srv.Serve(); err != nil {
		fmt.Fprintln(os.Stderr, "verbsd:", err)
		os.Exit(1)
	}
	// Serve returns as soon as Shutdown closes the listener: wait for
	// the rest (clients told DEVICE_FATAL, their resources released).
	<-down
}

// cableOption sets one option of a device's IB port.
func cableOption(c *verbsd.CableConfig, k, v string) error {
	num := func(bits int) (uint64, error) {
		n, err := strconv.ParseUint(v, 0, bits)
		if err != nil {
			return 0, fmt.Errorf("%s=%s: %v", k, v, err)
		}
		return n, nil
	}
	var n uint64
	var err error
	switch k {
	case "local":
		c.Local = v
	case "peer":
		c.Peer = v
	case "lid":
		n, err = num(16)
		c.LID = uint16(n)
	case "lmc":
		n, err = num(3)
		c.LMC = uint8(n)
	case "smlid":
		n, err = num(16)
		c.SMLID = uint16(n)
	case "vls":
		n, err = num(8)
		c.VLs = int(n)
	case "buffer":
		n, err = num(32)
		c.BufferBlocks = int(n)
	case "prefix":
		c.SubnetPrefix, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
	case "sl2vl":
		for _, x := range strings.Split(v, ":") {
			vl, e := strconv.ParseUint(x, 10, 4)
			if e != nil {
				return fmt.Errorf("sl2vl=%s: VLs by SL, colon-separated", v)
			}
			c.SL2VL = append(c.SL2VL, uint8(vl))
		}
	}
	return err
}
