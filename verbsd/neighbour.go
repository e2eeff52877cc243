package verbsd

import (
	"time"

	"github.com/softib/softib/vhca/wire"
)

// neighbours is a port's neighbour cache, for ARP (IPv4, as 4-byte keys
// in 16) and ND alike: a MAC learnt is trusted for reachableTime, as the
// kernel's base_reachable_time; after that the next resolution asks
// again (a QP already connected keeps the MAC it was given, as rxe's
// does).
type neighbours struct {
	m   map[[16]byte]neighbour
	now func() time.Time
}

type neighbour struct {
	mac  wire.MAC
	seen time.Time
}

const reachableTime = 30 * time.Second

func newNeighbours() neighbours {
	return neighbours{m: map[[16]byte]neighbour{}, now: time.Now}
}

func (n neighbours) learn(ip [16]byte, mac wire.MAC) { n.m[ip] = neighbour{mac, n.now()} }

func (n neighbours) lookup(ip [16]byte) (wire.MAC, bool) {
	e, ok := n.m[ip]
	if !ok || n.now().Sub(e.seen) > reachableTime {
		return wire.MAC{}, false
	}
	return e.mac, true
}

func v4key(ip [4]byte) [16]byte { return wire.IPv4MappedGID(ip) }
