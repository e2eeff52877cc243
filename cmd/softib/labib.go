package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/softib/softib/vswitch/sm"
)

// An InfiniBand lab: vswitch processes and one verbsd whose vHCAs have
// native IB ports, joined by cables (UDP on loopback, one port number per
// cable end; or, with `lab NAME netns`, each node in a network namespace
// of its own, LAB-NODE — a switch's vswitch runs there, a vHCA's cable
// socket is made there by the one verbsd — and each cable a veth pair
// between two of them, which tc and netem can disturb). The topology
// file's lines:
//
//	lab NAME [netns]
//	switch NAME [ports=N] [vls=N] [buffer=BLOCKS] [hoq=DURATION] [life=DURATION] [lid=N]
//	router NAME [ports=N] [vls=N] [buffer=BLOCKS]
//	hca NAME [lid=N] [lmc=N] [vls=N] [sl2vl=VL:VL:...] [prefix=HEX]
//	cable END END        END: NAME, or NAME:PORT for a switch's port
//	sl2vl SWITCH IN|* OUT|* VL,VL,...   a switch's SL-to-VL table
//	vlarb SWITCH OUT|* [high=VL:W,...] [low=VL:W,...] [limit=N]
//	capture SWITCH:PORT FILE            a pcap of what the port carries
//	lft SWITCH LID[-LID] PORT           a static route, over the computed one
//	mcast MLID HCA,HCA,...              a multicast group's members
//
// LIDs not given are assigned in the file's order from 1; switch ports
// not given are taken in order. The switches' LFTs are computed by
// minimum hops (vswitch/sm). A multicast group's MLID (0xC000..0xFFFE)
// is routed along one tree, so that a datagram to it reaches each member
// once from wherever it enters and never loops (a union of the LFTs'
// paths to the members would loop wherever the fabric has two paths, as
// a fat tree has): the breadth-first, min-hop spanning tree of the
// members' subnet rooted at the first member's switch, pruned to the
// paths to the members. Each switch's MFT entry for the MLID is its ports
// on that tree. The members' programs attach their UD QPs to the group
// (any MGID, this MLID) and send to it with an AH to the MLID and remote
// QPN 0xFFFFFF; there is no SA to join through. Switch S runs as vswitch
// with its
// configuration in /run/softib/LAB-S.conf, its counters on
// /run/softib/LAB-S.status; verbsd serves the vHCAs (vhca-NAME) on
// /run/softib/LAB.sock.
type ibLab struct {
	nodes  []ibNode
	byName map[string]int
	cables []ibCable
	tables [][]string          // sl2vl and vlarb lines, by switch
	caps   map[string][]string // -capture flags by switch name
	// Computed by route: the switches' LFTs (by node), and each router
	// port's LID on its subnet.
	lfts      map[int]sm.LFT
	routerLID map[sm.PortRef]uint16
	mcasts    []ibMcast
	mfts      map[int][]mftEntry // computed by routeMcast: by switch node
}

// ibMcast is a multicast group of the topology: its MLID and members
// (HCA nodes).
type ibMcast struct {
	mlid    uint16
	members []int
}

// mftEntry is a switch's MFT entry: an MLID and its ports.
type mftEntry struct {
	mlid  uint16
	ports []int
}

// portList is the entry's ports as a vswitch configuration gives them.
func (e mftEntry) portList() string {
	s := make([]string, len(e.ports))
	for i, p := range e.ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

type ibNode struct {
	name        string
	sw          bool
	router      bool
	prefix      uint64 // an HCA's subnet prefix (its GID's upper half)
	ports       int
	vls, buffer int
	hoq, life   string
	lid         uint16
	lmc         uint8
	sl2vl       string
	next        int // the next switch port to cable
}

type ibCable struct {
	a, b sm.PortRef
}

func (b *ibLab) parse(f []string) error {
	if b.byName == nil {
		b.byName = map[string]int{}
	}
	switch f[0] {
	case "switch", "hca", "router":
		if len(f) < 2 || !validName(f[1], 8) {
			return fmt.Errorf("%s NAME (letters and digits, up to 8)", f[0])
		}
		if _, dup := b.byName[f[1]]; dup {
			return fmt.Errorf("%s named twice", f[1])
		}
		n := ibNode{name: f[1], sw: f[0] != "hca", router: f[0] == "router", ports: 1, vls: 1, buffer: 256, next: 1,
			prefix: defaultPrefix}
		if n.sw {
			n.ports = 8
		}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			num := func(max uint64) (uint64, error) {
				x, err := strconv.ParseUint(v, 0, 64)
				if err != nil || x > max {
					return 0, fmt.Errorf("%s=%s", k, v)
				}
				return x, nil
			}
			var x uint64
			var err error
			switch {
			case k == "lid":
				x, err = num(0xBFFF)
				n.lid = uint16(x)
			case k == "vls":
				x, err = num(15)
				n.vls = int(x)
			case k == "buffer":
				x, err = num(1 << 20)
				n.buffer = int(x)
			case k == "ports" && n.sw:
				x, err = num(254)
				n.ports = int(x)
			case k == "hoq" && n.sw:
				n.hoq = v
			case k == "life" && n.sw:
				n.life = v
			case k == "lmc" && !n.sw:
				x, err = num(7)
				n.lmc = uint8(x)
			case k == "sl2vl" && !n.sw:
				n.sl2vl = v
			case k == "prefix" && !n.sw:
				n.prefix, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
			default:
				return fmt.Errorf("unknown %s option %q", f[0], k)
			}
			if err != nil {
				return err
			}
		}
		b.byName[n.name] = len(b.nodes)
		b.nodes = append(b.nodes, n)
	case "cable":
		if len(f) != 3 {
			return fmt.Errorf("cable END END")
		}
		var ends [2]sm.PortRef
		for i, e := range f[1:] {
			name, port, hasPort := strings.Cut(e, ":")
			idx, ok := b.byName[name]
			if !ok {
				return fmt.Errorf("cable to %q: no such switch or hca (declare it first)", name)
			}
			n := &b.nodes[idx]
			p := n.next
			if hasPort {
				x, err := strconv.Atoi(port)
				if err != nil {
					return fmt.Errorf("cable end %q", e)
				}
				p = x
			}
			n.next = max(n.next, p+1)
			ends[i] = sm.PortRef{Node: idx, Port: p}
		}
		b.cables = append(b.cables, ibCable{ends[0], ends[1]})
	case "capture":
		name, port, ok := strings.Cut(f[min(1, len(f)-1)], ":")
		i, isNode := b.byName[name]
		if len(f) != 3 || !ok || !isNode || !b.nodes[i].sw {
			return fmt.Errorf("capture SWITCH:PORT FILE")
		}
		if b.caps == nil {
			b.caps = map[string][]string{}
		}
		b.caps[name] = append(b.caps[name], "-capture", port+"="+f[2])
	case "mcast":
		if len(f) != 3 {
			return fmt.Errorf("mcast MLID HCA,HCA,...")
		}
		mlid, err := strconv.ParseUint(f[1], 0, 16)
		if err != nil || mlid < 0xC000 || mlid > 0xFFFE {
			return fmt.Errorf("mcast %s: a multicast LID (0xC000..0xFFFE)", f[1])
		}
		g := ibMcast{mlid: uint16(mlid)}
		for _, m := range b.mcasts {
			if m.mlid == g.mlid {
				return fmt.Errorf("mcast %#x given twice", mlid)
			}
		}
		for _, name := range strings.Split(f[2], ",") {
			i, ok := b.byName[name]
			if !ok || b.nodes[i].sw {
				return fmt.Errorf("mcast %#x: no hca %q (declare it first)", mlid, name)
			}
			if !slices.Contains(g.members, i) {
				g.members = append(g.members, i)
			}
		}
		b.mcasts = append(b.mcasts, g)
	case "sl2vl", "vlarb", "lft":
		if len(f) < 3 {
			return fmt.Errorf("%s SWITCH ...", f[0])
		}
		if i, ok := b.byName[f[1]]; !ok || !b.nodes[i].sw {
			return fmt.Errorf("%s: no switch %q", f[0], f[1])
		}
		b.tables = append(b.tables, f)
	}
	return nil
}

// resolve assigns the LIDs not given, and routes each subnet.
func (b *ibLab) resolve() error {
	used := map[uint16]bool{}
	for _, n := range b.nodes {
		for l := 0; n.lid != 0 && l < 1<<n.lmc; l++ {
			used[n.lid+uint16(l)] = true
		}
	}
	next := uint16(1)
	for i := range b.nodes {
		n := &b.nodes[i]
		if n.lid != 0 {
			continue
		}
		for ; ; next++ {
			free := true
			for l := uint16(0); l < 1<<n.lmc; l++ {
				free = free && !used[next+l]
			}
			if free {
				break
			}
		}
		n.lid = next
		for l := uint16(0); l < 1<<n.lmc; l++ {
			used[next+l] = true
		}
		next += 1 << n.lmc
	}
	if err := b.route(); err != nil {
		return err
	}
	return b.routeMcast()
}

// routeMcast computes the switches' MFTs: for each group, the min-hop
// tree described in the header comment.
func (b *ibLab) routeMcast() error {
	b.mfts = map[int][]mftEntry{}
	peer := map[sm.PortRef]sm.PortRef{}
	for _, c := range b.cables {
		peer[c.a], peer[c.b] = c.b, c.a
	}
	isSwitch := func(n int) bool { return b.nodes[n].sw && !b.nodes[n].router }
	for _, g := range b.mcasts {
		// The switch port each member is cabled to.
		at := make([]sm.PortRef, len(g.members))
		for k, h := range g.members {
			p, ok := peer[sm.PortRef{Node: h, Port: 1}]
			if !ok || !isSwitch(p.Node) {
				return fmt.Errorf("mcast %#x: hca %s is not cabled to a switch", g.mlid, b.nodes[h].name)
			}
			at[k] = p
		}
		// Breadth first from the first member's switch, ports in
		// order: up[x] is x's port towards the root and the port of
		// the switch it was reached from.
		root := at[0].Node
		up := map[int][2]sm.PortRef{root: {}}
		for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
			x := queue[0]
			for p := 1; p <= b.nodes[x].ports; p++ {
				q, ok := peer[sm.PortRef{Node: x, Port: p}]
				if _, seen := up[q.Node]; ok && isSwitch(q.Node) && !seen {
					up[q.Node] = [2]sm.PortRef{q, {Node: x, Port: p}}
					queue = append(queue, q.Node)
				}
			}
		}
		ports := map[int]map[int]bool{}
		add := func(p sm.PortRef) bool {
			if ports[p.Node] == nil {
				ports[p.Node] = map[int]bool{}
			}
			had := ports[p.Node][p.Port]
			ports[p.Node][p.Port] = true
			return !had
		}
		for k, p := range at {
			if _, ok := up[p.Node]; !ok {
				return fmt.Errorf("mcast %#x: hca %s is not in the subnet of hca %s", g.mlid,
					b.nodes[g.members[k]].name, b.nodes[g.members[0]].name)
			}
			add(p)
			// Up the tree to the root, or to a branch already on it.
			for x := p.Node; x != root; x = up[x][1].Node {
				if !add(up[x][0]) {
					break
				}
				add(up[x][1])
			}
		}
		for sw, set := range ports {
			e := mftEntry{mlid: g.mlid}
			for p := range set {
				e.ports = append(e.ports, p)
			}
			slices.Sort(e.ports)
			b.mfts[sw] = append(b.mfts[sw], e)
		}
	}
	return nil
}

// addr is the UDP address of cable c's end e (0: a, 1: b): loopback, a
// port number from the lab's name so that two labs do not collide.
func (b *ibLab) addr(l *lab, c, e int) string {
	if l.netns {
		// A veth pair per cable between the two nodes' namespaces.
		return net.JoinHostPort(fmt.Sprintf("10.250.%d.%d", c, 1+e), "7000")
	}
	h := fnv.New32a()
	h.Write([]byte(l.name))
	base := 20000 + int(h.Sum32()%2000)*16
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(base+2*c+e))
}

// nodeNS is the namespace of node n in a lab with netns.
func (l *lab) nodeNS(n ibNode) string { return l.name + "-" + n.name }

// netnsOpt is the option that puts a node's sockets in its namespace.
func (l *lab) netnsOpt(n ibNode) string {
	if !l.netns {
		return ""
	}
	return "netns=/var/run/netns/" + l.nodeNS(n)
}

// namespaces makes a namespace per node and a veth pair per cable
// between the namespaces of its two ends, with the cable's addresses.
func (b *ibLab) namespaces(l *lab) error {
	if len(b.cables) > 255 {
		return fmt.Errorf("lab %s: %d cables; a lab with netns has at most 255", l.name, len(b.cables))
	}
	for _, n := range b.nodes {
		if err := ip("netns", "add", l.nodeNS(n)); err != nil {
			return err
		}
		if err := ip("-n", l.nodeNS(n), "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	for c, k := range b.cables {
		na, nb := l.nodeNS(b.nodes[k.a.Node]), l.nodeNS(b.nodes[k.b.Node])
		name := fmt.Sprintf("c%d", c)
		steps := [][]string{
			{"-n", na, "link", "add", name, "type", "veth", "peer", "name", name, "netns", nb},
			{"-n", na, "addr", "add", fmt.Sprintf("10.250.%d.1/24", c), "dev", name},
			{"-n", nb, "addr", "add", fmt.Sprintf("10.250.%d.2/24", c), "dev", name},
			{"-n", na, "link", "set", name, "up"},
			{"-n", nb, "link", "set", name, "up"},
		}
		for _, s := range steps {
			if err := ip(s...); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *lab) swFile(n ibNode, ext string) string {
	return "/run/softib/" + l.name + "-" + n.name + "." + ext
}

func (b *ibLab) up(l *lab) error {
	b.down(l) // leftovers of an earlier run
	fail := func(err error) error {
		b.down(l)
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if l.netns {
		if err := b.namespaces(l); err != nil {
			return fail(err)
		}
	}
	os.MkdirAll("/run/softib", 0o755)
	verbsdArgs := []string{"-socket", l.socket()}
	for i, n := range b.nodes {
		var conf strings.Builder
		if n.sw {
			fmt.Fprintf(&conf, "switch %s lid=%d ports=%d vls=%d buffer=%d", n.name, n.lid, n.ports, n.vls, n.buffer)
			if n.router {
				conf.WriteString(" router")
			}
			if n.hoq != "" {
				fmt.Fprintf(&conf, " hoq=%s", n.hoq)
			}
			if n.life != "" {
				fmt.Fprintf(&conf, " life=%s", n.life)
			}
			conf.WriteString("\n")
		}
		hcaSpec := ""
		for c, k := range b.cables {
			for e, end := range []sm.PortRef{k.a, k.b} {
				if end.Node != i {
					continue
				}
				local, peer := b.addr(l, c, e), b.addr(l, c, 1-e)
				if n.sw {
					fmt.Fprintf(&conf, "port %d local=%s peer=%s %s\n", end.Port, local, peer, l.netnsOpt(n))
				} else {
					hcaSpec = fmt.Sprintf("vhca-%s,local=%s,peer=%s,lid=%d,lmc=%d,vls=%d,buffer=%d,guid=%#x,prefix=%x",
						n.name, local, peer, n.lid, n.lmc, n.vls, n.buffer, b.guid(l, n), n.prefix)
					if n.sl2vl != "" {
						hcaSpec += ",sl2vl=" + n.sl2vl
					}
					if l.netns {
						hcaSpec += "," + l.netnsOpt(n)
					}
				}
			}
		}
		if !n.sw {
			if hcaSpec == "" {
				return fail(fmt.Errorf("hca %s has no cable", n.name))
			}
			verbsdArgs = append(verbsdArgs, "-device", hcaSpec)
			continue
		}
		for lid, port := range b.lfts[i] {
			if port != sm.Unreachable && lid > 0 {
				fmt.Fprintf(&conf, "lft %d %d\n", lid, port)
			}
		}
		for _, e := range b.mfts[i] {
			fmt.Fprintf(&conf, "mft %#x %s\n", e.mlid, e.portList())
		}
		if n.router {
			b.routerConfig(l, i, &conf)
		}
		for _, t := range b.tables {
			if t[1] == n.name {
				fmt.Fprintf(&conf, "%s %s\n", t[0], strings.Join(t[2:], " "))
			}
		}
		if err := os.WriteFile(l.swFile(n, "conf"), []byte(conf.String()), 0o644); err != nil {
			return fail(err)
		}
		args := append([]string{"-config", l.swFile(n, "conf"), "-status", l.swFile(n, "status")}, b.caps[n.name]...)
		ns := ""
		if l.netns {
			ns = l.nodeNS(n) // the switch runs in its node's namespace
		}
		if err := spawnIn(ns, self, "vswitch", args, l.swFile(n, "pid"), l.swFile(n, "log")); err != nil {
			return fail(err)
		}
		if err := waitFor(l.swFile(n, "status"), "vswitch "+n.name, l.swFile(n, "log")); err != nil {
			return fail(err)
		}
	}
	if err := spawn(self, "verbsd", verbsdArgs, l.pidFile(), "/run/softib/"+l.name+".log"); err != nil {
		return fail(err)
	}
	if err := waitFor(l.socket(), "verbsd", "/run/softib/"+l.name+".log"); err != nil {
		return fail(err)
	}
	if err := b.waitActive(l); err != nil {
		return fail(err)
	}
	fmt.Printf("lab %s up (InfiniBand): verbsd on %s (log /run/softib/%s.log)\n", l.name, l.socket(), l.name)
	for _, n := range b.nodes {
		if n.sw {
			fmt.Printf("  switch %-8s LID %-5d counters: softib lab counters FILE %s\n", n.name, n.lid, n.name)
		} else {
			fmt.Printf("  hca    %-8s LID %-5d vHCA vhca-%s\n", n.name, n.lid, n.name)
		}
	}
	return nil
}

// waitActive waits up to 5 s for every switch port with a cable to be
// Active.
func (b *ibLab) waitActive(l *lab) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range b.nodes {
		if !n.sw {
			continue
		}
		for {
			st, err := switchStatus(l.swFile(n, "status"))
			active := err == nil
			for _, p := range st.Ports {
				active = active && p.State == "Active"
			}
			if active {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("switch %s: ports not Active within 5 s (%v)", n.name, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func (b *ibLab) down(l *lab) error {
	stop(l.pidFile(), "verbsd")
	for _, n := range b.nodes {
		if n.sw {
			stop(l.swFile(n, "pid"), "vswitch")
			os.Remove(l.swFile(n, "conf"))
			os.Remove(l.swFile(n, "status"))
		}
		if l.netns {
			exec.Command("ip", "netns", "del", l.nodeNS(n)).Run()
		}
	}
	return nil
}

// swStatus is what a vswitch's status socket answers (cmd/vswitch).
type swStatus struct {
	Switch string `json:"switch"`
	LID    uint16 `json:"lid"`
	Ports  []struct {
		Port     int               `json:"port"`
		Phys     string            `json:"phys_state"`
		State    string            `json:"state"`
		Counters map[string]uint64 `json:"counters"`
	} `json:"ports"`
}

func switchStatus(path string) (swStatus, error) {
	var st swStatus
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return st, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	err = json.NewDecoder(c).Decode(&st)
	return st, err
}

// counters prints a switch's port counters as perfquery does: SWITCH
// [PORT] (all its cabled ports if no PORT).
func (l *lab) counters(args []string) error {
	if l.ib == nil {
		return fmt.Errorf("lab %s has no switches", l.name)
	}
	i, ok := l.ib.byName[args[0]]
	if !ok || !l.ib.nodes[i].sw {
		return fmt.Errorf("lab %s: no switch %q", l.name, args[0])
	}
	n := l.ib.nodes[i]
	st, err := switchStatus(l.swFile(n, "status"))
	if err != nil {
		return fmt.Errorf("switch %s: %w", n.name, err)
	}
	for _, p := range st.Ports {
		if len(args) == 2 && strconv.Itoa(p.Port) != args[1] {
			continue
		}
		fmt.Printf("# Port counters: Lid %d port %d (%s, %s)\n", st.LID, p.Port, p.Phys, p.State)
		names := make([]string, 0, len(p.Counters))
		for k := range p.Counters {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Printf("%s:%s%d\n", k, strings.Repeat(".", max(2, 32-len(k))), p.Counters[k])
		}
	}
	return nil
}
