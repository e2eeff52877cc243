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
