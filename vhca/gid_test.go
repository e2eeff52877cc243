package vhca

import (
	"testing"

	"github.com/softib/softib/vhca/wire"
)

func TestGIDTableChanges(t *testing.T) {
	d := testDevice(t, 1)
	g2 := GIDEntry{GID: wire.IPv4MappedGID([4]byte{192, 0, 2, 99}), Type: GIDTypeRoCEv2}
	i, err := d.AddGID(1, g2)
	if err != nil || i != 1 {
		t.Fatalf("AddGID: %d, %v", i, err)
	}
	if j, _ := d.AddGID(1, g2); j != 1 {
		t.Fatalf("adding it again gave index %d", j)
	}
	first := d.Ports[0].GIDs[0]
	if k, _ := d.DelGID(1, first.GID); k != 1 {
		t.Fatalf("DelGID emptied %d entries", k)
	}
	if got, _ := d.QueryGID(1, 1); got != g2 {
		t.Fatalf("entry 1 moved: %+v", got)
	}
	if got, _ := d.QueryGID(1, 0); got.GID != (wire.GID{}) {
		t.Fatalf("entry 0 not emptied: %+v", got)
	}
	g3 := GIDEntry{GID: wire.IPv4MappedGID([4]byte{192, 0, 2, 100}), Type: GIDTypeRoCEv2}
	if i, _ := d.AddGID(1, g3); i != 0 {
		t.Fatalf("a new GID took index %d, not the empty 0", i)
	}
	var ev [8]Event
	if n := d.Events(ev[:]); n != 3 || ev[0].Type != EventGIDChange || ev[0].Port != 1 {
		t.Fatalf("events %d %+v", n, ev[:n])
	}
	if _, err := d.AddGID(1, GIDEntry{}); err == nil {
		t.Fatal("the zero GID added")
	}
}

// TestIPv4MappedIs: the fast comparison agrees with GID.IsIPv4Mapped,
// mapped or not, on the address or another.
func TestIPv4MappedIs(t *testing.T) {
	a := [4]byte{192, 0, 2, 7}
	mapped := wire.IPv4MappedGID(a)
	v6 := wire.GID{0xfe, 0x80, 10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 7}
	almost := mapped
	almost[11] = 0xfe
	for _, g := range []wire.GID{mapped, wire.IPv4MappedGID([4]byte{192, 0, 2, 8}), v6, almost, {}} {
		for _, x := range [][4]byte{a, {7, 2, 0, 192}, {}} {
			if got, want := ipv4MappedIs(&g, x), g.IsIPv4Mapped(x); got != want {
				t.Errorf("%x against %v: %v, IsIPv4Mapped %v", g, x, got, want)
			}
		}
	}
	if !ipv4MappedIs(&mapped, a) {
		t.Error("a mapped GID is not its address's")
	}
}
