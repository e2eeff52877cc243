package sm

import "testing"

// A line of three switches with an HCA at each end, and a ring of four
// switches with one HCA each: every HCA reaches every other by the
// fewest hops, and the ring's routes are balanced over both directions.
func TestMinHop(t *testing.T) {
	f := &Fabric{Nodes: []Node{
		{Name: "a", Ports: 1, LID: 10},
		{Name: "s1", Switch: true, Ports: 4, LID: 1},
		{Name: "s2", Switch: true, Ports: 4, LID: 2},
		{Name: "s3", Switch: true, Ports: 4, LID: 3},
		{Name: "b", Ports: 1, LID: 20, LMC: 2},
	}, Links: []Link{
		{PortRef{0, 1}, PortRef{1, 1}}, {PortRef{1, 2}, PortRef{2, 1}}, {PortRef{2, 2}, PortRef{3, 1}}, {PortRef{3, 2}, PortRef{4, 1}},
	}}
	lfts, err := MinHop(f)
	if err != nil {
		t.Fatal(err)
	}
	for lid := uint16(20); lid < 24; lid++ {
		if h := Hops(f, lfts, 0, lid); h != 4 {
			t.Errorf("a to LID %d: %d hops, want 4", lid, h)
		}
	}
	if h := Hops(f, lfts, 4, 10); h != 4 {
		t.Errorf("b to a: %d hops", h)
	}
	if lfts[2][2] != 0 || lfts[2][10] != 1 || lfts[2][20] != 2 {
		t.Errorf("s2's LFT: own %d, to a %d, to b %d", lfts[2][2], lfts[2][10], lfts[2][20])
	}
	if lfts[1][99%len(lfts[1])] != Unreachable && len(lfts[1]) > 99 {
		t.Error("an unknown LID is routed")
	}

	ring := &Fabric{}
	for i := range 4 {
		ring.Nodes = append(ring.Nodes, Node{Name: "s", Switch: true, Ports: 3, LID: uint16(1 + i)})
	}
	for i := range 4 {
		ring.Nodes = append(ring.Nodes, Node{Name: "h", Ports: 1, LID: uint16(100 + i)})
		ring.Links = append(ring.Links, Link{PortRef{i, 1}, PortRef{(i + 1) % 4, 2}}, Link{PortRef{i, 3}, PortRef{4 + i, 1}})
	}
	lfts, err = MinHop(ring)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		for j := range 4 {
			want := []int{0, 3, 4, 3}[(j-i+4)%4]
			if i == j {
				want = 0
			}
			if h := Hops(ring, lfts, 4+i, uint16(100+j)); h != want {
				t.Errorf("h%d to h%d: %d hops, want %d", i, j, h, want)
			}
		}
	}
	// The opposite HCA is two switch hops either way: some switches go
	// one way round, some the other.
	cw := 0
	for i := range 4 {
		if lfts[i][100+(i+2)%4] == 1 {
			cw++
		}
	}
	if cw == 0 || cw == 4 {
		t.Errorf("opposite routes all one way round (%d of 4 clockwise)", cw)
	}
}

func TestMinHopErrors(t *testing.T) {
	for _, f := range []*Fabric{
		{Nodes: []Node{{Name: "a", Ports: 1, LID: 1}, {Name: "b", Ports: 1, LID: 2}}, Links: []Link{{PortRef{0, 1}, PortRef{1, 2}}}},
		{Nodes: []Node{{Name: "a", Ports: 1, LID: 0}}},
		{Nodes: []Node{{Name: "a", Ports: 1, LID: 0xC000}}},
		{Nodes: []Node{{Name: "a", Ports: 2, LID: 1}, {Name: "b", Ports: 1, LID: 2}}, Links: []Link{{PortRef{0, 1}, PortRef{1, 1}}, {PortRef{0, 2}, PortRef{1, 1}}}},
	} {
		if _, err := MinHop(f); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}
