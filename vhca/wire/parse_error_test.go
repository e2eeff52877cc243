package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// kind is the encapsulation a test packet is built with.
type kind uint8

const (
	kindIPv4 kind = iota
	kindIPv4VLAN
	kindIPv6
	kindRoCEv1
	kindIBLocal
	kindIBGlobal
	numKinds
)

var kindNames = [numKinds]string{"RoCEv2/IPv4", "RoCEv2/IPv4+VLAN", "RoCEv2/IPv6", "RoCEv1", "IB/local", "IB/global"}

func (k kind) String() string { return kindNames[k] }

func (k kind) ib() bool { return k == kindIBLocal || k == kindIBGlobal }

// parseKind parses frame with the parser of k's link type.
func parseKind(k kind, frame []byte, p *Packet) error {
	if k.ib() {
		return ParseIB(frame, p)
	}
	return ParseEthernet(frame, p)
}

// testHeaders returns the Headers of a test packet: a distinct non-zero
// value in every field that the encapsulation of k and the opcode carry,
// zero in every other field, so that Packet.Headers gives exactly this
// value back.
func testHeaders(k kind, op Opcode) Headers {
	h := Headers{
		Opcode: op, SE: true, MigReq: true, PKey: 0x8001, FECN: true,
		DestQP: 0x123456, AckReq: true, PSN: 0xABCDEF,
	}
	switch k {
	case kindIPv4, kindIPv4VLAN:
		h.Encap = EncapRoCEv2IPv4
		h.SGID, h.DGID = IPv4MappedGID([4]byte{10, 0, 0, 1}), IPv4MappedGID([4]byte{10, 0, 0, 2})
		h.TClass, h.HopLimit, h.IPID, h.DontFragment, h.UDPSrcPort = 0x02, 64, 0x1234, true, 0xC123
		if k == kindIPv4VLAN {
			h.VLAN, h.VLANTCI = true, 0x6064
		}
	case kindIPv6:
		h.Encap = EncapRoCEv2IPv6
		h.SGID = GID{0: 0xfd, 15: 1}
		h.DGID = GID{0: 0xfd, 15: 2}
		h.TClass, h.FlowLabel, h.HopLimit, h.UDPSrcPort = 0x12, 0xABCDE, 64, 0xC456
	case kindRoCEv1:
		h.Encap = EncapRoCEv1
		h.SGID = GID{0: 0xfe, 1: 0x80, 15: 3}
		h.DGID = GID{0: 0xfe, 1: 0x80, 15: 4}
		h.TClass, h.FlowLabel, h.HopLimit = 0x20, 0x54321, 1
	case kindIBLocal, kindIBGlobal:
		h.Encap = EncapIB
		h.VL, h.SL, h.DLID, h.SLID = 1, 2, 0x0003, 0x0004
		if k == kindIBGlobal {
			h.GRH = true
			h.SGID = GID{0: 0xfe, 1: 0x80, 8: 0x00, 9: 0x02, 15: 5}
			h.DGID = GID{0: 0xfe, 1: 0x80, 8: 0x00, 9: 0x02, 15: 6}
			h.TClass, h.FlowLabel, h.HopLimit = 0x40, 0x12345, 2
		}
	}
	if h.Encap.Ethernet() {
		h.DstMAC = MAC{0x02, 0, 0, 0, 0, 0x01}
		h.SrcMAC = MAC{0x02, 0, 0, 0, 0, 0x02}
	}
	for _, x := range op.Info().Headers {
		switch x {
		case HdrRDETH:
			h.EEContext = 0x00BEEF
		case HdrDETH:
			h.QKey, h.SrcQP = 0x80010000, 0x000011
		case HdrXRCETH:
			h.XRCSRQ = 0x000042
		case HdrRETH:
			h.VA, h.RKey, h.DMALen = 0x7F0012345000, 0x1234, 4096
		case HdrAtomicETH:
			h.VA, h.RKey, h.SwapAdd, h.Compare = 0x7F0012345008, 0x5678, 7, 9
		case HdrAETH:
			h.Syndrome, h.MSN = ACKSyndrome(CreditCountInvalid), 0x000102
		case HdrAtomicAckETH:
			h.OrigRemDt = 0x1122334455667788
		case HdrImmDt:
			h.Imm = 0xCAFEF00D
		case HdrIETH:
			h.InvRKey = 0x9ABC
		}
	}
	return h
}

// testPayload returns n bytes of a recognisable pattern.
func testPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// buildPacket builds a valid packet of kind k, opcode op and a payload of
// n bytes with Build, and checks that it parses back to the same headers
// and payload: the starting point every mutation is measured against. The
// returned Packet's Frame is a slice of its own with no spare capacity.
func buildPacket(tb testing.TB, k kind, op Opcode, n int) *Packet {
	tb.Helper()
	h := testHeaders(k, op)
	payload := testPayload(n)
	var p Packet
	if err := Build(make([]byte, 16384), &h, payload, &p); err != nil {
		tb.Fatalf("%v %v: Build: %v", k, op, err)
	}
	f := make([]byte, p.Len())
	copy(f, p.Frame)
	p.Frame = f

	var q Packet
	var got Headers
	if err := parseKind(k, bytes.Clone(f), &q); err != nil {
		tb.Fatalf("%v %v: the packet Build made does not parse: %v", k, op, err)
	}
	q.Headers(&got)
	if got != h {
		tb.Fatalf("%v %v: parsed headers differ from the built ones\n got %+v\nwant %+v", k, op, got, h)
	}
	if !bytes.Equal(q.Payload(), payload) {
		tb.Fatalf("%v %v: parsed payload %x, want %x", k, op, q.Payload(), payload)
	}
	return &p
}

// refUDPChecksum computes the UDP checksum of p's datagram the long way
// (RFC 768 and RFC 8200 §8.1 pseudo-headers, RFC 1071 sum), independently
// of the package's checksum code.
func refUDPChecksum(p *Packet) uint16 {
	udp := p.Frame[p.l4:p.end]
	n := len(udp)
	var pseudo []byte
	if ip := p.IPv4(); ip != nil {
		pseudo = append(pseudo, ip[12:20]...)
		pseudo = append(pseudo, 0, IPProtocolUDP, byte(n>>8), byte(n))
	} else {
		pseudo = append(pseudo, p.IPv6()[8:40]...)
		pseudo = append(pseudo, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 0, 0, IPProtocolUDP)
	}
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	add(pseudo)
	add(udp[:6]) // the checksum field counts as zero
	add(udp[8:])
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	c := ^uint16(s)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

// setUDPChecksum gives p a correct non-zero UDP checksum.
func setUDPChecksum(p *Packet) { p.UDP().SetChecksum(refUDPChecksum(p)) }

// wrongChecksum returns a non-zero checksum that differs from c in one's
// complement arithmetic too.
func wrongChecksum(c uint16) uint16 {
	if w := c ^ 0x0101; w != 0 {
		return w
	}
	return c ^ 0x0202
}

// fixVCRC recomputes the VCRC of a native IB frame (its last two bytes).
func fixVCRC(f []byte) {
	n := len(f) - VCRCLen
	binary.LittleEndian.PutUint16(f[n:], VCRC(f[:n]))
}

// insertAt returns a copy of f with b inserted at off.
func insertAt(f []byte, off int, b ...byte) []byte {
	g := make([]byte, 0, len(f)+len(b))
	g = append(g, f[:off]...)
	g = append(g, b...)
	return append(g, f[off:]...)
}

// grow returns a copy of f with n zero bytes appended and no spare
// capacity.
func grow(f []byte, n int) []byte {
	g := make([]byte, len(f)+n)
	copy(g, f)
	return g
}

func flipPayloadBit(p *Packet) { p.Payload()[0] ^= 0x10 }

type parseCase struct {
	name string
	kind kind
	op   Opcode
	n    int // payload bytes
	// mutate changes the packet Build made and returns the frame to parse
	// (nil: p.Frame, changed in place).
	mutate func(p *Packet) []byte
	want   error // nil: the frame must parse
}

var parseCases = []parseCase{
	// ErrTruncated
	{"Ethernet header cut", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		return p.Frame[: EthernetLen-1 : EthernetLen-1]
	}, ErrTruncated},
	{"VLAN tag cut", kindIPv4VLAN, RCSendOnly, 13, func(p *Packet) []byte {
		return p.Frame[: EthernetLen+2 : EthernetLen+2]
	}, ErrTruncated},
	{"IPv4 header cut", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		return p.Frame[: EthernetLen+IPv4Len-1 : EthernetLen+IPv4Len-1]
	}, ErrTruncated},
	{"IPv4 total length beyond the frame", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4().SetTotalLen(p.IPv4().TotalLen() + 4)
		p.IPv4().SetChecksum()
		return nil
	}, ErrTruncated},
	{"IPv4 total length leaves no room for UDP", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4().SetTotalLen(IPv4Len + UDPLen - 4)
		p.IPv4().SetChecksum()
		return nil
	}, ErrTruncated},
	{"UDP datagram shorter than BTH and ICRC", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4().SetTotalLen(IPv4Len + UDPLen + BTHLen)
		p.IPv4().SetChecksum()
		p.UDP().SetLength(UDPLen + BTHLen)
		return nil
	}, ErrTruncated},
	{"IPv6 header cut", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		return p.Frame[: EthernetLen+IPv6Len-1 : EthernetLen+IPv6Len-1]
	}, ErrTruncated},
	{"IPv6 payload length beyond the frame", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv6().SetPayloadLen(p.IPv6().PayloadLen() + 4)
		return nil
	}, ErrTruncated},
	{"RoCEv1 GRH cut", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		return p.Frame[: EthernetLen+GRHLen-1 : EthernetLen+GRHLen-1]
	}, ErrTruncated},
	{"RoCEv1 PayLen beyond the frame", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetPayLen(p.GRH().PayLen() + 4)
		return nil
	}, ErrTruncated},
	{"RoCEv1 PayLen shorter than BTH and ICRC", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetPayLen(BTHLen)
		return nil
	}, ErrTruncated},
	{"IB shorter than LRH and VCRC", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		return p.Frame[: LRHLen+VCRCLen-1 : LRHLen+VCRCLen-1]
	}, ErrTruncated},
	{"IB PktLen too big", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetPktLen(p.LRH().PktLen() + 1)
		return nil
	}, ErrTruncated},
	{"IB LRH alone", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		f := bytes.Clone(p.Frame[:LRHLen+VCRCLen])
		LRH(f).SetPktLen(LRHLen / 4)
		fixVCRC(f)
		return f
	}, ErrTruncated},

	// ErrBadIPHeader
	{"IPv4 version 5", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4()[0] = 5<<4 | IPv4Len/4
		p.IPv4().SetChecksum()
		return nil
	}, ErrBadIPHeader},
	{"IPv4 IHL 4", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4()[0] = 4<<4 | 4
		p.IPv4().SetChecksum()
		return nil
	}, ErrBadIPHeader},
	{"IPv4 total length below IHL", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4().SetTotalLen(IPv4Len - 4)
		p.IPv4().SetChecksum()
		return nil
	}, ErrBadIPHeader},
	{"IPv4 header checksum wrong", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4()[11] ^= 0x01
		return nil
	}, ErrBadIPHeader},
	{"IPv4 header checksum wrong behind a VLAN tag", kindIPv4VLAN, RCAcknowledge, 0, func(p *Packet) []byte {
		p.IPv4()[10] ^= 0x80
		return nil
	}, ErrBadIPHeader},
	{"IPv6 version 4", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv6()[0] = 4<<4 | p.IPv6()[0]&0x0F
		return nil
	}, ErrBadIPHeader},

	// ErrBadUDPHeader
	{"UDP length longer than the IPv4 payload", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetLength(p.UDP().Length() + 4)
		return nil
	}, ErrBadUDPHeader},
	{"UDP length shorter than the IPv4 payload", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetLength(p.UDP().Length() - 4)
		return nil
	}, ErrBadUDPHeader},
	{"UDP length shorter than the IPv6 payload", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetLength(p.UDP().Length() - 4)
		p.Seal()
		return nil
	}, ErrBadUDPHeader},
	{"IPv6 payload length shorter than the UDP length", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv6().SetPayloadLen(p.IPv6().PayloadLen() - 4)
		return nil
	}, ErrBadUDPHeader},

	// ErrBadUDPChecksum
	{"wrong non-zero UDP checksum over IPv4", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetChecksum(wrongChecksum(refUDPChecksum(p)))
		return nil
	}, ErrBadUDPChecksum},
	{"wrong non-zero UDP checksum over IPv6", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetChecksum(wrongChecksum(p.UDP().Checksum()))
		return nil
	}, ErrBadUDPChecksum},
	{"IPv6 payload changed under a UDP checksum", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		flipPayloadBit(p)
		return nil
	}, ErrBadUDPChecksum},
	{"IPv4 payload changed under a UDP checksum", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		setUDPChecksum(p)
		flipPayloadBit(p)
		return nil
	}, ErrBadUDPChecksum},

	// ErrNotRoCE
	{"ARP ethertype", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		Ethernet(p.Frame).SetEtherType(0x0806)
		return nil
	}, ErrNotRoCE},
	{"ARP ethertype behind a VLAN tag", kindIPv4VLAN, RCSendOnly, 13, func(p *Packet) []byte {
		binary.BigEndian.PutUint16(p.Frame[EthernetLen+2:], 0x0806)
		return nil
	}, ErrNotRoCE},
	{"three VLAN tags", kindIPv4VLAN, RCSendOnly, 13, func(p *Packet) []byte {
		return insertAt(p.Frame, 12, 0x88, 0xA8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x08)
	}, ErrNotRoCE},
	{"IPv4 protocol TCP", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4()[9] = 6
		p.IPv4().SetChecksum()
		return nil
	}, ErrNotRoCE},
	{"UDP destination port 4792 over IPv4", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetDstPort(UDPPortRoCEv2 + 1)
		return nil
	}, ErrNotRoCE},
	{"UDP destination port 4792 over IPv6", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetDstPort(UDPPortRoCEv2 + 1)
		p.Seal()
		return nil
	}, ErrNotRoCE},
	{"IPv6 next header TCP", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv6()[6] = 6
		return nil
	}, ErrNotRoCE},

	// ErrIPFragment
	{"IPv4 MF set", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		binary.BigEndian.PutUint16(p.IPv4()[6:], ipv4FlagMF)
		p.IPv4().SetChecksum()
		return nil
	}, ErrIPFragment},
	{"IPv4 fragment offset", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		binary.BigEndian.PutUint16(p.IPv4()[6:], 185)
		p.IPv4().SetChecksum()
		return nil
	}, ErrIPFragment},
	{"IPv6 next header 44 (fragment)", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv6()[6] = 44
		return nil
	}, ErrIPFragment},

	// ErrBadLRH
	{"LVer 1", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetLVer(1)
		p.Seal()
		return nil
	}, ErrBadLRH},
	{"LVer 15 on a global packet", kindIBGlobal, UDSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetLVer(15)
		p.Seal()
		return nil
	}, ErrBadLRH},

	// ErrRawPacket
	{"LNH 0 (raw)", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetLNH(LNHRaw)
		p.Seal()
		return nil
	}, ErrRawPacket},
	{"LNH 1 (raw IPv6)", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetLNH(LNHIPv6)
		p.Seal()
		return nil
	}, ErrRawPacket},

	// ErrBadGRH
	{"RoCEv1 IPVer 4", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetIPVer(4)
		return nil
	}, ErrBadGRH},
	{"RoCEv1 NxtHdr UDP", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetNxtHdr(IPProtocolUDP)
		return nil
	}, ErrBadGRH},
	{"IB GRH NxtHdr not 0x1B", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetNxtHdr(0x1C)
		p.Seal()
		return nil
	}, ErrBadGRH},
	{"IB GRH IPVer 4", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetIPVer(4)
		p.Seal()
		return nil
	}, ErrBadGRH},

	// ErrUnknownOpcode
	{"RC opcode 0x15 (RESYNC is RD only)", kindIPv4, RCAcknowledge, 0, func(p *Packet) []byte {
		p.BTH().SetOpCode(0x15)
		p.Seal()
		return nil
	}, ErrUnknownOpcode},
	{"UC RDMA READ request (0x2C)", kindIPv6, RCRDMAReadRequest, 0, func(p *Packet) []byte {
		p.BTH().SetOpCode(RCRDMAReadRequest.WithTransport(UC))
		p.Seal()
		return nil
	}, ErrUnknownOpcode},
	{"UD SEND FIRST (0x60)", kindIBLocal, UDSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetOpCode(RCSendFirst.WithTransport(UD))
		p.Seal()
		return nil
	}, ErrUnknownOpcode},
	{"reserved opcode 0x18", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetOpCode(0x18)
		p.Seal()
		return nil
	}, ErrUnknownOpcode},
	{"CNP transport, operation 0 (0x80)", kindIPv4, CNPOpcode, 0, func(p *Packet) []byte {
		p.BTH().SetOpCode(0x80)
		p.Seal()
		return nil
	}, ErrUnknownOpcode},
	{"manufacturer-specific opcode 0xE0", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetOpCode(0xE0)
		p.Seal()
		return nil
	}, ErrUnknownOpcode},

	// ErrBadTransportVersion
	{"TVer 1 over IPv4", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetTVer(1)
		p.Seal()
		return nil
	}, ErrBadTransportVersion},
	{"TVer 1 over RoCEv1", kindRoCEv1, RCAcknowledge, 0, func(p *Packet) []byte {
		p.BTH().SetTVer(1)
		p.Seal()
		return nil
	}, ErrBadTransportVersion},
	{"TVer 15 over IB", kindIBLocal, UDSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetTVer(15)
		p.Seal()
		return nil
	}, ErrBadTransportVersion},

	// ErrBadPadCount
	{"pad count on a SEND FIRST", kindIPv4, RCSendFirst, 256, func(p *Packet) []byte {
		p.BTH().SetPadCnt(1)
		p.Seal()
		return nil
	}, ErrBadPadCount},
	{"pad count on an RDMA WRITE MIDDLE", kindIPv6, RCRDMAWriteMiddle, 256, func(p *Packet) []byte {
		p.BTH().SetPadCnt(2)
		p.Seal()
		return nil
	}, ErrBadPadCount},
	{"pad count on an ACK", kindIBLocal, RCAcknowledge, 0, func(p *Packet) []byte {
		p.BTH().SetPadCnt(1)
		p.Seal()
		return nil
	}, ErrBadPadCount},
	{"pad count on an RDMA READ request", kindIBGlobal, RCRDMAReadRequest, 0, func(p *Packet) []byte {
		p.BTH().SetPadCnt(3)
		p.Seal()
		return nil
	}, ErrBadPadCount},
	{"pad count larger than the data", kindRoCEv1, RCSendOnly, 0, func(p *Packet) []byte {
		p.BTH().SetPadCnt(3)
		p.Seal()
		return nil
	}, ErrBadPadCount},

	// ErrBadLength
	{"payload on an ACK", kindIPv4, RCSendOnly, 8, func(p *Packet) []byte {
		p.BTH().SetOpCode(RCAcknowledge)
		p.Seal()
		return nil
	}, ErrBadLength},
	{"payload on an RDMA READ request", kindIPv6, RCRDMAWriteOnly, 4, func(p *Packet) []byte {
		p.BTH().SetOpCode(RCRDMAReadRequest)
		p.Seal()
		return nil
	}, ErrBadLength},
	{"extended headers longer than the packet", kindIPv4, RCAcknowledge, 0, func(p *Packet) []byte {
		p.BTH().SetOpCode(RCRDMAReadRequest)
		p.Seal()
		return nil
	}, ErrBadLength},
	{"SEND MIDDLE without data", kindIBLocal, RCSendOnly, 0, func(p *Packet) []byte {
		p.BTH().SetOpCode(RCSendMiddle)
		p.Seal()
		return nil
	}, ErrBadLength},
	{"IPv4 transport length not a multiple of 4", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		f := grow(p.Frame, 1)
		ip := IPv4(f[p.l3:])
		ip.SetTotalLen(ip.TotalLen() + 1)
		ip.SetChecksum()
		u := UDP(f[p.l4:])
		u.SetLength(u.Length() + 1)
		return f
	}, ErrBadLength},
	{"RoCEv1 PayLen not a multiple of 4", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		f := grow(p.Frame, 2)
		g := GRH(f[p.grh:])
		g.SetPayLen(g.PayLen() + 2)
		return f
	}, ErrBadLength},
	{"IB PktLen too small", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetPktLen(p.LRH().PktLen() - 1)
		return nil
	}, ErrBadLength},
	{"IB bytes after the VCRC", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		return grow(p.Frame, 4)
	}, ErrBadLength},
	{"IB GRH PayLen disagrees with PktLen", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetPayLen(p.GRH().PayLen() + 4)
		p.Seal()
		return nil
	}, ErrBadLength},
	{"IB LNH 3 on a packet too short for a GRH", kindIBLocal, RCAcknowledge, 0, func(p *Packet) []byte {
		p.LRH().SetLNH(LNHGlobal)
		p.Seal()
		return nil
	}, ErrBadLength},

	// ErrBadICRC
	{"IPv4 payload bit flipped", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		flipPayloadBit(p)
		return nil
	}, ErrBadICRC},
	{"IPv4 ICRC byte flipped", kindIPv4, RCAcknowledge, 0, func(p *Packet) []byte {
		p.Frame[p.icrc+3] ^= 0x01
		return nil
	}, ErrBadICRC},
	{"IPv4 P_Key changed", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetPKey(0xFFFF)
		return nil
	}, ErrBadICRC},
	{"IPv4 source address changed", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4().SetSrc([4]byte{10, 0, 0, 9})
		p.IPv4().SetChecksum()
		return nil
	}, ErrBadICRC},
	{"UDP source port changed", kindIPv4VLAN, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetSrcPort(0xC001)
		return nil
	}, ErrBadICRC},
	{"RETH R_Key changed", kindIPv4, RCRDMAWriteOnly, 64, func(p *Packet) []byte {
		p.RETH().SetRKey(0x4321)
		return nil
	}, ErrBadICRC},
	{"IPv6 payload bit flipped, UDP checksum updated", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		flipPayloadBit(p)
		setUDPChecksum(p)
		return nil
	}, ErrBadICRC},
	{"IPv6 destination changed, UDP checksum updated", kindIPv6, UDSendOnly, 13, func(p *Packet) []byte {
		p.IPv6()[39] ^= 0x01
		setUDPChecksum(p)
		return nil
	}, ErrBadICRC},
	{"RoCEv1 payload bit flipped", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		flipPayloadBit(p)
		return nil
	}, ErrBadICRC},
	{"RoCEv1 SGID changed", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH()[8] ^= 0x01
		return nil
	}, ErrBadICRC},
	{"IB local payload bit flipped, VCRC updated", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		flipPayloadBit(p)
		fixVCRC(p.Frame)
		return nil
	}, ErrBadICRC},
	{"IB local DLID changed, VCRC updated", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetDLID(0x0009)
		fixVCRC(p.Frame)
		return nil
	}, ErrBadICRC},
	{"IB local SL changed, VCRC updated", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetSL(7)
		fixVCRC(p.Frame)
		return nil
	}, ErrBadICRC},
	{"IB global DGID changed, VCRC updated", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH()[39] ^= 0x01
		fixVCRC(p.Frame)
		return nil
	}, ErrBadICRC},

	// ErrBadVCRC
	{"VCRC bit flipped", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.Frame[len(p.Frame)-1] ^= 0x40
		return nil
	}, ErrBadVCRC},
	{"IB global payload bit flipped", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		flipPayloadBit(p)
		return nil
	}, ErrBadVCRC},
	{"VL changed, VCRC not updated", kindIBLocal, RCAcknowledge, 0, func(p *Packet) []byte {
		p.LRH().SetVL(5)
		return nil
	}, ErrBadVCRC},
	{"LNH 0 with a stale VCRC", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetLNH(LNHRaw)
		return nil
	}, ErrBadVCRC},

	// Accepted.
	{"zero UDP checksum over IPv6", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.UDP().SetChecksum(0)
		return nil
	}, nil},
	{"correct non-zero UDP checksum over IPv4", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		setUDPChecksum(p)
		return nil
	}, nil},
	{"two VLAN tags (802.1ad outer)", kindIPv4VLAN, RCSendOnly, 13, func(p *Packet) []byte {
		return insertAt(p.Frame, 12, 0x88, 0xA8, 0x00, 0x07)
	}, nil},
	{"variant IPv4 TOS and TTL changed", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv4().SetTOS(0xB8)
		p.IPv4().SetTTL(3)
		p.IPv4().SetChecksum()
		return nil
	}, nil},
	{"variant BTH FECN, BECN and Resv6a changed over IPv4", kindIPv4, RCSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetFECN(false)
		p.BTH().SetBECN(true)
		p.BTH().SetResv6a(0x15)
		return nil
	}, nil},
	{"variant IPv6 traffic class, flow label and hop limit changed", kindIPv6, RCSendOnly, 13, func(p *Packet) []byte {
		p.IPv6().SetTrafficClass(0xFF)
		p.IPv6().SetFlowLabel(0x00001)
		p.IPv6().SetHopLimit(255)
		return nil // the UDP checksum does not cover them
	}, nil},
	{"variant BTH byte 4 changed over IPv6, UDP checksum updated", kindIPv6, UDSendOnly, 13, func(p *Packet) []byte {
		p.BTH().SetBECN(true)
		setUDPChecksum(p)
		return nil
	}, nil},
	{"variant RoCEv1 GRH fields changed", kindRoCEv1, RCSendOnly, 13, func(p *Packet) []byte {
		p.GRH().SetTClass(0x03)
		p.GRH().SetFlowLabel(0xFFFFF)
		p.GRH().SetHopLmt(0)
		p.BTH().SetFECN(false)
		return nil
	}, nil},
	{"variant IB local VL and BTH byte 4 changed, VCRC updated", kindIBLocal, RCSendOnly, 13, func(p *Packet) []byte {
		p.LRH().SetVL(VL15)
		p.BTH().SetBECN(true)
		fixVCRC(p.Frame)
		return nil
	}, nil},
	{"variant IB global LRH and GRH fields changed, VCRC updated", kindIBGlobal, RCSendOnly, 13, func(p *Packet) []byte {
		l := p.LRH()
		l.SetVL(7)
		l.SetSL(9)
		l.SetDLID(0xBEEF)
		l.SetSLID(0xF00D)
		l.SetReserved2(3)
		g := p.GRH()
		g.SetTClass(0xEE)
		g.SetFlowLabel(0x11111)
		g.SetHopLmt(0x80)
		fixVCRC(p.Frame)
		return nil
	}, nil},
}

// TestParseErrors reaches every ParseError from a valid packet Build made,
// changed in one way, and checks that Parse leaves the frame as it found
// it whatever the outcome.
func TestParseErrors(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.kind.String()+"/"+c.name, func(t *testing.T) {
			p := buildPacket(t, c.kind, c.op, c.n)
			payload := bytes.Clone(p.Payload())
			frame := c.mutate(p)
			if frame == nil {
				frame = p.Frame
			}
			before := bytes.Clone(frame)
			var q Packet
			err := parseKind(c.kind, frame, &q)
			if !bytes.Equal(frame, before) {
				t.Errorf("Parse changed the frame\n got %x\nwant %x", frame, before)
			}
			if c.want != nil {
				if !errors.Is(err, c.want) {
					t.Fatalf("got error %v, want %v", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if q.Opcode != c.op || !bytes.Equal(q.Payload(), payload) {
				t.Errorf("parsed %v with payload %x, want %v with %x", q.Opcode, q.Payload(), c.op, payload)
			}
			if q.Len() != len(frame) {
				t.Errorf("Len %d, want %d", q.Len(), len(frame))
			}
		})
	}
}

// TestParseErrorsCovered checks that the table of TestParseErrors names
// every ParseError, so that a new one cannot go untested.
func TestParseErrorsCovered(t *testing.T) {
	var seen [NumParseErrors]int
	for _, c := range parseCases {
		var pe ParseError
		if c.want == nil {
			continue
		}
		if !errors.As(c.want, &pe) || pe == 0 || pe >= NumParseErrors {
			t.Fatalf("%s: want %v is not a ParseError", c.name, c.want)
		}
		seen[pe]++
	}
	for e := ParseError(1); e < NumParseErrors; e++ {
		if seen[e] == 0 {
			t.Errorf("no case gives %d (%v)", uint8(e), e)
		}
	}
}

// TestParseTruncatedEveryLength cuts valid packets of every encapsulation
// at every length short of the packet's end: each prefix must be refused
// as truncated (a panic fails the test too). The prefixes have no spare
// capacity, so a read past their end panics.
func TestParseTruncatedEveryLength(t *testing.T) {
	ops := []struct {
		op Opcode
		n  int
	}{
		{RCSendOnly, 13}, {RCAcknowledge, 0}, {UDSendOnlyWithImmediate, 5},
		{RCRDMAReadRequest, 0}, {RCAtomicAcknowledge, 0},
	}
	for k := kind(0); k < numKinds; k++ {
		for _, o := range ops {
			p := buildPacket(t, k, o.op, o.n)
			var q Packet
			for n := 0; n < p.Len(); n++ {
				f := bytes.Clone(p.Frame[:n])
				f = f[:n:n]
				if err := parseKind(k, f, &q); !errors.Is(err, ErrTruncated) {
					t.Errorf("%v %v cut to %d of %d bytes: got %v, want %v", k, o.op, n, p.Len(), err, ErrTruncated)
					break // the first length is enough
				}
			}
		}
	}
}

// TestParseGoldenTruncated cuts every RDMA frame of the reference captures
// at every length short of the packet's end.
func TestParseGoldenTruncated(t *testing.T) {
	var p, q Packet
	cut := 0
	for _, rec := range goldenRecords(t, 0) {
		if parseRecord(rec, &p) != nil {
			continue
		}
		n := p.Len()
		for i := 0; i < n; i++ {
			r := rec
			r.Data = rec.Data[:i:i]
			if err := parseRecord(r, &q); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%v %v frame cut to %d of %d bytes: got %v, want %v", p.Encap, p.Opcode, i, n, err, ErrTruncated)
			}
			cut++
		}
	}
	if cut == 0 {
		t.Fatal("no golden frame parsed")
	}
}

// goldenRecords returns every record of the reference captures of the
// given link type (0: all of them).
func goldenRecords(tb testing.TB, linkType uint32) []PcapRecord {
	tb.Helper()
	files, err := filepath.Glob("testdata/*/*.pcap")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no reference captures under testdata: %v", err)
	}
	var recs []PcapRecord
	for _, path := range files {
		for _, rec := range readPcap(tb, path) {
			if linkType == 0 || rec.LinkType == linkType {
				recs = append(recs, rec)
			}
		}
	}
	if len(recs) == 0 {
		tb.Fatalf("no frame of link type %d in the reference captures", linkType)
	}
	return recs
}

// TestParseLeavesFrameUnchanged parses every frame of the reference
// captures, and a copy of every RDMA one with a corrupted ICRC, and checks
// that Parse put back the variant fields it masks for the ICRC.
func TestParseLeavesFrameUnchanged(t *testing.T) {
	var p Packet
	ok := map[Encap]int{}
	for i, rec := range goldenRecords(t, 0) {
		frame := bytes.Clone(rec.Data)
		r := rec
		r.Data = frame
		err := parseRecord(r, &p)
		if !bytes.Equal(frame, rec.Data) {
			t.Fatalf("record %d: Parse (%v) changed the frame\n got %x\nwant %x", i, err, frame, rec.Data)
		}
		if err != nil {
			continue
		}
		ok[p.Encap]++

		// The error path restores the frame too.
		frame[p.icrc] ^= 0x01
		if p.Encap == EncapIB {
			fixVCRC(frame[:p.Len()])
		}
		corrupt := bytes.Clone(frame)
		encap, op := p.Encap, p.Opcode
		err = parseRecord(r, &p)
		if !errors.Is(err, ErrBadICRC) {
			t.Errorf("record %d (%v %v) with its ICRC flipped: got %v, want %v", i, encap, op, err, ErrBadICRC)
		}
		if !bytes.Equal(frame, corrupt) {
			t.Fatalf("record %d: Parse (%v) changed the frame\n got %x\nwant %x", i, err, frame, corrupt)
		}
	}
	for _, e := range []Encap{EncapRoCEv2IPv4, EncapRoCEv2IPv6, EncapIB} {
		if ok[e] == 0 {
			t.Errorf("no %v frame parsed in the reference captures", e)
		}
	}
}

// TestParseErrorText checks that every ParseError has its own message and
// that NumParseErrors bounds them.
func TestParseErrorText(t *testing.T) {
	all := []ParseError{
		ErrTruncated, ErrBadIPHeader, ErrBadUDPHeader, ErrBadUDPChecksum,
		ErrNotRoCE, ErrIPFragment, ErrBadLRH, ErrRawPacket, ErrBadGRH,
		ErrUnknownOpcode, ErrBadTransportVersion, ErrBadPadCount,
		ErrBadLength, ErrBadICRC, ErrBadVCRC,
	}
	if len(all) != int(NumParseErrors)-1 {
		t.Fatalf("NumParseErrors is %d, want %d (the named errors and the zero value)", NumParseErrors, len(all)+1)
	}
	unknown := ParseError(NumParseErrors).Error()
	if unknown == "" || ParseError(255).Error() != unknown {
		t.Errorf("out-of-range errors give %q and %q, want one non-empty text", unknown, ParseError(255).Error())
	}
	texts := map[string]ParseError{ParseError(0).Error(): 0, unknown: NumParseErrors}
	var values [NumParseErrors]bool
	for _, e := range all {
		if e == 0 || e >= NumParseErrors {
			t.Errorf("%q has value %d, outside 1..%d", e.Error(), uint8(e), NumParseErrors-1)
			continue
		}
		if values[e] {
			t.Errorf("value %d named twice", uint8(e))
		}
		values[e] = true
		s := e.Error()
		if s == "" || !strings.HasPrefix(s, "wire: ") {
			t.Errorf("error %d has text %q, want a non-empty \"wire: \" message", uint8(e), s)
		}
		if other, dup := texts[s]; dup {
			t.Errorf("errors %d and %d share the text %q", uint8(e), uint8(other), s)
		}
		texts[s] = e
		for _, o := range all {
			if o != e && errors.Is(e, o) {
				t.Errorf("errors.Is(%v, %v) is true", e, o)
			}
		}
	}
}

// TestParseIgnoresEthernetPadding checks that bytes after a RoCE packet
// (the padding of a frame shorter than 60 bytes, a trailing FCS) are not
// taken for part of it.
func TestParseIgnoresEthernetPadding(t *testing.T) {
	ops := []struct {
		op Opcode
		n  int
	}{{RCSendOnly, 0}, {RCAcknowledge, 0}, {RCSendOnly, 13}}
	padded := 0
	for _, k := range []kind{kindIPv4, kindIPv4VLAN, kindIPv6, kindRoCEv1} {
		for _, o := range ops {
			p := buildPacket(t, k, o.op, o.n)
			var want Headers
			p.Headers(&want)
			fcs := []byte{0xDE, 0xAD, 0xBE, 0xEF}
			frames := map[string][]byte{"FCS": append(grow(p.Frame, 0), fcs...)}
			if len(p.Frame) < MinFrameLen {
				f := grow(p.Frame, MinFrameLen-len(p.Frame))
				for i := len(p.Frame); i < len(f); i++ {
					f[i] = 0xA5
				}
				frames["padded to 60"] = f
				frames["padded to 60 with FCS"] = append(grow(f, 0), fcs...)
				padded++
			}
			for name, f := range frames {
				var q Packet
				var got Headers
				if err := ParseEthernet(f, &q); err != nil {
					t.Errorf("%v %v %s: %v", k, o.op, name, err)
					continue
				}
				q.Headers(&got)
				if q.Len() != len(p.Frame) || q.ICRC() != p.ICRC() || got != want ||
					!bytes.Equal(q.Payload(), p.Payload()) {
					t.Errorf("%v %v %s: parsed Len %d ICRC %08x payload %x headers %+v\nwant Len %d ICRC %08x payload %x headers %+v",
						k, o.op, name, q.Len(), q.ICRC(), q.Payload(), got, len(p.Frame), p.ICRC(), p.Payload(), want)
				}
			}
		}
	}
	if padded == 0 {
		t.Fatal("no test packet was short enough to need Ethernet padding")
	}
}

// TestBuildUDPChecksumIPv6 checks that Build gives RoCEv2/IPv6 packets the
// non-zero UDP checksum RFC 8200 requires, that Parse accepts it, and that
// Parse accepts the zero checksum Linux rxe sends instead.
func TestBuildUDPChecksumIPv6(t *testing.T) {
	for _, o := range []struct {
		op Opcode
		n  int
	}{{RCSendOnly, 0}, {RCSendOnly, 13}, {RCRDMAWriteFirst, 1024}, {UDSendOnly, 7}, {CNPOpcode, 0}} {
		p := buildPacket(t, kindIPv6, o.op, o.n)
		if c, want := p.UDP().Checksum(), refUDPChecksum(p); c == 0 || c != want {
			t.Errorf("%v: UDP checksum %04x, want %04x", o.op, c, want)
		}
		var q Packet
		if err := ParseEthernet(p.Frame, &q); err != nil {
			t.Errorf("%v with its checksum: %v", o.op, err)
		}
		p.UDP().SetChecksum(0)
		if err := ParseEthernet(p.Frame, &q); err != nil {
			t.Errorf("%v with a zero checksum: %v", o.op, err)
		}
	}
}

// TestBuildLengthLimits builds RC SEND ONLY packets around the largest
// payload each encapsulation's length fields can describe: Build must make
// every packet up to that size, which must parse back with its whole
// payload, and refuse every larger one with ErrTooLong.
func TestBuildLengthLimits(t *testing.T) {
	// The transport (BTH, payload, pad, ICRC) is a whole number of words.
	const bthPlusICRC = BTHLen + ICRCLen
	maxPayload := [numKinds]int{
		kindIPv4:     (0xFFFF-IPv4Len-UDPLen)&^3 - bthPlusICRC, // IPv4 total length
		kindIPv4VLAN: (0xFFFF-IPv4Len-UDPLen)&^3 - bthPlusICRC,
		kindIPv6:     (0xFFFF-UDPLen)&^3 - bthPlusICRC,   // IPv6 payload length and UDP length
		kindRoCEv1:   0xFFFF&^3 - bthPlusICRC,            // GRH PayLen
		kindIBLocal:  MaxPktLen*4 - LRHLen - bthPlusICRC, // PktLen, in words
		kindIBGlobal: MaxPktLen*4 - LRHLen - GRHLen - bthPlusICRC,
	}
	buf := make([]byte, 70000)
	for k := kind(0); k < numKinds; k++ {
		h := testHeaders(k, RCSendOnly)
		for n := maxPayload[k] - 8; n <= maxPayload[k]+8; n++ {
			var p, q Packet
			err := Build(buf, &h, testPayload(n), &p)
			if n > maxPayload[k] {
				if !errors.Is(err, ErrTooLong) {
					t.Errorf("%v: Build with a %d-byte payload (limit %d): got %v, want %v", k, n, maxPayload[k], err, ErrTooLong)
					break
				}
				continue
			}
			if err != nil {
				t.Errorf("%v: Build with a %d-byte payload (limit %d): %v", k, n, maxPayload[k], err)
				break
			}
			if err := parseKind(k, p.Frame[:p.Len()], &q); err != nil || q.PayloadLen != n {
				t.Errorf("%v: Build made a %d-byte packet of a %d-byte payload that parses as %v with %d bytes",
					k, p.Len(), n, err, q.PayloadLen)
				break
			}
		}
	}
}
