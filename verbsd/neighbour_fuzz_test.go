package verbsd

import (
	"net/netip"
	"testing"
)

// ARP and neighbour discovery read frames anyone on the segment can
// send: whatever the bytes, no panic, and nothing learnt from a frame
// that is not ARP or ND.
func FuzzNeighbour(f *testing.F) {
	arp := []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 2, 0, 0, 0, 0, 9, 8, 6,
		0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 9, 10, 0, 0, 9, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1}
	f.Add(arp)
	ns := make([]byte, 14+40+32)
	copy(ns, []byte{0x33, 0x33, 0xFF, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x86, 0xDD, 0x60})
	ns[14+6], ns[14+7] = 58, 255
	ns[54] = 135
	ns[54+24], ns[54+25] = 1, 1
	f.Add(ns)
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, err := newHCA(DeviceConfig{Name: "fuzz", TAP: true,
			Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}})
		if err != nil {
			t.Fatal(err)
		}
		isARP, isND := h.onARP(frame), h.onND(frame)
		if !isARP && !isND && len(h.neigh.m) > 0 {
			t.Fatalf("learnt from a frame that was neither ARP nor ND: %x", frame)
		}
	})
}
