package wire

import (
	"encoding/binary"
	"math/bits"
)

// IP and UDP as RoCEv2 carries the IBA transport (IBA 1.4 Annex A17.4).
const (
	IPv4Len        = 20 // without options; RoCEv2 senders send none
	IPv6Len        = 40
	UDPLen         = 8
	UDPPortRoCEv2  = 4791
	IPProtocolUDP  = 17
	ipv4FlagDF     = 0x4000
	ipv4FlagMF     = 0x2000
	ipv4FragOffset = 0x1FFF
)

// IPv4 is a view of an IPv4 header (RFC 791).
type IPv4 []byte

func (h IPv4) Version() uint8       { return h[0] >> 4 }
func (h IPv4) IHL() int             { return int(h[0]&0x0F) * 4 }
func (h IPv4) TOS() uint8           { return h[1] }
func (h IPv4) TotalLen() uint16     { return binary.BigEndian.Uint16(h[2:]) }
func (h IPv4) ID() uint16           { return binary.BigEndian.Uint16(h[4:]) }
func (h IPv4) Flags() uint16        { return binary.BigEndian.Uint16(h[6:]) &^ ipv4FragOffset }
func (h IPv4) DF() bool             { return binary.BigEndian.Uint16(h[6:])&ipv4FlagDF != 0 }
func (h IPv4) MF() bool             { return binary.BigEndian.Uint16(h[6:])&ipv4FlagMF != 0 }
func (h IPv4) FragOffset() uint16   { return binary.BigEndian.Uint16(h[6:]) & ipv4FragOffset }
func (h IPv4) TTL() uint8           { return h[8] }
func (h IPv4) Protocol() uint8      { return h[9] }
func (h IPv4) Checksum() uint16     { return binary.BigEndian.Uint16(h[10:]) }
func (h IPv4) Src() (a [4]byte)     { copy(a[:], h[12:16]); return }
func (h IPv4) Dst() (a [4]byte)     { copy(a[:], h[16:20]); return }
func (h IPv4) SetTOS(v uint8)       { h[1] = v }
func (h IPv4) SetTotalLen(v uint16) { binary.BigEndian.PutUint16(h[2:], v) }
func (h IPv4) SetID(v uint16)       { binary.BigEndian.PutUint16(h[4:], v) }
func (h IPv4) SetTTL(v uint8)       { h[8] = v }
func (h IPv4) SetSrc(a [4]byte)     { copy(h[12:16], a[:]) }
func (h IPv4) SetDst(a [4]byte)     { copy(h[16:20], a[:]) }

// SetChecksum computes the header checksum over the IHL bytes.
func (h IPv4) SetChecksum() {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^foldChecksum(sum16(h[:h.IHL()], 0)))
}

// ChecksumValid reports whether the header checksum is right.
func (h IPv4) ChecksumValid() bool {
	return foldChecksum(sum16(h[:h.IHL()], 0)) == 0xFFFF
}

// IPv6 is a view of an IPv6 header (RFC 8200). It has the layout of the GRH.
type IPv6 []byte

func (h IPv6) Version() uint8          { return h[0] >> 4 }
func (h IPv6) TrafficClass() uint8     { return GRH(h).TClass() }
func (h IPv6) FlowLabel() uint32       { return GRH(h).FlowLabel() }
func (h IPv6) PayloadLen() uint16      { return binary.BigEndian.Uint16(h[4:]) }
func (h IPv6) NextHeader() uint8       { return h[6] }
func (h IPv6) HopLimit() uint8         { return h[7] }
func (h IPv6) Src() (a [16]byte)       { copy(a[:], h[8:24]); return }
func (h IPv6) Dst() (a [16]byte)       { copy(a[:], h[24:40]); return }
func (h IPv6) SetTrafficClass(v uint8) { GRH(h).SetTClass(v) }
func (h IPv6) SetFlowLabel(v uint32)   { GRH(h).SetFlowLabel(v) }
func (h IPv6) SetPayloadLen(v uint16)  { binary.BigEndian.PutUint16(h[4:], v) }
func (h IPv6) SetHopLimit(v uint8)     { h[7] = v }
func (h IPv6) SetSrc(a [16]byte)       { copy(h[8:24], a[:]) }
func (h IPv6) SetDst(a [16]byte)       { copy(h[24:40], a[:]) }

// UDP is a view of a UDP header (RFC 768).
type UDP []byte

func (h UDP) SrcPort() uint16      { return binary.BigEndian.Uint16(h[0:]) }
func (h UDP) DstPort() uint16      { return binary.BigEndian.Uint16(h[2:]) }
func (h UDP) Length() uint16       { return binary.BigEndian.Uint16(h[4:]) }
func (h UDP) Checksum() uint16     { return binary.BigEndian.Uint16(h[6:]) }
func (h UDP) SetSrcPort(v uint16)  { binary.BigEndian.PutUint16(h[0:], v) }
func (h UDP) SetDstPort(v uint16)  { binary.BigEndian.PutUint16(h[2:], v) }
func (h UDP) SetLength(v uint16)   { binary.BigEndian.PutUint16(h[4:], v) }
func (h UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[6:], v) }

// udp6Checksum computes the UDP checksum over IPv6 (RFC 8200 §8.1): the
// pseudo-header (addresses, upper-layer length, next header) and the UDP
// header and data, with the checksum field taken as zero. A result of zero
// is sent as 0xFFFF: zero means "no checksum", which IPv6 forbids.
func udp6Checksum(ip IPv6, udp []byte) uint16 {
	s := sum16(ip[8:40], 0)
	s = add1c(s, uint64(len(udp))+IPProtocolUDP)
	s = sum16(udp[:6], s)
	s = sum16(udp[8:], s)
	c := ^foldChecksum(s)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

// udp6ChecksumValid reports whether a received UDP-over-IPv6 checksum is
// right; udp is the header and data with the checksum as received.
func udp6ChecksumValid(ip IPv6, udp []byte) bool {
	s := sum16(ip[8:40], 0)
	s = add1c(s, uint64(len(udp))+IPProtocolUDP)
	return foldChecksum(sum16(udp, s)) == 0xFFFF
}

// sum16 adds b, as big-endian 16-bit words (an odd length padded with a
// zero byte), to s: the one's complement sum of RFC 1071 before folding.
// The one's complement sum of 16-bit words folds out of the one's
// complement sum of 64-bit words (RFC 1071 §2(B)), so it adds eight bytes
// at a time with an end-around carry.
func sum16(b []byte, s uint64) uint64 {
	var carry uint64
	for len(b) >= 32 {
		s, carry = bits.Add64(s, binary.BigEndian.Uint64(b), carry)
		s, carry = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), carry)
		s, carry = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), carry)
		s, carry = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, carry = bits.Add64(s, binary.BigEndian.Uint64(b), carry)
		b = b[8:]
	}
	s, carry = bits.Add64(s, carry, 0)
	s += carry // cannot carry again: s is at most 2^64-2 after a carry out
	var tail uint64
	for i, x := range b {
		tail |= uint64(x) << (56 - 8*i)
	}
	s, carry = bits.Add64(s, tail, 0)
	return s + carry
}

// add1c adds v to the one's complement sum s, carry wrapped around.
func add1c(s, v uint64) uint64 {
	s, c := bits.Add64(s, v, 0)
	return s + c
}

// foldChecksum folds a 64-bit one's complement sum to 16 bits.
func foldChecksum(s uint64) uint16 {
	s = s>>32 + s&0xFFFFFFFF
	s = s>>32 + s&0xFFFFFFFF
	s = s>>16 + s&0xFFFF
	s = s>>16 + s&0xFFFF
	return uint16(s)
}

// IPProtocolICMPv6 is ICMPv6's next header value.
const IPProtocolICMPv6 = 58

// ICMPv6Checksum is the checksum of an ICMPv6 message (RFC 4443 §2.3):
// over the IPv6 pseudo-header and the message, its checksum field (bytes
// 2 and 3) taken as zero.
func ICMPv6Checksum(ip IPv6, msg []byte) uint16 {
	s := sum16(ip[8:40], 0)
	s = add1c(s, uint64(len(msg))+IPProtocolICMPv6)
	s = sum16(msg[:2], s)
	s = sum16(msg[4:], s)
	return ^foldChecksum(s)
}
