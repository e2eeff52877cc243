// Package sm is the subnet manager's side of a fabric: what it knows of
// the nodes and links, and the routing engines that compute the switches'
// forwarding tables from it. Here the fabric comes from a lab's topology
// file (static configuration); discovery by directed-route SMPs comes
// later and fills the same Fabric.
package sm

import (
	"errors"
	"fmt"
)

// Node is a switch or a channel adapter (a vHCA) of the fabric.
type Node struct {
	Name   string
	Switch bool
	Ports  int    // a switch's external ports (1..Ports); an HCA's ports
	LID    uint16 // a switch's (port 0) or the HCA port's base LID
	LMC    uint8  // HCA ports: 2^LMC LIDs from LID
}

// PortRef is a port of a node: Fabric.Nodes[Node], port Port.
type PortRef struct {
	Node, Port int
}

// Link is a cable between two ports.
type Link struct {
	A, B PortRef
}

// Fabric is the nodes and links of one subnet.
type Fabric struct {
	Nodes []Node
	Links []Link
}

// peer is the port at the other end of each connected port.
func (f *Fabric) peers() (map[PortRef]PortRef, error) {
	peer := map[PortRef]PortRef{}
	for _, l := range f.Links {
		for _, p := range []PortRef{l.A, l.B} {
			if p.Node < 0 || p.Node >= len(f.Nodes) {
				return nil, fmt.Errorf("link to node %d: no such node", p.Node)
			}
			if n := f.Nodes[p.Node]; p.Port < 1 || p.Port > n.Ports {
				return nil, fmt.Errorf("link to %s port %d: it has ports 1..%d", n.Name, p.Port, n.Ports)
			}
			if _, dup := peer[p]; dup {
				return nil, fmt.Errorf("%s port %d has two cables", f.Nodes[p.Node].Name, p.Port)
			}
		}
		if l.A == l.B {
			return nil, errors.New("a cable from a port to itself")
		}
		peer[l.A], peer[l.B] = l.B, l.A
	}
	return peer, nil
}

// LFT is a switch's linear forwarding table: the output port of each
// LID (index), 255 where the LID is not reachable (IBA 1.4 §14.2.5.10).
type LFT []uint8

// Unreachable marks a LID the switch has no route to.
const Unreachable = 255

// MinHop computes every switch's LFT by minimum hop count, as OpenSM's
// default routing engine does: for each destination LID, each switch
// forwards towards a neighbour one hop nearer; among equal choices, the
// port that carries the fewest routes so far (balancing the links), then
// the lowest port number. A switch's own LID goes to port 0. It returns
// the LFTs by switch node index.
func MinHop(f *Fabric) (map[int]LFT, error) {
	peer, err := f.peers()
	if err != nil {
		return nil, err
	}
	maxLID := 0
	for _, n := range f.Nodes {
		top := int(n.LID) + 1<<n.LMC - 1
		if n.LID == 0 || top >= 0xC000 {
			return nil, fmt.Errorf("%s: LID %d (LMC %d) is not a unicast LID", n.Name, n.LID, n.LMC)
		}
		maxLID = max(maxLID, top)
	}
	lfts := map[int]LFT{}
	load := map[PortRef]int{}
	for i, n := range f.Nodes {
		if n.Switch {
			t := make(LFT, maxLID+1)
			for j := range t {
				t[j] = Unreachable
			}
			t[n.LID] = 0
			lfts[i] = t
		}
	}
	// Hops from every node to each destination node, by breadth-first
	// search over switches (a CA does not forward).
	for d, dst := range f.Nodes {
		hops := make([]int, len(f.Nodes))
		for i := range hops {
			hops[i] = -1
		}
		hops[d] = 0
		queue := []int{d}
		for len(queue) > 0 {
			x := queue[0]
			queue = queue[1:]
			if x != d && !f.Nodes[x].Switch {
				continue
			}
			for p := 1; p <= f.Nodes[x].Ports; p++ {
				q, ok := peer[PortRef{x, p}]
				if ok && hops[q.Node] < 0 {
					hops[q.Node] = hops[x] + 1
					queue = append(queue, q.Node)
				}
			}
		}
		for s, t := range lfts {
			if s == d || hops[s] < 0 {
				continue
			}
			for lid := int(dst.LID); lid < int(dst.LID)+1<<dst.LMC; lid++ {
				best := -1
				for p := 1; p <= f.Nodes[s].Ports; p++ {
					q, ok := peer[PortRef{s, p}]
					if !ok || hops[q.Node] != hops[s]-1 || q.Node != d && !f.Nodes[q.Node].Switch {
						continue
					}
					if best < 0 || load[PortRef{s, p}] < load[PortRef{s, best}] {
						best = p
					}
				}
				if best > 0 {
					t[lid] = uint8(best)
					load[PortRef{s, best}]++
				}
			}
		}
	}
	return lfts, nil
}

// Hops is the number of links a packet from node a to LID lid crosses
// following the LFTs, or -1 if it does not arrive (a loop or a hole).
func Hops(f *Fabric, lfts map[int]LFT, a int, lid uint16) int {
	peer, err := f.peers()
	if err != nil {
		return -1
	}
	x, port := a, 1
	for hops := 0; hops <= len(f.Nodes); hops++ {
		n := f.Nodes[x]
		if lid >= n.LID && int(lid) < int(n.LID)+1<<n.LMC {
			return hops
		}
		if n.Switch {
			t := lfts[x]
			if int(lid) >= len(t) || t[lid] == Unreachable || t[lid] == 0 {
				return -1
			}
			port = int(t[lid])
		} else if hops > 0 {
			return -1 // a CA does not forward
		}
		q, ok := peer[PortRef{x, port}]
		if !ok {
			return -1
		}
		x = q.Node
	}
	return -1
}
