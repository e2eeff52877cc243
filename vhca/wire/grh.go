package wire

import "encoding/binary"

// GRHLen is the size of the Global Route Header (IBA 1.4 §8.3), which has
// the layout of an IPv6 header.
const GRHLen = 40

// GRH constants (IBA 1.4 §8.3.1).
const (
	GRHIPVer     = 6    // IPVer: the GRH claims to be IPv6
	NxtHdrIBA    = 0x1B // NxtHdr: an IBA transport header (BTH) follows
	MaxFlowLabel = 0xFFFFF
)

// GID is a 128-bit global identifier: a subnet prefix and an interface
// (port) GUID, or for RoCE an IPv6 or IPv4-mapped address.
type GID [16]byte

// GRH is a view of the Global Route Header:
//
//	0..3    IPVer(4) TClass(8) FlowLabel(20)
//	4..5    PayLen: bytes from the end of the GRH through the ICRC
//	6       NxtHdr
//	7       HopLmt
//	8..23   SGID
//	24..39  DGID
type GRH []byte

func (h GRH) IPVer() uint8 { return h[0] >> 4 }
func (h GRH) TClass() uint8 {
	return h[0]<<4 | h[1]>>4
}
func (h GRH) FlowLabel() uint32 {
	return binary.BigEndian.Uint32(h[0:]) & MaxFlowLabel
}
func (h GRH) PayLen() uint16 { return binary.BigEndian.Uint16(h[4:]) }
func (h GRH) NxtHdr() uint8  { return h[6] }
func (h GRH) HopLmt() uint8  { return h[7] }
func (h GRH) SGID() (g GID)  { copy(g[:], h[8:24]); return }
func (h GRH) DGID() (g GID)  { copy(g[:], h[24:40]); return }

func (h GRH) SetIPVer(v uint8) { h[0] = v<<4 | h[0]&0x0F }
func (h GRH) SetTClass(v uint8) {
	h[0] = h[0]&0xF0 | v>>4
	h[1] = v<<4 | h[1]&0x0F
}
func (h GRH) SetFlowLabel(v uint32) {
	w := binary.BigEndian.Uint32(h[0:])
	binary.BigEndian.PutUint32(h[0:], w&^MaxFlowLabel|v&MaxFlowLabel)
}
func (h GRH) SetPayLen(v uint16) { binary.BigEndian.PutUint16(h[4:], v) }
func (h GRH) SetNxtHdr(v uint8)  { h[6] = v }
func (h GRH) SetHopLmt(v uint8)  { h[7] = v }
func (h GRH) SetSGID(g GID)      { copy(h[8:24], g[:]) }
func (h GRH) SetDGID(g GID)      { copy(h[24:40], g[:]) }
