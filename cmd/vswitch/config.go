package main

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/softib/softib/vhca/link/cable"
	"github.com/softib/softib/vswitch"
)

// config is a switch's configuration file, as softib lab writes it:
//
//	switch NAME lid=N ports=N [vls=N] [buffer=BLOCKS] [hoq=DURATION] [life=DURATION] [router]
//	port N local=HOST:PORT peer=HOST:PORT [netns=PATH] [rate=BITS/s, e.g. 100M]
//	lft LID[-LID] PORT
//	mft MLID PORT[,PORT...]
//	sl2vl IN|* OUT|* VL,VL,... (16 VLs, by SL)
//	vlarb OUT [high=VL:W,...] [low=VL:W,...] [limit=N]
//	route PREFIX PORT NEXTHOPLID     (router: DGID subnet prefix, hex)
//	hostroute GID PORT LID           (router: one destination port's GID)
//	routerlid PORT LID
//
// Blank lines and # comments are ignored.
type config struct {
	name     string
	sw       vswitch.Config
	ports    map[int]cable.Config
	rates    map[int]float64 // a port's link rate in bytes/s; absent: as fast as the host goes
	commands [][]string      // table lines, applied to the switch in order
}

func readConfig(path string) (*config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c := &config{ports: map[int]cable.Config{}, rates: map[int]float64{}, sw: vswitch.Config{VLs: 1, BufferBlocks: 256}}
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
		case "switch":
			if len(fields) < 2 {
				return nil, bad("switch NAME lid=N ports=N ...")
			}
			c.name = fields[1]
			for _, kv := range fields[2:] {
				k, v, _ := strings.Cut(kv, "=")
				var err error
				switch k {
				case "lid":
					var n uint64
					n, err = strconv.ParseUint(v, 0, 16)
					c.sw.LID = uint16(n)
				case "ports":
					c.sw.Ports, err = strconv.Atoi(v)
				case "vls":
					c.sw.VLs, err = strconv.Atoi(v)
				case "buffer":
					c.sw.BufferBlocks, err = strconv.Atoi(v)
				case "hoq":
					c.sw.HOQLife, err = time.ParseDuration(v)
				case "life":
					c.sw.SwitchLife, err = time.ParseDuration(v)
				case "router":
					c.sw.Router = true
				default:
					return nil, bad("unknown switch option %q", k)
				}
				if err != nil {
					return nil, bad("%s: %v", kv, err)
				}
			}
		case "port":
			if len(fields) < 2 {
				return nil, bad("port N local=ADDR peer=ADDR")
			}
			n, err := strconv.Atoi(fields[1])
			if err != nil {
				return nil, bad("port %q", fields[1])
			}
			pc := cable.Config{Name: fmt.Sprintf("%s/%d", c.name, n)}
			for _, kv := range fields[2:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "local":
					pc.Local = v
				case "peer":
					pc.Peer = v
				case "netns":
					pc.Netns = v
				case "rate":
					r, err := parseRate(v)
					if err != nil {
						return nil, bad("rate=%s: %v", v, err)
					}
					c.rates[n] = r / 8
				default:
					return nil, bad("unknown port option %q", k)
				}
			}
			if pc.Local == "" || pc.Peer == "" {
				return nil, bad("port %d needs local= and peer=", n)
			}
			c.ports[n] = pc
		case "lft", "mft", "sl2vl", "vlarb", "route", "hostroute", "routerlid":
			c.commands = append(c.commands, append([]string{strconv.Itoa(line)}, fields...))
		default:
			return nil, bad("unknown line %q", fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if c.name == "" {
		return nil, fmt.Errorf("%s: no switch line", path)
	}
	for n := range c.ports {
		if n < 1 || n > c.sw.Ports {
			return nil, fmt.Errorf("%s: port %d of a %d-port switch", path, n, c.sw.Ports)
		}
	}
	return c, nil
}

// apply sets the switch's tables from the configuration's table lines.
func (c *config) apply(path string, s *vswitch.Switch) error {
	for _, cmd := range c.commands {
		line, f := cmd[0], cmd[1:]
		bad := func(err error) error { return fmt.Errorf("%s:%s: %s: %v", path, line, strings.Join(f, " "), err) }
		var err error
		switch f[0] {
		case "lft":
			if len(f) != 3 {
				return bad(fmt.Errorf("lft LID[-LID] PORT"))
			}
			lo, hi, e := lidRange(f[1])
			port, e2 := strconv.Atoi(f[2])
			if e != nil || e2 != nil {
				return bad(fmt.Errorf("lft LID[-LID] PORT"))
			}
			for lid := lo; lid <= hi && err == nil; lid++ {
				err = s.SetLFT(uint16(lid), port)
			}
		case "mft":
			if len(f) != 3 {
				return bad(fmt.Errorf("mft MLID PORT,..."))
			}
			mlid, e := strconv.ParseUint(f[1], 0, 16)
			ports, e2 := intList(f[2])
			if e != nil || e2 != nil {
				return bad(fmt.Errorf("mft MLID PORT,..."))
			}
			err = s.SetMFT(uint16(mlid), ports)
		case "sl2vl":
			if len(f) != 4 {
				return bad(fmt.Errorf("sl2vl IN|* OUT|* VL,... (16)"))
			}
			vls, e := intList(f[3])
			if e != nil || len(vls) != 16 {
				return bad(fmt.Errorf("16 VLs, one per SL"))
			}
			var t [16]uint8
			for i, v := range vls {
				t[i] = uint8(v)
			}
			ins, e1 := portList(f[1], s.Config().Ports)
			outs, e2 := portList(f[2], s.Config().Ports)
			if e1 != nil || e2 != nil {
				return bad(fmt.Errorf("ports: a number or *"))
			}
			for _, in := range ins {
				for _, out := range outs {
					if in != out && err == nil {
						err = s.SetSL2VL(in, out, t)
					}
				}
			}
		case "vlarb":
			if len(f) < 2 {
				return bad(fmt.Errorf("vlarb OUT [high=VL:W,...] [low=VL:W,...] [limit=N]"))
			}
			outs, e := portList(f[1], s.Config().Ports)
			if e != nil {
				return bad(e)
			}
			var high, low []vswitch.VLArbEntry
			limit := 0
			for _, kv := range f[2:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "high", "low":
					var es []vswitch.VLArbEntry
					for _, p := range strings.Split(v, ",") {
						a, b, _ := strings.Cut(p, ":")
						vl, e1 := strconv.Atoi(a)
						w, e2 := strconv.Atoi(b)
						if e1 != nil || e2 != nil {
							return bad(fmt.Errorf("%s: VL:WEIGHT", p))
						}
						es = append(es, vswitch.VLArbEntry{VL: uint8(vl), Weight: uint8(w)})
					}
					if k == "high" {
						high = es
					} else {
						low = es
					}
				case "limit":
					if limit, e = strconv.Atoi(v); e != nil {
						return bad(e)
					}
				default:
					return bad(fmt.Errorf("unknown vlarb option %q", k))
				}
			}
			for _, out := range outs {
				if err == nil {
					err = s.SetVLArb(out, high, low, uint8(limit))
				}
			}
		case "route":
			if len(f) != 4 {
				return bad(fmt.Errorf("route PREFIX PORT NEXTHOPLID"))
			}
			prefix, e1 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
			port, e2 := strconv.Atoi(f[2])
			lid, e3 := strconv.ParseUint(f[3], 0, 16)
			if e1 != nil || e2 != nil || e3 != nil {
				return bad(fmt.Errorf("route PREFIX(hex) PORT NEXTHOPLID"))
			}
			err = s.SetRoute(prefix, port, uint16(lid))
		case "hostroute":
			if len(f) != 4 {
				return bad(fmt.Errorf("hostroute GID PORT LID"))
			}
			g, e1 := netip.ParseAddr(f[1])
			port, e2 := strconv.Atoi(f[2])
			lid, e3 := strconv.ParseUint(f[3], 0, 16)
			if e1 != nil || !g.Is6() || e2 != nil || e3 != nil {
				return bad(fmt.Errorf("hostroute GID(IPv6 form) PORT LID"))
			}
			err = s.SetHostRoute(g.As16(), port, uint16(lid))
		case "routerlid":
			if len(f) != 3 {
				return bad(fmt.Errorf("routerlid PORT LID"))
			}
			port, e1 := strconv.Atoi(f[1])
			lid, e2 := strconv.ParseUint(f[2], 0, 16)
			if e1 != nil || e2 != nil {
				return bad(fmt.Errorf("routerlid PORT LID"))
			}
			err = s.SetRouterLID(port, uint16(lid))
		}
		if err != nil {
			return bad(err)
		}
	}
	return nil
}

func lidRange(s string) (int, int, error) {
	a, b, found := strings.Cut(s, "-")
	lo, err := strconv.ParseUint(a, 0, 16)
	if err != nil {
		return 0, 0, err
	}
	hi := lo
	if found {
		if hi, err = strconv.ParseUint(b, 0, 16); err != nil {
			return 0, 0, err
		}
	}
	return int(lo), int(hi), nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// portList is one port, or * for every port (0 included: the
// management port's tables too).
func portList(s string, ports int) ([]int, error) {
	if s == "*" {
		out := make([]int, ports+1)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, fmt.Errorf("port %q", s)
	}
	return []int{n}, nil
}

// parseRate reads a link rate in bits/s with an optional K, M or G.
func parseRate(s string) (float64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1e3, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1e9, strings.TrimSuffix(s, "G")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("a rate in bits/s (K, M, G)")
	}
	return v * mult, nil
}
