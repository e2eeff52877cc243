package vswitch

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

func gid(prefix, guid uint64) (g wire.GID) {
	binary.BigEndian.PutUint64(g[:8], prefix)
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

func TestRouter(t *testing.T) {
	const (
		subnetA = 0xFE80_0000_0000_00AA
		subnetB = 0xFE80_0000_0000_00BB
		subnetC = 0xFE80_0000_0000_00CC
	)
	s := newSwitch(t, Config{Ports: 3, VLs: 2, BufferBlocks: 64, Router: true})
	must(t, s.SetRouterLID(1, 0x10))
	must(t, s.SetRouterLID(2, 0x20))
	must(t, s.SetRouterLID(3, 0x30))
	must(t, s.SetRoute(subnetB, 2, 0x55)) // B's host, LID 0x55 on B
	must(t, s.SetRoute(subnetC, 3, 0x31)) // the next router, LID 0x31 on the link to C
	must(t, s.SetLFT(0x55, 3))            // not used in router mode
	var tab [16]uint8
	tab[2] = 1
	must(t, s.SetSL2VL(1, 2, tab))

	in := pkt{VL: 0, SL: 2, DLID: 0x10, SLID: 0x7, Payload: 200, GRH: true,
		SGID: gid(subnetA, 1), DGID: gid(subnetB, 2), HopLimit: 5, PSN: 77}
	b := build(t, in)
	input(t, s, 0, 1, b)
	if s.Pending(3) || !s.Pending(2) {
		t.Fatal("routed out of the wrong port")
	}
	got := drain(s, 0, 2)
	if len(got) != 1 {
		t.Fatal("nothing routed")
	}
	p := parse(t, got[0]) // VCRC recomputed; ICRC still valid
	l, g := p.LRH(), p.GRH()
	if l.DLID() != 0x55 || l.SLID() != 0x20 || l.VL() != 1 || l.SL() != 2 || g.HopLmt() != 4 {
		t.Errorf("LRH DLID %#x SLID %#x VL %d SL %d, hop limit %d", l.DLID(), l.SLID(), l.VL(), l.SL(), g.HopLmt())
	}
	// Nothing else changed: the packet is the one its sender would have
	// built for the next subnet.
	want := in
	want.VL, want.DLID, want.SLID, want.HopLimit = 1, 0x55, 0x20, 4
	if !bytes.Equal(got[0], build(t, want)) {
		t.Error("routed packet differs from the expected one")
	}
	if binary.LittleEndian.Uint32(got[0][len(got[0])-6:]) != binary.LittleEndian.Uint32(b[len(b)-6:]) {
		t.Error("ICRC changed")
	}
	if c := s.Counters(2); c.PortXmitPkts != 1 || c.PortUnicastXmitPkts != 1 {
		t.Errorf("port 2 counters %+v", c)
	}

	// To subnet C through the next router.
	in.DGID = gid(subnetC, 9)
	input(t, s, 0, 2, build(t, in))
	if got := drain(s, 0, 3); len(got) != 1 || parse(t, got[0]).LRH().DLID() != 0x31 || parse(t, got[0]).LRH().SLID() != 0x30 {
		t.Error("route to C")
	}

	relay := func(port int) uint64 { return s.Counters(port).PortRcvSwitchRelayErrors }
	// A local packet never crosses a router.
	input(t, s, 0, 1, build(t, pkt{DLID: 0x55, SLID: 7}))
	if relay(1) != 1 || s.Pending(2) || s.Pending(3) {
		t.Error("local packet routed")
	}
	// ... unless it is for the router port itself.
	input(t, s, 0, 1, build(t, pkt{DLID: 0x10, SLID: 7}))
	input(t, s, 0, 1, build(t, pkt{VL: 15, DLID: 0xFFFF, SLID: 7}))
	if relay(1) != 1 || s.Stats().ToManagement != 2 {
		t.Errorf("management packets: relay %d, stats %+v", relay(1), s.Stats())
	}
	// Hop limit exhausted.
	in.DGID, in.HopLimit = gid(subnetB, 2), 1
	input(t, s, 0, 1, build(t, in))
	if relay(1) != 2 || s.Stats().HopLimitDiscards != 1 || s.Pending(2) {
		t.Error("hop limit 1 routed")
	}
	// Unknown prefix; route back out of the input port.
	in.HopLimit = 64
	in.DGID = gid(0xFE80_0000_0000_00DD, 1)
	input(t, s, 0, 1, build(t, in))
	in.DGID = gid(subnetB, 1)
	input(t, s, 0, 2, build(t, in))
	if relay(1) != 3 || relay(2) != 1 {
		t.Error("unroutable packets")
	}
	if f := freed(s); f[[2]int{1, 0}] == 0 {
		t.Error("dropped blocks not freed")
	}
}

// Host routes: a subnet of several ports, each reached with its own LID,
// and the host route taken before its subnet's prefix route.
func TestRouterHostRoutes(t *testing.T) {
	const subnetB = 0xFE80_0000_0000_00BB
	s := newSwitch(t, Config{Ports: 2, VLs: 1, BufferBlocks: 64, Router: true})
	must(t, s.SetRouterLID(1, 0x10))
	must(t, s.SetRouterLID(2, 0x20))
	must(t, s.SetRoute(subnetB, 2, 0x99))
	must(t, s.SetHostRoute(gid(subnetB, 5), 2, 0x55))
	must(t, s.SetHostRoute(gid(subnetB, 6), 2, 0x66))
	for guid, want := range map[uint64]uint16{5: 0x55, 6: 0x66, 7: 0x99} {
		input(t, s, 0, 1, build(t, pkt{DLID: 0x10, SLID: 7, GRH: true, SGID: gid(0xFE80, 1), DGID: gid(subnetB, guid), HopLimit: 9}))
		got := drain(s, 0, 2)
		if len(got) != 1 || parse(t, got[0]).LRH().DLID() != want {
			t.Errorf("GUID %d: %d packets, want DLID %#x", guid, len(got), want)
		}
	}
	if err := s.SetHostRoute(gid(subnetB, 8), 3, 1); err == nil {
		t.Error("a host route out of a port the router does not have")
	}
}
