package wire

import "encoding/binary"

// Encap is how an IBA packet travels.
type Encap uint8

const (
	EncapNone       Encap = iota
	EncapIB               // native InfiniBand: LRH [GRH] BTH ... ICRC VCRC
	EncapRoCEv1           // Ethernet, ethertype 0x8915: GRH BTH ... ICRC (Annex A16)
	EncapRoCEv2IPv4       // Ethernet, IPv4, UDP 4791: BTH ... ICRC (Annex A17)
	EncapRoCEv2IPv6       // Ethernet, IPv6, UDP 4791: BTH ... ICRC (Annex A17)
)

var encapNames = [...]string{"none", "IB", "RoCEv1", "RoCEv2/IPv4", "RoCEv2/IPv6"}

func (e Encap) String() string {
	if int(e) < len(encapNames) {
		return encapNames[e]
	}
	return "invalid"
}

// Ethernet reports whether the encapsulation is one of the RoCE ones.
func (e Encap) Ethernet() bool { return e >= EncapRoCEv1 && e <= EncapRoCEv2IPv6 }

// Packet describes one IBA packet inside a frame: where each header, the
// payload and the CRCs are. It holds offsets into Frame and no copies; its
// views alias Frame. Parse and Encode fill it; a Packet can be reused for
// every frame of a receive loop.
type Packet struct {
	Frame  []byte // the whole frame: Ethernet for RoCE, LRH through VCRC for IB
	Encap  Encap
	Opcode Opcode
	Info   *OpInfo // the opcode's table row

	VLANs int // 802.1Q/802.1ad tags after the Ethernet addresses (RoCE)
	l3    int // IPv4/IPv6 header (RoCEv2); 0 if none
	l4    int // UDP header (RoCEv2); 0 if none
	lrh   int // -1 if none
	grh   int // -1 if none
	bth   int

	PayloadLen int // data bytes, the pad excluded
	payload    int
	icrc       int // offset of the ICRC; the IBA packet ends 4 bytes later
	end        int // end of the packet in Frame: after the ICRC, or the VCRC for IB
	unsealed   bool
	seg        []byte // a segment's payload (segment.go); nil for a whole frame
	flen       int    // the frame's length as the headers must count it: len(Frame), plus a segment's payload, pad and ICRC
}

// Len is the length of the frame up to the packet's end: the ICRC for RoCE
// (any Ethernet padding excluded), the VCRC for IB.
func (p *Packet) Len() int { return p.end }

func (p *Packet) Ethernet() Ethernet {
	if !p.Encap.Ethernet() {
		return nil
	}
	return Ethernet(p.Frame[:EthernetLen])
}

func (p *Packet) IPv4() IPv4 {
	if p.Encap != EncapRoCEv2IPv4 {
		return nil
	}
	return IPv4(p.Frame[p.l3:p.l4])
}

func (p *Packet) IPv6() IPv6 {
	if p.Encap != EncapRoCEv2IPv6 {
		return nil
	}
	return IPv6(p.Frame[p.l3 : p.l3+IPv6Len])
}

func (p *Packet) UDP() UDP {
	if p.l4 == 0 {
		return nil
	}
	return UDP(p.Frame[p.l4 : p.l4+UDPLen])
}

func (p *Packet) LRH() LRH {
	if p.lrh < 0 {
		return nil
	}
	return LRH(p.Frame[p.lrh : p.lrh+LRHLen])
}

// GRH is the packet's GRH: present on RoCEv1 and on global IB packets.
func (p *Packet) GRH() GRH {
	if p.grh < 0 {
		return nil
	}
	return GRH(p.Frame[p.grh : p.grh+GRHLen])
}

func (p *Packet) BTH() BTH { return BTH(p.Frame[p.bth : p.bth+BTHLen]) }

// ext returns extended header h, or nil if the opcode carries none.
func (p *Packet) ext(h Header) []byte {
	off := p.Info.Offset(h)
	if off == 0 {
		return nil
	}
	s := p.bth + off
	return p.Frame[s : s+h.Len()]
}

func (p *Packet) RDETH() RDETH               { return p.ext(HdrRDETH) }
func (p *Packet) DETH() DETH                 { return p.ext(HdrDETH) }
func (p *Packet) XRCETH() XRCETH             { return p.ext(HdrXRCETH) }
func (p *Packet) RETH() RETH                 { return p.ext(HdrRETH) }
func (p *Packet) AtomicETH() AtomicETH       { return p.ext(HdrAtomicETH) }
func (p *Packet) AETH() AETH                 { return p.ext(HdrAETH) }
func (p *Packet) AtomicAckETH() AtomicAckETH { return p.ext(HdrAtomicAckETH) }
func (p *Packet) ImmDt() ImmDt               { return p.ext(HdrImmDt) }
func (p *Packet) IETH() IETH                 { return p.ext(HdrIETH) }

// Payload is the packet's data, the pad bytes excluded.
func (p *Packet) Payload() []byte {
	if p.seg != nil {
		return p.seg[:p.PayloadLen]
	}
	return p.Frame[p.payload : p.payload+p.PayloadLen]
}

// Segment reports whether the packet is a segment: headers in Frame, the
// payload where its sender keeps it.
func (p *Packet) Segment() bool { return p.seg != nil }

// PadCnt is the number of pad bytes between the payload and the ICRC.
func (p *Packet) PadCnt() int { return p.BTH().PadCnt() }

// IBA is the IBA packet as the spec counts it: from the LRH (IB), the GRH
// (RoCEv1) or the BTH (RoCEv2) through the ICRC.
func (p *Packet) IBA() []byte {
	start := p.bth
	if p.lrh >= 0 {
		start = p.lrh
	} else if p.grh >= 0 {
		start = p.grh
	}
	return p.Frame[start : p.icrc+ICRCLen]
}

// ICRC is the invariant CRC as the packet carries it.
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.Frame[p.icrc:]) }

// VCRC is the variant CRC as the packet carries it (native IB only).
func (p *Packet) VCRC() uint16 {
	if p.Encap != EncapIB {
		return 0
	}
	return binary.LittleEndian.Uint16(p.Frame[p.icrc+ICRCLen:])
}
