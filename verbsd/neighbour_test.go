package verbsd

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// A learnt neighbour resolves for reachableTime, then is asked for again.
func TestNeighbourExpiry(t *testing.T) {
	h, err := newHCA(DeviceConfig{Name: "n", TAP: true, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	h.neigh.now = func() time.Time { return now }
	peer := wire.MAC{2, 9, 9, 9, 9, 9}
	h.neigh.learn(v4key([4]byte{10, 0, 0, 2}), peer)
	dgid := wire.IPv4MappedGID([4]byte{10, 0, 0, 2})
	if mac, ok := h.neigh.lookup(dgid); !ok || mac != peer {
		t.Fatalf("fresh entry: %v %v", mac, ok)
	}
	now = now.Add(reachableTime + time.Second)
	if _, ok := h.neigh.lookup(dgid); ok {
		t.Fatal("an entry older than reachableTime still resolves")
	}
}
