package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd/abi"
)

// stat prints the port counters of the vHCAs, one line per port, as
// `rdma statistic show link` prints a Soft-RoCE port's hw_counters:
//
//	link vhca0/1 sent_pkts 20412 rcvd_pkts 20410 ...
//
// The counters rxe also has keep rxe's names (sent_pkts, rcvd_pkts,
// send_rnr_err, rcvd_rnr_err); the others say what they count in the
// same style. -j prints a JSON array of objects, as rdma -j does.
func stat(opts *client.Options, args []string) error {
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	asJSON := fs.Bool("j", false, "JSON: an array of one object per port")
	fs.BoolVar(asJSON, "json", false, "JSON: an array of one object per port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("stat [-j] [DEV[/PORT]]")
	}
	dev, port := "", 0
	if fs.NArg() == 1 {
		d, p, hasPort := strings.Cut(fs.Arg(0), "/")
		dev = d
		if hasPort {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 {
				return fmt.Errorf("stat: port %q: want a number from 1", p)
			}
			port = n
		}
	}
	list, err := client.Devices(opts)
	if err != nil {
		return err
	}
	var rows []portCounters
	found := false
	for _, d := range list {
		if dev != "" && d.Name != dev {
			continue
		}
		found = true
		ctx, err := client.Open(d.Name, opts)
		if err != nil {
			return err
		}
		for p := 1; p <= ctx.Ports; p++ {
			if port != 0 && p != port {
				continue
			}
			c, err := ctx.QueryCounters(p)
			if err != nil {
				ctx.Close()
				return err
			}
			rows = append(rows, portCounters{dev: d.Name, port: p, c: c})
		}
		ports := ctx.Ports
		ctx.Close()
		if port > ports {
			return fmt.Errorf("stat: %s has no port %d", d.Name, port)
		}
	}
	if !found {
		if dev != "" {
			return fmt.Errorf("stat: no device %q", dev)
		}
		return fmt.Errorf("stat: verbsd hosts no device")
	}
	if *asJSON {
		return writeCountersJSON(os.Stdout, rows)
	}
	for _, r := range rows {
		fmt.Fprintf(os.Stdout, "link %s/%d", r.dev, r.port)
		for _, f := range counterFields {
			fmt.Fprintf(os.Stdout, " %s %d", f.name, f.get(&r.c))
		}
		fmt.Fprintln(os.Stdout)
	}
	return nil
}

type portCounters struct {
	dev  string
	port int
	c    abi.Counters
}

// counterFields are the columns of stat, in its order: traffic, then
// the transport's recoveries, then the drops of received packets by
// cause.
var counterFields = []struct {
	name string
	get  func(*abi.Counters) uint64
}{
	{"sent_pkts", func(c *abi.Counters) uint64 { return c.XmitPackets }},
	{"sent_bytes", func(c *abi.Counters) uint64 { return c.XmitBytes }},
	{"rcvd_pkts", func(c *abi.Counters) uint64 { return c.RcvPackets }},
	{"rcvd_bytes", func(c *abi.Counters) uint64 { return c.RcvBytes }},
	{"retransmits", func(c *abi.Counters) uint64 { return c.Retransmits }},
	{"retry_timeouts", func(c *abi.Counters) uint64 { return c.Timeouts }},
	{"send_rnr_err", func(c *abi.Counters) uint64 { return c.RNRNAKsSent }},
	{"rcvd_rnr_err", func(c *abi.Counters) uint64 { return c.RNRNAKsRcvd }},
	{"send_nak", func(c *abi.Counters) uint64 { return c.NAKsSent }},
	{"rcvd_nak", func(c *abi.Counters) uint64 { return c.NAKsRcvd }},
	{"drop_malformed", func(c *abi.Counters) uint64 { return c.Malformed }},
	{"drop_psn", func(c *abi.Counters) uint64 { return c.PSNDrops }},
	{"drop_pkey", func(c *abi.Counters) uint64 { return c.PKeyDrops }},
	{"drop_qkey", func(c *abi.Counters) uint64 { return c.QKeyDrops }},
	{"drop_no_qp", func(c *abi.Counters) uint64 { return c.NoQP }},
	{"drop_addr", func(c *abi.Counters) uint64 { return c.AddrDrops }},
	{"drop_opcode", func(c *abi.Counters) uint64 { return c.BadOpcode }},
}

// writeCountersJSON writes rows as rdma -j does: ifname, port, then the
// counters by name.
func writeCountersJSON(w io.Writer, rows []portCounters) error {
	out := make([]map[string]any, 0, len(rows))
	for _, r := range rows {
		m := map[string]any{"ifname": r.dev, "port": r.port}
		for _, f := range counterFields {
			m[f.name] = f.get(&r.c)
		}
		out = append(out, m)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}
