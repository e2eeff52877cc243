package impair

import (
	"encoding/binary"
	"math/rand/v2"
)

// What parse finds in an Ethernet frame.
type layout struct {
	ip    bool   // an IPv4 or IPv6 packet (behind at most one VLAN tag)
	l3    int    // offset of the IP header, or of the payload of a non-IP frame
	l4    int    // offset of the IP payload (the L4 header, unless a later fragment)
	end   int    // end of the IP packet: Ethernet padding excluded
	proto uint8  // IPv4 protocol, IPv6 next header
	udp   bool   // a UDP header is at l4 (not a later fragment, 8 bytes there)
	dport uint16 // its destination port
}

const (
	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
	etherVLAN = 0x8100
	etherQinQ = 0x88a8
	protoUDP  = 17
)

// parse reads the headers of Ethernet frame f: one VLAN tag, IPv4 (with
// options) or IPv6 (a UDP header directly after the fixed header; any
// other next header is not looked into).
func parse(f []byte) layout {
	var l layout
	if len(f) < 14 {
		l.l3, l.end = len(f), len(f)
		return l
	}
	et := binary.BigEndian.Uint16(f[12:])
	l.l3 = 14
	if (et == etherVLAN || et == etherQinQ) && len(f) >= 18 {
		et = binary.BigEndian.Uint16(f[16:])
		l.l3 = 18
	}
	l.l4, l.end = l.l3, len(f)
	o := l.l3
	switch et {
	case etherIPv4:
		if len(f) < o+20 || f[o]>>4 != 4 {
			return l
		}
		ihl := int(f[o]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(f[o+2:]))
		if ihl < 20 || tot < ihl || o+tot > len(f) {
			return l
		}
		l.ip, l.l4, l.end, l.proto = true, o+ihl, o+tot, f[o+9]
		if binary.BigEndian.Uint16(f[o+6:])&0x1fff != 0 {
			return l // a later fragment: no L4 header
		}
	case etherIPv6:
		if len(f) < o+40 || f[o]>>4 != 6 {
			return l
		}
		plen := int(binary.BigEndian.Uint16(f[o+4:]))
		if o+40+plen > len(f) {
			return l
		}
		l.ip, l.l4, l.end, l.proto = true, o+40, o+40+plen, f[o+6]
	default:
		return l
	}
	if l.proto == protoUDP && l.l4+8 <= l.end {
		l.udp = true
		l.dport = binary.BigEndian.Uint16(f[l.l4+2:])
	}
	return l
}

// span is where corruption may fall: the UDP payload; for other IP
// packets the IP payload (so the L4 header and its checksum are fair
// game, as they are for netem, but not the IP header); for frames that
// are not IP, everything after the Ethernet header (and VLAN tag).
func (l layout) span() (from, to int) {
	switch {
	case l.udp:
		return l.l4 + 8, l.end
	case l.ip:
		return l.l4, l.end
	}
	return l.l3, l.end
}

// faulted tells whether the frame is one the faults apply to: every frame
// when only is 0, else UDP frames to destination port only.
func (l layout) faulted(only uint16) bool {
	return only == 0 || l.udp && l.dport == only
}

// verdict is what happens to one frame of the faulted class.
type verdict struct {
	Lose      bool
	Duplicate bool
	Reorder   bool
	Corrupt   bool // flip bits of byte At of the corruptible span with Mask
	At        int
	Mask      byte
}

// decide draws the fate of one frame whose corruptible span is n bytes
// long. It is a pure function of the generator's state, the
// probabilities and n; a probability of 0 draws nothing, so that, say, a
// run with only Loss set makes the same choices whatever the seed of the
// other faults would have been. A lost frame draws nothing more. A frame
// with nothing to corrupt (n == 0) is not corrupted, though the draw is
// made.
func decide(rng *rand.Rand, c *Config, n int) verdict {
	var v verdict
	if c.Loss > 0 && rng.Float64() < c.Loss {
		v.Lose = true
		return v
	}
	if c.Corrupt > 0 && rng.Float64() < c.Corrupt && n > 0 {
		v.Corrupt = true
		v.At = rng.IntN(n)
		v.Mask = byte(1 + rng.IntN(255))
	}
	v.Duplicate = c.Duplicate > 0 && rng.Float64() < c.Duplicate
	v.Reorder = c.Reorder > 0 && rng.Float64() < c.Reorder
	return v
}

// checksum is the Internet checksum of b: the ones' complement of the
// ones' complement sum of its 16-bit big-endian words.
func checksum(b []byte) uint16 {
	var s uint64
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// The virtio_net_hdr an AF_PACKET socket with PACKET_VNET_HDR reads and
// writes before each frame (host byte order: the legacy virtio header on
// a little-endian host).
const (
	vnetLen       = 10
	vnetNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetGSONone   = 0
)

type vnet []byte

func (h vnet) flags() byte       { return h[0] }
func (h vnet) gsoType() byte     { return h[1] }
func (h vnet) csumStart() int    { return int(binary.NativeEndian.Uint16(h[6:])) }
func (h vnet) csumOffset() int   { return int(binary.NativeEndian.Uint16(h[8:])) }
func (h vnet) setFlags(f byte)   { h[0] = f }
func (h vnet) addStart(d uint16) { binary.NativeEndian.PutUint16(h[6:], uint16(h.csumStart())+d) }
func (h vnet) addHdrLen(d uint16) {
	binary.NativeEndian.PutUint16(h[2:], binary.NativeEndian.Uint16(h[2:])+d)
}

// finishChecksum fills in the L4 checksum the sender's stack left to the
// hardware (CHECKSUM_PARTIAL: the field holds the pseudo-header sum), as
// skb_checksum_help does, so that a corruption after it is seen by the
// receiver as netem's is. A GSO frame is left alone: the kernel sums each
// segment after it cuts them.
func finishChecksum(h vnet, f []byte) {
	if h.flags()&vnetNeedsCsum == 0 || h.gsoType() != vnetGSONone {
		return
	}
	start, field := h.csumStart(), h.csumStart()+h.csumOffset()
	if start > len(f) || field+2 > len(f) {
		return
	}
	s := checksum(f[start:])
	if s == 0 {
		s = 0xffff // CSUM_MANGLED_0: 0 means "no checksum" to UDP
	}
	binary.BigEndian.PutUint16(f[field:], s)
	h.setFlags(h.flags() &^ vnetNeedsCsum)
}
