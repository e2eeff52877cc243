package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/cmd/softib/perftest"
)

// perfCmd is the perftest family on softib: the same flags where they
// apply, perftest's TCP setup exchange (so either side may be a real
// ib_write_bw ...), and its output; --json prints one object per size.
func perfCmd(opts *client.Options, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("perf: which test? write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat")
	}
	tests := map[string]perftest.Test{
		"write_bw": perftest.WriteBW, "read_bw": perftest.ReadBW, "send_bw": perftest.SendBW,
		"atomic_bw": perftest.AtomicBW, "write_lat": perftest.WriteLat, "read_lat": perftest.ReadLat,
		"send_lat": perftest.SendLat, "atomic_lat": perftest.AtomicLat,
	}
	if args[0] == "udp_bw" || args[0] == "udp_lat" {
		return udpCmd(args[0], args[1:])
	}
	name := strings.TrimPrefix(args[0], "ib_")
	t, ok := tests[name]
	if !ok {
		return fmt.Errorf("perf: unknown test %q", args[0])
	}
	p, err := parsePerfFlags(name, t, args[1:])
	if err != nil {
		return err
	}
	if p.loopback {
		return perfLoopback(opts, p)
	}
	conn, err := p.dial()
	if err != nil {
		return err
	}
	return runPerf(opts, p, conn, os.Stdout)
}

// perfParams are the flags of a perf run.
type perfParams struct {
	name     string
	test     perftest.Test
	dev      string
	ibPort   int
	size     uint64
	all      bool
	iters    uint64
	duration int
	qps      int
	txDepth  int
	rxDepth  int
	gidIndex int
	conn     perftest.ConnType
	gbits    bool
	port     int
	loopback bool
	json     bool
	events   bool // sleep on completion events (perftest -e) instead of polling
	host     string
	mtu      int
	cqMod    int
	path     string // tap or xdp: the port's path for RoCEv2, if it has two
}

func parsePerfFlags(name string, t perftest.Test, args []string) (*perfParams, error) {
	p := &perfParams{name: name, test: t}
	fs := flag.NewFlagSet("perf "+name, flag.ContinueOnError)
	both := func(short, long string, def int, usage string, v *int) {
		fs.IntVar(v, short, def, usage)
		fs.IntVar(v, long, def, usage)
	}
	var size, iters int
	var connStr string
	defSize, defIters, defTx := 65536, 5000, 128
	if t.Type == perftest.TypeLat {
		defSize, defIters, defTx = 2, 1000, 1
	}
	if t.Verb == perftest.VerbAtomic {
		defSize = 8
	}
	fs.StringVar(&p.dev, "d", "", "device")
	fs.StringVar(&p.dev, "ib-dev", "", "device")
	both("i", "ib-port", 1, "port", &p.ibPort)
	both("s", "size", defSize, "message size", &size)
	fs.BoolVar(&p.all, "a", false, "all sizes 2..2^23")
	fs.BoolVar(&p.all, "all", false, "all sizes")
	both("n", "iters", defIters, "iterations", &iters)
	both("D", "duration", 0, "run for this many seconds (bw tests)", &p.duration)
	both("q", "qp", 1, "QPs", &p.qps)
	both("t", "tx-depth", defTx, "send queue depth", &p.txDepth)
	both("r", "rx-depth", 512, "receive queue depth (send tests)", &p.rxDepth)
	both("x", "gid-index", -1, "GID index (default: the first IPv4 GID, else 0)", &p.gidIndex)
	both("p", "port", perftest.DefaultPort, "TCP port of the setup exchange", &p.port)
	both("m", "mtu", 0, "path MTU in bytes (default: the port's)", &p.mtu)
	both("Q", "cq-mod", 100, "completion every this many WRs (bw tests)", &p.cqMod)
	fs.Bool("F", false, "ignored (perftest: do not fail on CPU frequency)")
	fs.StringVar(&connStr, "c", "RC", "connection type RC|UC|UD")
	fs.StringVar(&connStr, "connection", "RC", "connection type")
	fs.BoolVar(&p.gbits, "report_gbits", false, "report Gb/s")
	fs.BoolVar(&p.loopback, "loopback", false, "run server and client in this one invocation")
	fs.BoolVar(&p.json, "json", false, "one JSON object per line and size")
	fs.BoolVar(&p.events, "e", false, "sleep on CQ events (default poll)")
	fs.BoolVar(&p.events, "events", false, "sleep on CQ events")
	fs.StringVar(&p.path, "path", "", "tap or xdp: the path RoCEv2 takes through a port that has both (sets it for the device)")
	var rest []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(rest) > 1 {
		return nil, fmt.Errorf("perf: one host at most, got %q", rest)
	}
	if len(rest) == 1 {
		p.host = rest[0]
	}
	p.size, p.iters = uint64(max(size, 1)), uint64(max(iters, 5))
	switch strings.ToUpper(connStr) {
	case "RC":
		p.conn = perftest.ConnRC
	case "UC":
		p.conn = perftest.ConnUC
	case "UD":
		p.conn = perftest.ConnUD
	default:
		return nil, fmt.Errorf("perf: connection type %q (RC, UC or UD)", connStr)
	}
	switch {
	case p.conn == perftest.ConnUD && t.Verb != perftest.VerbSend:
		return nil, fmt.Errorf("perf: %s needs RC or UC (UD carries SEND only)", name)
	case p.conn == perftest.ConnUC && (t.Verb == perftest.VerbRead || t.Verb == perftest.VerbAtomic):
		return nil, fmt.Errorf("perf: %s needs RC", name)
	case p.duration > 0 && t.Type != perftest.TypeBW:
		return nil, fmt.Errorf("perf: -D applies to the bandwidth tests")
	}
	if t.Verb == perftest.VerbAtomic {
		p.size = 8
	}
	p.qps = max(p.qps, 1)
	p.txDepth = max(p.txDepth, 1)
	p.cqMod = max(min(p.cqMod, p.txDepth), 1)
	return p, nil
}

func (p *perfParams) dial() (*perftest.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if p.host != "" {
		return perftest.Dial(ctx, p.host, p.port)
	}
	ln, err := perftest.Listen(fmt.Sprintf(":%d", p.port))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	fmt.Println("\n************************************\n* Waiting for client to connect... *\n************************************")
	return ln.Accept(context.Background())
}

// perfLoopback runs the server in a goroutine and the client here, both
// through verbsd, joined by a TCP connection on the loopback interface.
//
// Both sides poll their CQs. Where cores are few (client.Relax yields),
// they share one thread and take turns by goroutine switches: three
// busy threads (two sides and verbsd's engine) on two cores would take
// turns by sched_yield at a microsecond each, or by time slices.
func perfLoopback(opts *client.Options, p *perfParams) error {
	if !client.ManyCores() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		oneThread = true
		defer func() { oneThread = false }()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srvDone := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			srvDone <- err
			return
		}
		srvDone <- runPerf(opts, p, perftest.NewConn(c, false), io.Discard)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	cli := *p
	cli.host = "127.0.0.1"
	err = runPerf(opts, &cli, perftest.NewConn(c, true), os.Stdout)
	if serr := <-srvDone; err == nil && serr != nil {
		err = fmt.Errorf("server side: %w", serr)
	}
	return err
}
