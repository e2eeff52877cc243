package verbsd

import (
	"encoding/binary"
	"net/netip"

	"github.com/softib/softib/vhca/wire"
)

// IPv6 neighbour discovery for a vHCA behind a TAP (RFC 4861), what ARP
// is for IPv4: the vHCA answers neighbour solicitations for its IPv6
// addresses (and its link-local one) with advertisements, learns the
// link-layer addresses neighbours announce, and solicits the address of
// a destination it does not know.

const (
	etherTypeIPv6 = 0x86DD
	ndSolicit     = 135
	ndAdvert      = 136
	ndOptSource   = 1
	ndOptTarget   = 2
)

// ownIPv6 reports whether a is one of the port's IPv6 addresses.
func (h *hca) ownIPv6(a [16]byte) bool {
	for _, e := range h.dev.Ports[0].GIDs {
		if e.GID == a && !netip.AddrFrom16(a).Is4In6() {
			return true
		}
	}
	return false
}

// sourceIPv6 is the address the port sends ND from towards dst: its
// link-local one for link-local destinations, else its first global.
func (h *hca) sourceIPv6(dst [16]byte) ([16]byte, bool) {
	var ll [16]byte
	for _, e := range h.dev.Ports[0].GIDs {
		a := netip.AddrFrom16(e.GID)
		switch {
		case a.Is4In6():
		case a.IsLinkLocalUnicast():
			ll = e.GID
		case !netip.AddrFrom16(dst).IsLinkLocalUnicast():
			return e.GID, true
		}
	}
	return ll, ll != [16]byte{}
}

// sendND writes a solicitation for target (to its solicited-node
// multicast group) or an advertisement of target to dst at mac.
func (h *hca) sendND(typ uint8, target, dst [16]byte, mac wire.MAC) {
	if h.tap == nil {
		return
	}
	src, ok := h.sourceIPv6(target)
	if typ == ndAdvert {
		src, ok = target, true
	}
	if !ok {
		return
	}
	if typ == ndSolicit {
		dst = [16]byte{0xFF, 0x02, 11: 1, 12: 0xFF, 13: target[13], 14: target[14], 15: target[15]}
		mac = wire.MAC{0x33, 0x33, dst[12], dst[13], dst[14], dst[15]}
	}
	var f [14 + 40 + 32]byte
	copy(f[0:], mac[:])
	copy(f[6:], h.mac[:])
	binary.BigEndian.PutUint16(f[12:], etherTypeIPv6)
	ip := wire.IPv6(f[14:54])
	f[14] = 0x60
	binary.BigEndian.PutUint16(f[18:], 32)
	f[20], f[21] = 58, 255 // ICMPv6, hop limit 255 as ND requires
	copy(f[22:], src[:])
	copy(f[38:], dst[:])
	m := f[54:]
	m[0] = typ
	if typ == ndAdvert {
		m[4] = 0x60 // solicited, override
	}
	copy(m[8:], target[:])
	m[24], m[25] = ndOptSource, 1
	if typ == ndAdvert {
		m[24] = ndOptTarget
	}
	copy(m[26:], h.mac[:])
	binary.BigEndian.PutUint16(m[2:], wire.ICMPv6Checksum(ip, m))
	h.tap.Write(f[:])
}

// onND handles an IPv6 frame from the TAP if it is neighbour discovery:
// it learns the neighbour and answers a solicitation for one of the
// port's addresses. It reports whether the frame was ND.
func (h *hca) onND(f []byte) bool {
	if len(f) < 14+40+24 || binary.BigEndian.Uint16(f[12:]) != etherTypeIPv6 || f[20] != 58 {
		return false
	}
	m := f[54:]
	typ := m[0]
	if typ != ndSolicit && typ != ndAdvert || f[21] != 255 {
		return false
	}
	var src, target [16]byte
	copy(src[:], f[22:38])
	copy(target[:], m[8:24])
	var lladdr wire.MAC
	have := false
	for o := m[24:]; len(o) >= 8 && o[1] > 0 && int(o[1])*8 <= len(o); o = o[int(o[1])*8:] {
		if o[0] == ndOptSource || o[0] == ndOptTarget {
			copy(lladdr[:], o[2:8])
			have = true
		}
	}
	switch typ {
	case ndSolicit:
		if have && src != [16]byte{} {
			h.neigh.learn(src, lladdr)
		}
		if h.ownIPv6(target) && have {
			h.sendND(ndAdvert, target, src, lladdr)
		}
	case ndAdvert:
		if have {
			h.neigh.learn(target, lladdr)
		}
	}
	return true
}
