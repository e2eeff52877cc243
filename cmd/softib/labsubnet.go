package main

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"

	"github.com/softib/softib/vswitch/sm"
)

// defaultPrefix is the link-local subnet prefix an SM gives by default.
const defaultPrefix = 0xFE80_0000_0000_0000

// A lab's routers split its fabric into subnets: what is connected
// without crossing a router. Each subnet is routed on its own (min-hop
// LFTs over its switches, a router port standing in it as an end port
// with a LID of its own), and each router learns, per port, the GIDs and
// LIDs of the ports on that side (host routes): a packet with a GRH
// crosses into the subnet of its DGID with the LRH of that subnet; a
// packet addressed by LID alone never leaves its subnet.

// route computes the LFTs of every subnet and the router ports' LIDs.
func (b *ibLab) route() error {
	b.lfts, b.routerLID = map[int]sm.LFT{}, map[sm.PortRef]uint16{}
	peer := map[sm.PortRef]sm.PortRef{}
	for _, c := range b.cables {
		peer[c.a], peer[c.b] = c.b, c.a
	}
	used := map[uint16]bool{}
	for _, n := range b.nodes {
		for l := 0; l < 1<<n.lmc; l++ {
			used[n.lid+uint16(l)] = true
		}
	}
	nextLID := uint16(1)
	freeLID := func() uint16 {
		for used[nextLID] {
			nextLID++
		}
		used[nextLID] = true
		return nextLID
	}
	subnet := make([]int, len(b.nodes)) // component of each non-router node
	for i := range subnet {
		subnet[i] = -1
	}
	nsub := 0
	for i, n := range b.nodes {
		if n.router || subnet[i] >= 0 {
			continue
		}
		stack := []int{i}
		subnet[i] = nsub
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for p := 1; p <= b.nodes[x].ports; p++ {
				q, ok := peer[sm.PortRef{Node: x, Port: p}]
				if ok && !b.nodes[q.Node].router && subnet[q.Node] < 0 {
					subnet[q.Node] = nsub
					stack = append(stack, q.Node)
				}
			}
		}
		nsub++
	}
	for s := range nsub {
		f := &sm.Fabric{}
		index := map[int]int{} // lab node → subnet fabric node
		prefix := uint64(0)
		for i, n := range b.nodes {
			if subnet[i] != s {
				continue
			}
			if !n.sw {
				if prefix != 0 && prefix != n.prefix {
					return fmt.Errorf("hca %s: prefix %x, but its subnet's other ports have %x", n.name, n.prefix, prefix)
				}
				prefix = n.prefix
			}
			index[i] = len(f.Nodes)
			f.Nodes = append(f.Nodes, sm.Node{Name: n.name, Switch: n.sw, Ports: n.ports, LID: n.lid, LMC: n.lmc})
		}
		for _, c := range b.cables {
			ia, oka := index[c.a.Node]
			ib, okb := index[c.b.Node]
			switch {
			case oka && okb:
				f.Links = append(f.Links, sm.Link{A: sm.PortRef{Node: ia, Port: c.a.Port}, B: sm.PortRef{Node: ib, Port: c.b.Port}})
			case oka || okb:
				// A router port in this subnet: an end port of its own.
				in, rp := sm.PortRef{Node: ia, Port: c.a.Port}, c.b
				if !oka {
					in, rp = sm.PortRef{Node: ib, Port: c.b.Port}, c.a
				}
				lid := freeLID()
				b.routerLID[rp] = lid
				f.Nodes = append(f.Nodes, sm.Node{Name: fmt.Sprintf("%s/%d", b.nodes[rp.Node].name, rp.Port), Ports: 1, LID: lid})
				f.Links = append(f.Links, sm.Link{A: in, B: sm.PortRef{Node: len(f.Nodes) - 1, Port: 1}})
			}
		}
		lfts, err := sm.MinHop(f)
		if err != nil {
			return err
		}
		for i, x := range index {
			if t, ok := lfts[x]; ok {
				b.lfts[i] = t
			}
		}
	}
	return nil
}

// guid is an HCA's node (and port) GUID: fixed by the lab and the name,
// so that a router's host routes can name the HCA's GID.
func (b *ibLab) guid(l *lab, n ibNode) uint64 {
	h := fnv.New64a()
	h.Write([]byte(l.name + "/" + n.name))
	return h.Sum64()&^(0xFF<<56) | 0x02<<56
}

// gid is an HCA's port GID.
func (b *ibLab) gid(l *lab, n ibNode) netip.Addr {
	var g [16]byte
	binary.BigEndian.PutUint64(g[:8], n.prefix)
	binary.BigEndian.PutUint64(g[8:], b.guid(l, n))
	return netip.AddrFrom16(g)
}

// routerConfig writes a router's port LIDs and a host route to every HCA
// of every subnet, out of the port that leads there.
func (b *ibLab) routerConfig(l *lab, r int, conf *strings.Builder) {
	peer := map[sm.PortRef]sm.PortRef{}
	for _, c := range b.cables {
		peer[c.a], peer[c.b] = c.b, c.a
	}
	for p := 1; p <= b.nodes[r].ports; p++ {
		rp := sm.PortRef{Node: r, Port: p}
		lid, ok := b.routerLID[rp]
		if !ok {
			continue
		}
		fmt.Fprintf(conf, "routerlid %d %d\n", p, lid)
		// Every HCA reachable from this port without crossing a router.
		seen := map[int]bool{}
		stack := []int{peer[rp].Node}
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[x] || b.nodes[x].router {
				continue
			}
			seen[x] = true
			if n := b.nodes[x]; !n.sw {
				fmt.Fprintf(conf, "hostroute %s %d %d\n", b.gid(l, n), p, n.lid)
			}
			for q := 1; q <= b.nodes[x].ports; q++ {
				if pe, ok := peer[sm.PortRef{Node: x, Port: q}]; ok {
					stack = append(stack, pe.Node)
				}
			}
		}
	}
}

// RouterLID is the LID on its subnet of the router port that hca's
// packets to other subnets go through (the DLID an SA's PathRecord
// gives for a destination beyond the subnet), 0 if none.
func (b *ibLab) RouterLID(hca string) uint16 {
	i, ok := b.byName[hca]
	if !ok {
		return 0
	}
	// The router port in the HCA's subnet: found by walking from it.
	peer := map[sm.PortRef]sm.PortRef{}
	for _, c := range b.cables {
		peer[c.a], peer[c.b] = c.b, c.a
	}
	seen := map[int]bool{}
	stack := []int{i}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[x] {
			continue
		}
		seen[x] = true
		for q := 1; q <= b.nodes[x].ports; q++ {
			pe, ok := peer[sm.PortRef{Node: x, Port: q}]
			if !ok {
				continue
			}
			if b.nodes[pe.Node].router {
				return b.routerLID[pe]
			}
			stack = append(stack, pe.Node)
		}
	}
	return 0
}
