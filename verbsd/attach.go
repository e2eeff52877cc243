package verbsd

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/softib/softib/vhca/link/netdev"
	"github.com/softib/softib/vhca/wire"
)

// attachNetdev opens the netdev an attached device shares and takes from
// it what rxe takes: the node GUID from its MAC (the modified EUI-64), the
// active MTU from its MTU, one GID per address. The link-local GID at
// index 0 is the one its IPv6 link-local address would give: not twice.
func attachNetdev(dc *DeviceConfig) (*netdev.Netdev, error) {
	if dc.TAP || dc.Pipe != "" || dc.Uplink != "" {
		return nil, fmt.Errorf("device %q: attach= shares a netdev: not with tap, pipe= or xdp=", dc.Name)
	}
	nd, err := netdev.Open(netdev.Config{Name: dc.Attach, Netns: dc.Netns})
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", dc.Name, err)
	}
	guid := guidFromMAC(nd.MAC())
	if dc.NodeGUID != 0 && dc.NodeGUID != guid {
		nd.Close()
		return nil, fmt.Errorf("device %q: an attached device's node GUID comes from its netdev's MAC (%016x), not guid=", dc.Name, guid)
	}
	if len(dc.Addrs) > 0 {
		nd.Close()
		return nil, fmt.Errorf("device %q: an attached device's addresses are its netdev's (ip addr add ... dev %s), not addr=", dc.Name, dc.Attach)
	}
	dc.NodeGUID, dc.MTU = guid, nd.MTU()
	for _, a := range nd.Addrs() {
		if !isDefaultGID(a, guid) {
			dc.Addrs = append(dc.Addrs, a)
		}
	}
	return nd, nil
}

// isDefaultGID reports whether a is the link-local address whose GID is
// the port's default one (index 0).
func isDefaultGID(a netip.Addr, guid uint64) bool {
	var ll wire.GID
	ll[0], ll[1] = 0xFE, 0x80
	binary.BigEndian.PutUint64(ll[8:], guid)
	return a.Is6() && !a.Is4In6() && a.As16() == ll
}

// follow keeps an attached device's GIDs and steering in step with its
// netdev's addresses, until verbsd stops.
func (s *Server) follow(h *hca, changes <-chan netdev.AddrChange) {
	guid := guidFromMAC(h.mac)
	for {
		select {
		case c, ok := <-changes:
			if !ok {
				return
			}
			if isDefaultGID(c.Addr, guid) {
				continue
			}
			err := s.eng.do(func() {
				if c.Added {
					h.addAddr(c.Addr)
				} else {
					h.delAddr(c.Addr)
				}
			})
			if err != nil {
				return
			}
		case <-s.eng.stopped:
			return
		}
	}
}
