// Command vswitch is a userspace InfiniBand switch: its ports are cables
// (vhca/link/cable) to vHCAs and other switches, its forwarding is
// package vswitch's, configured from a file (softib lab writes them).
//
//	vswitch -config FILE [-status SOCKET] [-capture PORT=FILE]...
//
// -status serves the switch's port counters and link states as JSON to
// whoever connects to the unix socket (softib lab counters reads it).
// -capture writes what a port receives and sends to a pcap file for
// Wireshark (InfiniBand, in ERF records).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/softib/softib/vhca/link/cable"
	"github.com/softib/softib/vswitch"
)

func main() {
	cfgPath := flag.String("config", "", "configuration file")
	status := flag.String("status", "", "unix socket serving the counters as JSON")
	var caps captureFlags
	flag.Var(&caps, "capture", "PORT=FILE: write the port's packets to a pcap file (repeatable)")
	flag.Parse()
	if err := run(*cfgPath, *status, caps); err != nil {
		fmt.Fprintln(os.Stderr, "vswitch:", err)
		os.Exit(1)
	}
}

// captureFlags are the -capture flags: port number to file.
type captureFlags map[int]string

func (c *captureFlags) String() string { return fmt.Sprint(map[int]string(*c)) }

func (c *captureFlags) Set(v string) error {
	p, file, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(p)
	if !ok || err != nil || file == "" {
		return fmt.Errorf("-capture PORT=FILE")
	}
	if *c == nil {
		*c = captureFlags{}
	}
	(*c)[n] = file
	return nil
}

func run(cfgPath, status string, capFiles captureFlags) error {
	if cfgPath == "" {
		return fmt.Errorf("-config FILE is needed")
	}
	c, err := readConfig(cfgPath)
	if err != nil {
		return err
	}
	sw, err := vswitch.New(c.sw)
	if err != nil {
		return err
	}
	if err := c.apply(cfgPath, sw); err != nil {
		return err
	}
	ports := make([]*cable.Cable, c.sw.Ports+1)
	defer func() {
		for _, p := range ports {
			if p != nil {
				p.Close()
			}
		}
	}()
	for n, pc := range c.ports {
		pc.VLs, pc.BufferBlocks = c.sw.VLs, c.sw.BufferBlocks
		if ports[n], err = cable.Open(pc); err != nil {
			return err
		}
	}
	caps := make([]*capture, c.sw.Ports+1)
	defer func() {
		for _, cp := range caps {
			if cp != nil {
				cp.close()
			}
		}
	}()
	for n, file := range capFiles {
		if n < 1 || n > c.sw.Ports || ports[n] == nil {
			return fmt.Errorf("-capture %d: not a cabled port", n)
		}
		if caps[n], err = openCapture(file); err != nil {
			return err
		}
	}
	l := newLoop(c.name, sw, ports, caps, c.rates)
	if status != "" {
		stop, err := l.serveStatus(status)
		if err != nil {
			return err
		}
		defer stop()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		l.stop()
	}()
	slog.Info("vswitch running", "switch", c.name, "lid", c.sw.LID, "ports", len(c.ports), "vls", c.sw.VLs, "router", c.sw.Router)
	l.run()
	return nil
}
