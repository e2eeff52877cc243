package wire

import (
	"encoding/binary"
	"errors"
)

// Headers is every field a sender chooses for one packet, whatever its
// encapsulation; Encode writes the ones the encapsulation and the opcode
// use and ignores the others. Lengths, checksums and CRCs are not here:
// Encode and Seal compute them.
//
// Addresses are GIDs for every encapsulation: a RoCEv2/IPv4 packet takes
// its IPv4 addresses from IPv4-mapped GIDs (::ffff:a.b.c.d), as the RoCE
// GID table holds them (Annex A17.8).
type Headers struct {
	Encap Encap
	// Unsealed packets carry no ICRC, VCRC, IPv4 header checksum or
	// IPv6 UDP checksum (zeros in their places): for links that never
	// leave the process (an HCA's loopback, verbsd's in-memory pipes),
	// where nothing can corrupt a packet and the sums would cost more
	// than the copy.
	Unsealed bool

	// Ethernet (RoCE).
	DstMAC, SrcMAC MAC
	VLAN           bool   // one 802.1Q tag
	VLANTCI        uint16 // its priority, DEI and VLAN ID

	// IP (RoCEv2) and GRH (RoCEv1, global IB). TClass is the IPv4 TOS
	// byte, the IPv6 traffic class or the GRH TClass; HopLimit the IPv4
	// TTL, the IPv6 hop limit or the GRH HopLmt.
	SGID, DGID   GID
	TClass       uint8
	FlowLabel    uint32
	HopLimit     uint8
	IPID         uint16 // IPv4 identification
	DontFragment bool   // IPv4 DF; RoCEv2 senders set it
	UDPSrcPort   uint16

	// LRH (native IB). GRH says whether a GRH follows (LNH 3).
	VL, SL     uint8
	DLID, SLID uint16
	GRH        bool

	// BTH.
	Opcode     Opcode
	SE, MigReq bool
	PKey       uint16
	FECN, BECN bool
	DestQP     uint32
	AckReq     bool
	PSN        uint32

	// Extended transport headers, written when the opcode carries them.
	EEContext   uint32   // RDETH
	QKey, SrcQP uint32   // DETH
	XRCSRQ      uint32   // XRCETH
	VA          uint64   // RETH, AtomicETH
	RKey        uint32   // RETH, AtomicETH
	DMALen      uint32   // RETH
	SwapAdd     uint64   // AtomicETH: swap value (CmpSwap) or addend (FetchAdd)
	Compare     uint64   // AtomicETH
	Syndrome    Syndrome // AETH
	MSN         uint32   // AETH
	OrigRemDt   uint64   // AtomicAckETH
	Imm         uint32   // ImmDt
	InvRKey     uint32   // IETH: the R_Key to invalidate
}

// Errors Encode returns besides ErrUnknownOpcode.
var (
	ErrShortBuffer   = errors.New("wire: buffer too small for the packet")
	ErrBadEncap      = errors.New("wire: unknown encapsulation")
	ErrPayloadDenied = errors.New("wire: the opcode carries no payload")
	ErrTooLong       = errors.New("wire: packet longer than its length fields allow")
)

// Build writes the packet h describes with payload into buf and seals it;
// p describes the result and p.Len() is its length in buf.
func Build(buf []byte, h *Headers, payload []byte, p *Packet) error {
	if err := h.Encode(buf, len(payload), p); err != nil {
		return err
	}
	copy(p.Payload(), payload)
	p.Seal()
	return nil
}

// Encode writes the headers h describes into buf for a payload of
// payloadLen bytes, fills every length field and the IPv4 header checksum,
// zeroes the pad, and sets p to describe the packet. The caller then
// fills p.Payload() (gathering from its SGEs, say) and calls p.Seal().
func (h *Headers) Encode(buf []byte, payloadLen int, p *Packet) error {
	return h.encode(buf, payloadLen, false, p)
}

func (h *Headers) encode(buf []byte, payloadLen int, segment bool, p *Packet) error {
	info := h.Opcode.Info()
	if !info.Valid {
		return ErrUnknownOpcode
	}
	if payloadLen != 0 && !info.Payload {
		return ErrPayloadDenied
	}
	pad := -payloadLen & 3
	transportLen := info.HeaderLen + payloadLen + pad + ICRCLen

	*p = Packet{Encap: h.Encap, Opcode: h.Opcode, Info: info, lrh: -1, grh: -1, PayloadLen: payloadLen, unsealed: h.Unsealed}
	off := 0
	switch h.Encap {
	case EncapIB:
		p.lrh = 0
		off = LRHLen
		if h.GRH {
			p.grh = off
			off += GRHLen
		}
	case EncapRoCEv1, EncapRoCEv2IPv4, EncapRoCEv2IPv6:
		off = EthernetLen
		if h.VLAN {
			off += VLANTagLen
			p.VLANs = 1
		}
		switch h.Encap {
		case EncapRoCEv1:
			p.grh = off
			off += GRHLen
		case EncapRoCEv2IPv4:
			p.l3, p.l4 = off, off+IPv4Len
			off += IPv4Len + UDPLen
		default:
			p.l3, p.l4 = off, off+IPv6Len
			off += IPv6Len + UDPLen
		}
	default:
		return ErrBadEncap
	}
	p.bth = off
	p.payload = off + info.HeaderLen
	p.icrc = off + transportLen - ICRCLen
	p.end = off + transportLen
	if h.Encap == EncapIB {
		p.end += VCRCLen
	}
	if !h.lengthsFit(p) {
		return ErrTooLong
	}
	if segment {
		// The frame ends where the payload would start (segment.go).
		if p.payload > len(buf) {
			return ErrShortBuffer
		}
		p.Frame, p.unsealed = buf[:p.payload], true
		clear(p.Frame)
		h.writeLink(p)
		h.writeTransport(p, pad)
		return nil
	}
	if p.end > len(buf) {
		return ErrShortBuffer
	}
	f := buf[:p.end]
	p.Frame = f
	clear(f[:p.payload])
	clear(f[p.payload+payloadLen : p.icrc])
	h.writeLink(p)
	h.writeTransport(p, pad)
	return nil
}

// Len is the length Encode gives a packet of h's opcode with a payload of
// payloadLen bytes (Packet.Len), without building it.
func (h *Headers) Len(payloadLen int) int {
	n := h.Opcode.Info().HeaderLen + payloadLen + -payloadLen&3 + ICRCLen
	switch h.Encap {
	case EncapIB:
		n += LRHLen + VCRCLen
		if h.GRH {
			n += GRHLen
		}
		return n
	case EncapRoCEv1:
		n += EthernetLen + GRHLen
	case EncapRoCEv2IPv4:
		n += EthernetLen + IPv4Len + UDPLen
	case EncapRoCEv2IPv6:
		n += EthernetLen + IPv6Len + UDPLen
	}
	if h.VLAN {
		n += VLANTagLen
	}
	return n
}

// lengthsFit reports whether the packet fits its length fields: PktLen
// counts 11 bits of words, IP and UDP lengths 16 bits of bytes.
func (h *Headers) lengthsFit(p *Packet) bool {
	switch h.Encap {
	case EncapIB:
		return p.icrc+ICRCLen <= MaxPktLen*4
	case EncapRoCEv2IPv4:
		return p.end-p.l3 <= 0xFFFF
	case EncapRoCEv2IPv6:
		return p.end-p.l4 <= 0xFFFF // IPv6 payload length and UDP length
	default:
		return p.end-p.bth <= 0xFFFF
	}
}

// writeLink writes the headers before the BTH: Ethernet, IP and UDP for
// RoCE, LRH and GRH for IB.
func (h *Headers) writeLink(p *Packet) {
	f := p.Frame
	if h.Encap.Ethernet() {
		e := Ethernet(f)
		e.SetDst(h.DstMAC)
		e.SetSrc(h.SrcMAC)
		off := 12
		if h.VLAN {
			binary.BigEndian.PutUint16(f[off:], EtherTypeVLAN)
			binary.BigEndian.PutUint16(f[off+2:], h.VLANTCI)
			off += VLANTagLen
		}
		etype := uint16(EtherTypeRoCEv1)
		switch h.Encap {
		case EncapRoCEv2IPv4:
			etype = EtherTypeIPv4
		case EncapRoCEv2IPv6:
			etype = EtherTypeIPv6
		}
		binary.BigEndian.PutUint16(f[off:], etype)
	}
	switch h.Encap {
	case EncapIB:
		l := LRH(f)
		l.SetVL(h.VL)
		l.SetLVer(LinkVersion)
		l.SetSL(h.SL)
		l.SetLNH(LNHLocal)
		if h.GRH {
			l.SetLNH(LNHGlobal)
		}
		l.SetDLID(h.DLID)
		l.SetPktLen(uint16((p.icrc + ICRCLen) / 4))
		l.SetSLID(h.SLID)
		if h.GRH {
			h.writeGRH(GRH(f[p.grh:]), p.icrc+ICRCLen-p.bth)
		}
	case EncapRoCEv1:
		h.writeGRH(GRH(f[p.grh:]), p.icrc+ICRCLen-p.bth)
	case EncapRoCEv2IPv4:
		ip := IPv4(f[p.l3:])
		ip[0] = 4<<4 | IPv4Len/4
		ip.SetTOS(h.TClass)
		ip.SetTotalLen(uint16(p.end - p.l3))
		ip.SetID(h.IPID)
		if h.DontFragment {
			binary.BigEndian.PutUint16(ip[6:], ipv4FlagDF)
		}
		ip.SetTTL(h.HopLimit)
		ip[9] = IPProtocolUDP
		ip.SetSrc([4]byte(h.SGID[12:]))
		ip.SetDst([4]byte(h.DGID[12:]))
		if !h.Unsealed {
			ip.SetChecksum()
		}
		h.writeUDP(p)
	case EncapRoCEv2IPv6:
		ip := IPv6(f[p.l3:])
		ip[0] = 6 << 4
		ip.SetTrafficClass(h.TClass)
		ip.SetFlowLabel(h.FlowLabel)
		ip.SetPayloadLen(uint16(p.end - p.l4))
		ip[6] = IPProtocolUDP
		ip.SetHopLimit(h.HopLimit)
		ip.SetSrc(h.SGID)
		ip.SetDst(h.DGID)
		h.writeUDP(p)
	}
}

func (h *Headers) writeGRH(g GRH, payLen int) {
	g.SetIPVer(GRHIPVer)
	g.SetTClass(h.TClass)
	g.SetFlowLabel(h.FlowLabel)
	g.SetPayLen(uint16(payLen))
	g.SetNxtHdr(NxtHdrIBA)
	g.SetHopLmt(h.HopLimit)
	g.SetSGID(h.SGID)
	g.SetDGID(h.DGID)
}

func (h *Headers) writeUDP(p *Packet) {
	u := UDP(p.Frame[p.l4:])
	u.SetSrcPort(h.UDPSrcPort)
	u.SetDstPort(UDPPortRoCEv2)
	u.SetLength(uint16(p.end - p.l4))
	// The checksum stays zero: over IPv4 that is what rxe and RoCE NICs
	// send; over IPv6 Seal computes it once the payload is in.
}

// writeTransport writes the BTH and the extended headers the opcode
// carries.
func (h *Headers) writeTransport(p *Packet, pad int) {
	b := BTH(p.Frame[p.bth:])
	b.SetOpCode(h.Opcode)
	b.SetSE(h.SE)
	b.SetMigReq(h.MigReq)
	b.SetPadCnt(pad)
	b.SetTVer(TransportVersion)
	b.SetPKey(h.PKey)
	b.SetFECN(h.FECN)
	b.SetBECN(h.BECN)
	b.SetDestQP(h.DestQP)
	b.SetAckReq(h.AckReq)
	b.SetPSN(h.PSN)
	for _, x := range p.Info.Headers {
		e := p.ext(x)
		switch x {
		case HdrRDETH:
			RDETH(e).SetEEContext(h.EEContext)
		case HdrDETH:
			DETH(e).SetQKey(h.QKey)
			DETH(e).SetSrcQP(h.SrcQP)
		case HdrXRCETH:
			XRCETH(e).SetXRCSRQ(h.XRCSRQ)
		case HdrRETH:
			r := RETH(e)
			r.SetVA(h.VA)
			r.SetRKey(h.RKey)
			r.SetDMALen(h.DMALen)
		case HdrAtomicETH:
			a := AtomicETH(e)
			a.SetVA(h.VA)
			a.SetRKey(h.RKey)
			a.SetSwapAddData(h.SwapAdd)
			a.SetCmpData(h.Compare)
		case HdrAETH:
			AETH(e).SetSyndrome(h.Syndrome)
			AETH(e).SetMSN(h.MSN)
		case HdrAtomicAckETH:
			AtomicAckETH(e).SetOrigRemDt(h.OrigRemDt)
		case HdrImmDt:
			ImmDt(e).SetValue(h.Imm)
		case HdrIETH:
			IETH(e).SetRKey(h.InvRKey)
		case HdrCNPReserved:
			// zero, as Encode left it
		}
	}
}

// Seal computes what covers the payload once it is in place: the ICRC,
// then the UDP checksum over IPv6 (which covers the ICRC) or the VCRC of
// a native IB packet (which covers everything before it).
func (p *Packet) Seal() {
	f := p.Frame
	if p.unsealed {
		binary.LittleEndian.PutUint32(f[p.icrc:], 0)
		return
	}
	binary.LittleEndian.PutUint32(f[p.icrc:], p.computeICRC())
	switch p.Encap {
	case EncapRoCEv2IPv6:
		u := f[p.l4:p.end]
		UDP(u).SetChecksum(0)
		UDP(u).SetChecksum(udp6Checksum(IPv6(f[p.l3:]), u))
	case EncapIB:
		end := p.icrc + ICRCLen
		binary.LittleEndian.PutUint16(f[end:], VCRC(f[:end]))
	}
}

// Headers fills h with every field of p's headers: what Build needs to
// make the same packet again.
func (p *Packet) Headers(h *Headers) {
	*h = Headers{Encap: p.Encap, Opcode: p.Opcode}
	f := p.Frame
	if p.Encap.Ethernet() {
		e := Ethernet(f)
		h.DstMAC, h.SrcMAC = e.Dst(), e.Src()
		if p.VLANs > 0 {
			h.VLAN = true
			h.VLANTCI = binary.BigEndian.Uint16(f[14:])
		}
	}
	if l := p.LRH(); l != nil {
		h.VL, h.SL, h.DLID, h.SLID = l.VL(), l.SL(), l.DLID(), l.SLID()
		h.GRH = l.LNH() == LNHGlobal
	}
	if g := p.GRH(); g != nil {
		h.TClass, h.FlowLabel, h.HopLimit = g.TClass(), g.FlowLabel(), g.HopLmt()
		h.SGID, h.DGID = g.SGID(), g.DGID()
	}
	if ip := p.IPv4(); ip != nil {
		h.TClass, h.HopLimit, h.IPID, h.DontFragment = ip.TOS(), ip.TTL(), ip.ID(), ip.DF()
		h.SGID, h.DGID = IPv4MappedGID(ip.Src()), IPv4MappedGID(ip.Dst())
	}
	if ip := p.IPv6(); ip != nil {
		h.TClass, h.FlowLabel, h.HopLimit = ip.TrafficClass(), ip.FlowLabel(), ip.HopLimit()
		h.SGID, h.DGID = ip.Src(), ip.Dst()
	}
	if u := p.UDP(); u != nil {
		h.UDPSrcPort = u.SrcPort()
	}
	b := p.BTH()
	h.SE, h.MigReq, h.PKey = b.SE(), b.MigReq(), b.PKey()
	h.FECN, h.BECN, h.DestQP, h.AckReq, h.PSN = b.FECN(), b.BECN(), b.DestQP(), b.AckReq(), b.PSN()
	for _, x := range p.Info.Headers {
		e := p.ext(x)
		switch x {
		case HdrRDETH:
			h.EEContext = RDETH(e).EEContext()
		case HdrDETH:
			h.QKey, h.SrcQP = DETH(e).QKey(), DETH(e).SrcQP()
		case HdrXRCETH:
			h.XRCSRQ = XRCETH(e).XRCSRQ()
		case HdrRETH:
			r := RETH(e)
			h.VA, h.RKey, h.DMALen = r.VA(), r.RKey(), r.DMALen()
		case HdrAtomicETH:
			a := AtomicETH(e)
			h.VA, h.RKey, h.SwapAdd, h.Compare = a.VA(), a.RKey(), a.SwapAddData(), a.CmpData()
		case HdrAETH:
			h.Syndrome, h.MSN = AETH(e).Syndrome(), AETH(e).MSN()
		case HdrAtomicAckETH:
			h.OrigRemDt = AtomicAckETH(e).OrigRemDt()
		case HdrImmDt:
			h.Imm = ImmDt(e).Value()
		case HdrIETH:
			h.InvRKey = IETH(e).RKey()
		}
	}
}

// IPv4MappedGID returns the RoCE GID of an IPv4 address, ::ffff:a.b.c.d.
func IPv4MappedGID(a [4]byte) (g GID) {
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], a[:])
	return g
}

// IsIPv4Mapped reports whether g is IPv4MappedGID(a), comparing in place:
// a GID built to be compared is written in pieces and read in words,
// which stalls the CPU's store forwarding, on every packet's path check.
func (g *GID) IsIPv4Mapped(a [4]byte) bool {
	return binary.LittleEndian.Uint64(g[:8]) == 0 && binary.BigEndian.Uint32(g[8:12]) == 0xFFFF &&
		[4]byte(g[12:16]) == a
}
