package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The invariant CRC (IBA 1.4 §7.8.1) is the CRC-32 of IEEE 802.3 (the
// zlib one) over the packet from its first header through the byte before
// the ICRC, with the fields a switch or router may change replaced by ones,
// stored least significant byte first:
//
//   - native IB, local (LNH 2): the LRH with its VL set to ones, the
//     reserved bits as sent; BTH byte 4 (FECN, BECN, Resv6a) set to ones.
//   - native IB, global (LNH 3): 8 bytes of ones instead of the whole LRH;
//     GRH traffic class, flow label and hop limit set to ones; BTH byte 4.
//   - RoCEv1 (Annex A16): as a global IB packet whose LRH is absent: 8 bytes
//     of ones, then the GRH masked as above, the BTH, the rest.
//   - RoCEv2 (Annex A17.3.3): 8 bytes of ones, the IP header (IPv4: TOS,
//     TTL and header checksum; IPv6: traffic class, flow label, hop limit
//     set to ones), the UDP header with its checksum set to ones, the BTH
//     with byte 4 set to ones, the rest.
//
// Linux rxe (rxe_icrc.c) computes the RoCEv2 form and check_pcap.py checks
// all four against real rxe and InfiniBand hardware captures.
//
// The variant fields are masked in place: they are saved, set to ones, the
// CRC runs over the contiguous bytes in one pass and the fields are put
// back. A copy of the headers would cost a second CRC call and, as
// hash/crc32 lets its argument escape, an allocation per packet. The frame
// must therefore not be read by another goroutine while its ICRC is
// computed.

// crcOnes8 is the CRC-32 state after the 8 bytes of ones that stand for
// the LRH of global and RoCE packets.
var crcOnes8 = crc32.ChecksumIEEE([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// computeICRC returns the ICRC of the packet p describes. It needs p's
// offsets, so Parse and Encode call it once the headers are located.
func (p *Packet) computeICRC() uint32 {
	f := p.Frame
	bth4 := f[p.bth+4]
	f[p.bth+4] = 0xff
	var crc uint32
	switch p.Encap {
	case EncapRoCEv2IPv4:
		ip := f[p.l3:]
		tos, ttl, csum := ip[1], ip[8], binary.BigEndian.Uint16(ip[10:])
		ucsum := binary.BigEndian.Uint16(f[p.l4+6:])
		ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
		f[p.l4+6], f[p.l4+7] = 0xff, 0xff
		crc = crc32.Update(crcOnes8, crc32.IEEETable, f[p.l3:p.icrc])
		ip[1], ip[8] = tos, ttl
		binary.BigEndian.PutUint16(ip[10:], csum)
		binary.BigEndian.PutUint16(f[p.l4+6:], ucsum)
	case EncapRoCEv2IPv6:
		ip := f[p.l3:]
		w := binary.BigEndian.Uint32(ip)
		hop := ip[7]
		ucsum := binary.BigEndian.Uint16(f[p.l4+6:])
		binary.BigEndian.PutUint32(ip, w|0x0FFFFFFF)
		ip[7] = 0xff
		f[p.l4+6], f[p.l4+7] = 0xff, 0xff
		crc = crc32.Update(crcOnes8, crc32.IEEETable, f[p.l3:p.icrc])
		binary.BigEndian.PutUint32(ip, w)
		ip[7] = hop
		binary.BigEndian.PutUint16(f[p.l4+6:], ucsum)
	case EncapRoCEv1:
		crc = crcGlobal(f[p.grh:p.icrc])
	case EncapIB:
		if p.grh >= 0 {
			crc = crcGlobal(f[p.grh:p.icrc])
		} else {
			b0 := f[p.lrh]
			f[p.lrh] = b0 | 0xF0 // VL
			crc = crc32.ChecksumIEEE(f[p.lrh:p.icrc])
			f[p.lrh] = b0
		}
	}
	f[p.bth+4] = bth4
	return crc
}

// crcGlobal is the CRC of a packet that starts with a GRH, the LRH (if
// any) counted as 8 bytes of ones.
func crcGlobal(b []byte) uint32 {
	w := binary.BigEndian.Uint32(b)
	hop := b[7]
	binary.BigEndian.PutUint32(b, w|0x0FFFFFFF)
	b[7] = 0xff
	crc := crc32.Update(crcOnes8, crc32.IEEETable, b)
	binary.BigEndian.PutUint32(b, w)
	b[7] = hop
	return crc
}
