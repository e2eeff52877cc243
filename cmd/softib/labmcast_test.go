package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softib/softib/vswitch/sm"
)

// parseIBLab parses a topology (after its lab line) without bringing it up.
func parseIBLab(t *testing.T, topo string) *ibLab {
	t.Helper()
	file := filepath.Join(t.TempDir(), "lab")
	if err := os.WriteFile(file, []byte("lab m\n"+topo), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := parseLab(file)
	if err != nil {
		t.Fatal(err)
	}
	return l.ib
}

// flood follows a multicast packet to mlid from hca src through the
// switches, as each replicates it to its MFT ports but the input port,
// and counts what reaches each HCA; it fails if the packet loops (more
// switch hops than the fabric could need).
func (b *ibLab) flood(t *testing.T, mlid uint16, src string) map[string]int {
	t.Helper()
	peer := map[sm.PortRef]sm.PortRef{}
	for _, c := range b.cables {
		peer[c.a], peer[c.b] = c.b, c.a
	}
	got := map[string]int{}
	queue := []sm.PortRef{peer[sm.PortRef{Node: b.byName[src], Port: 1}]}
	for hops := 0; len(queue) > 0; hops++ {
		if hops > 10*len(b.nodes)*len(b.nodes) {
			t.Fatalf("MLID %#x from %s: the packet loops", mlid, src)
		}
		in := queue[0]
		queue = queue[1:]
		n := b.nodes[in.Node]
		if !n.sw {
			got[n.name]++
			continue
		}
		for _, e := range b.mfts[in.Node] {
			if e.mlid != mlid {
				continue
			}
			for _, p := range e.ports {
				if q, ok := peer[sm.PortRef{Node: in.Node, Port: p}]; ok && p != in.Port {
					queue = append(queue, q)
				}
			}
		}
	}
	return got
}

// The MFTs softib lab computes for a `mcast` line: from any member, a
// datagram reaches every other member once, no one else, and never
// loops — on a fat tree with two spines too, where the union of the
// LFTs' paths would loop; on a tree, the MFTs are exactly the union of
// the LFT ports towards the members.
func TestLabMcastTree(t *testing.T) {
	check := func(t *testing.T, b *ibLab, mlid uint16, members, others []string) {
		for _, src := range members {
			got := b.flood(t, mlid, src)
			for _, m := range members {
				if want := map[bool]int{true: 0, false: 1}[m == src]; got[m] != want {
					t.Errorf("MLID %#x from %s: %s got %d copies, want %d", mlid, src, m, got[m], want)
				}
			}
			for _, o := range others {
				if got[o] != 0 {
					t.Errorf("MLID %#x from %s: %s, no member, got %d copies", mlid, src, o, got[o])
				}
			}
		}
	}
	t.Run("fat tree", func(t *testing.T) {
		b := parseIBLab(t, "switch sp1\nswitch sp2\nswitch l1\nswitch l2\nswitch l3\n"+
			"hca a\nhca b\nhca c\nhca x\nhca y\n"+
			"cable l1 sp1\ncable l1 sp2\ncable l2 sp1\ncable l2 sp2\ncable l3 sp1\ncable l3 sp2\n"+
			"cable a l1\ncable x l1\ncable b l2\ncable c l3\ncable y l3\n"+
			"mcast 0xc001 a,b,c\nmcast 0xc002 b,x\n")
		check(t, b, 0xc001, []string{"a", "b", "c"}, []string{"x", "y"})
		check(t, b, 0xc002, []string{"b", "x"}, []string{"a", "c", "y"})
	})
	t.Run("chain", func(t *testing.T) {
		b := parseIBLab(t, "switch s1\nswitch s2\nswitch s3\nhca a\nhca b\nhca c\nhca d\n"+
			"cable s1 s2\ncable s2 s3\ncable a s1\ncable b s2\ncable c s3\ncable d s1\n"+
			"mcast 0xc001 a,c\n")
		check(t, b, 0xc001, []string{"a", "c"}, []string{"b", "d"})
		for i, n := range b.nodes {
			if !n.sw {
				continue
			}
			var want []int
			for _, m := range []string{"a", "c"} {
				if p := int(b.lfts[i][b.nodes[b.byName[m]].lid]); !slices.Contains(want, p) {
					want = append(want, p)
				}
			}
			slices.Sort(want)
			var got []int
			for _, e := range b.mfts[i] {
				got = e.ports
			}
			if !slices.Equal(got, want) {
				t.Errorf("switch %s: MFT ports %v, want the LFT's ports towards a and c %v", n.name, got, want)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct{ topo, want string }{
			{"mcast 0xbfff a", "multicast LID"},
			{"mcast 0xc001 a,z", "no hca"},
			{"mcast 0xc001 a\nmcast 0xc001 b", "twice"},
			{"mcast 0xc001 s1", "no hca"},
		} {
			file := filepath.Join(t.TempDir(), "lab")
			topo := "lab m\nswitch s1\nhca a\nhca b\ncable a s1\ncable b s1\n" + c.topo + "\n"
			if err := os.WriteFile(file, []byte(topo), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := parseLab(file); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q: %v, want an error saying %q", c.topo, err, c.want)
			}
		}
	})
}

// A static route in the topology file goes after (and over) the computed
// one in the switch's configuration.
func TestLabStaticRoute(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/lab"
	if err := os.WriteFile(file, []byte("lab sr\nswitch s1\nhca a\nhca b\ncable a s1\ncable b s1\nlft s1 3 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := parseLab(file)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, tb := range l.ib.tables {
		found = found || strings.Join(tb, " ") == "lft s1 3 7"
	}
	if !found {
		t.Fatalf("the lft line is not kept: %v", l.ib.tables)
	}
}
