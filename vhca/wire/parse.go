package wire

import "encoding/binary"

// ParseEthernet parses a received Ethernet frame carrying RoCEv2 (IPv4 or
// IPv6, UDP 4791) or RoCEv1 (ethertype 0x8915), up to two VLAN tags
// allowed, into p, and verifies its ICRC. Bytes after the packet (Ethernet
// padding, an FCS) are ignored. A frame that is not RoCE at all gives
// ErrNotRoCE. On error p is left undefined.
//
// The ICRC check writes to the frame's variant fields and restores them
// before returning (see icrc.go): the caller must own frame.
func ParseEthernet(frame []byte, p *Packet) error {
	p.unsealed, p.seg, p.flen = false, nil, len(frame)
	return p.parseEthernet(frame)
}

// ParseEthernetUnsealed parses a frame built with Headers.Unsealed: every
// check of ParseEthernet but the ICRC, the IPv4 header checksum and the
// UDP checksum. Only for frames that never left the process.
func ParseEthernetUnsealed(frame []byte, p *Packet) error {
	p.unsealed, p.seg, p.flen = true, nil, len(frame)
	return p.parseEthernet(frame)
}

func (p *Packet) parseEthernet(frame []byte) error {
	p.Frame = frame
	p.lrh, p.grh, p.l3, p.l4 = -1, -1, 0, 0
	if p.flen < EthernetLen {
		return ErrTruncated
	}
	off := 12
	etype := binary.BigEndian.Uint16(frame[off:])
	p.VLANs = 0
	for etype == EtherTypeVLAN || etype == EtherTypeQinQ {
		if p.VLANs == 2 {
			return ErrNotRoCE
		}
		if p.flen < off+2+VLANTagLen {
			return ErrTruncated
		}
		off += VLANTagLen
		etype = binary.BigEndian.Uint16(frame[off:])
		p.VLANs++
	}
	off += 2
	switch etype {
	case EtherTypeIPv4:
		return p.parseIPv4(off)
	case EtherTypeIPv6:
		return p.parseIPv6(off)
	case EtherTypeRoCEv1:
		p.Encap = EncapRoCEv1
		if p.flen < off+GRHLen {
			return ErrTruncated
		}
		g := GRH(frame[off:])
		if g.IPVer() != GRHIPVer || g.NxtHdr() != NxtHdrIBA {
			return ErrBadGRH
		}
		end := off + GRHLen + int(g.PayLen())
		if end > p.flen {
			return ErrTruncated
		}
		p.grh = off
		return p.parseTransport(off+GRHLen, end, end)
	}
	return ErrNotRoCE
}

func (p *Packet) parseIPv4(off int) error {
	f := p.Frame
	p.Encap = EncapRoCEv2IPv4
	if p.flen < off+IPv4Len {
		return ErrTruncated
	}
	ip := IPv4(f[off:])
	ihl := ip.IHL()
	if ip.Version() != 4 || ihl < IPv4Len {
		return ErrBadIPHeader
	}
	total := int(ip.TotalLen())
	if p.flen < off+ihl || p.flen < off+total {
		return ErrTruncated
	}
	if total < ihl || !p.unsealed && !ip.ChecksumValid() {
		return ErrBadIPHeader
	}
	if ip.Protocol() != IPProtocolUDP {
		return ErrNotRoCE
	}
	if ip.MF() || ip.FragOffset() != 0 {
		return ErrIPFragment
	}
	p.l3 = off
	return p.parseUDP(off+ihl, off+total)
}

func (p *Packet) parseIPv6(off int) error {
	f := p.Frame
	p.Encap = EncapRoCEv2IPv6
	if p.flen < off+IPv6Len {
		return ErrTruncated
	}
	ip := IPv6(f[off:])
	if ip.Version() != 6 {
		return ErrBadIPHeader
	}
	end := off + IPv6Len + int(ip.PayloadLen())
	if end > p.flen {
		return ErrTruncated
	}
	switch ip.NextHeader() {
	case IPProtocolUDP:
	case ipv6NextHeaderFragment:
		return ErrIPFragment
	default:
		return ErrNotRoCE
	}
	p.l3 = off
	return p.parseUDP(off+IPv6Len, end)
}

const ipv6NextHeaderFragment = 44

// parseUDP parses the UDP header at off of an IP packet ending at end.
func (p *Packet) parseUDP(off, end int) error {
	f := p.Frame
	if end-off < UDPLen {
		return ErrTruncated
	}
	u := UDP(f[off:])
	if u.DstPort() != UDPPortRoCEv2 {
		return ErrNotRoCE
	}
	if int(u.Length()) != end-off {
		return ErrBadUDPHeader
	}
	p.l4 = off
	if u.Checksum() != 0 && !p.unsealed && !p.udpChecksumValid(off, end) {
		return ErrBadUDPChecksum
	}
	return p.parseTransport(off+UDPLen, end, end)
}

// udpChecksumValid verifies a non-zero UDP checksum (RFC 768, RFC 8200
// §8.1). A zero checksum means none over IPv4 and is what Linux rxe sends
// over IPv6 too, which RFC 8200 forbids but receivers accept.
func (p *Packet) udpChecksumValid(off, end int) bool {
	f := p.Frame
	var s uint64
	if p.Encap == EncapRoCEv2IPv4 {
		s = sum16(f[p.l3+12:p.l3+20], 0)
	} else {
		s = sum16(f[p.l3+8:p.l3+40], 0)
	}
	s = add1c(s, uint64(end-off)+IPProtocolUDP)
	return foldChecksum(sum16(f[off:end], s)) == 0xFFFF
}

// ParseIB parses a native InfiniBand frame, LRH first and VCRC last, into
// p and verifies its VCRC and ICRC. Raw packets (LNH 0 or 1) give
// ErrRawPacket after their VCRC is checked.
func ParseIB(frame []byte, p *Packet) error {
	p.unsealed, p.seg, p.flen = false, nil, len(frame)
	p.Frame = frame
	p.Encap = EncapIB
	p.lrh, p.grh, p.l3, p.l4, p.VLANs = 0, -1, 0, 0, 0
	if len(frame) < LRHLen+VCRCLen {
		return ErrTruncated
	}
	l := LRH(frame)
	if l.LVer() != LinkVersion {
		return ErrBadLRH
	}
	end := int(l.PktLen()) * 4
	if end+VCRCLen > len(frame) {
		return ErrTruncated
	}
	if end+VCRCLen != len(frame) {
		return ErrBadLength
	}
	if VCRC(frame[:end]) != binary.LittleEndian.Uint16(frame[end:]) {
		return ErrBadVCRC
	}
	start := LRHLen
	switch l.LNH() {
	case LNHRaw, LNHIPv6:
		return ErrRawPacket
	case LNHGlobal:
		if end < LRHLen+GRHLen {
			return ErrBadLength
		}
		g := GRH(frame[LRHLen:])
		if g.IPVer() != GRHIPVer || g.NxtHdr() != NxtHdrIBA {
			return ErrBadGRH
		}
		if int(g.PayLen()) != end-LRHLen-GRHLen {
			return ErrBadLength
		}
		p.grh = LRHLen
		start += GRHLen
	}
	return p.parseTransport(start, end, end+VCRCLen)
}

// parseTransport checks the IBA transport packet frame[start:end] (BTH
// through ICRC) against the opcode table and verifies the ICRC; frameEnd
// is where the packet ends in the frame.
func (p *Packet) parseTransport(start, end, frameEnd int) error {
	f := p.Frame
	p.bth = start
	p.end = frameEnd
	if end-start < BTHLen+ICRCLen {
		return ErrTruncated
	}
	bth := BTH(f[start:])
	p.Opcode = bth.OpCode()
	p.Info = p.Opcode.Info()
	if !p.Info.Valid {
		return ErrUnknownOpcode
	}
	if bth.TVer() != TransportVersion {
		return ErrBadTransportVersion
	}
	// IBA packets are whole 4-byte words (IBA 1.4 §9.2.1.3: the pad
	// count aligns the payload).
	if (end-start)%4 != 0 {
		return ErrBadLength
	}
	p.icrc = end - ICRCLen
	p.payload = start + p.Info.HeaderLen
	data := p.icrc - p.payload // payload plus pad
	if data < 0 {
		return ErrBadLength
	}
	pad := bth.PadCnt()
	switch {
	case !p.Info.Payload:
		if pad != 0 {
			return ErrBadPadCount
		}
		if data != 0 {
			return ErrBadLength
		}
	case pad > data:
		return ErrBadPadCount
	case p.Info.Position == First || p.Info.Position == Middle:
		// Only the last packet of a message is padded; the others
		// carry a whole path MTU (IBA 1.4 §9.7.4.1.2).
		if pad != 0 {
			return ErrBadPadCount
		}
		if data == 0 {
			return ErrBadLength
		}
	}
	p.PayloadLen = data - pad
	if !p.unsealed && p.computeICRC() != binary.LittleEndian.Uint32(f[p.icrc:]) {
		return ErrBadICRC
	}
	return nil
}
