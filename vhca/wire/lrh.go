package wire

import "encoding/binary"

// LRHLen is the size of the Local Route Header (IBA 1.4 §7.7).
const LRHLen = 8

// Link Next Header values (IBA 1.4 §7.7.6): what follows the LRH.
const (
	LNHRaw    = 0 // raw packet, non-IBA transport
	LNHIPv6   = 1 // raw IPv6 packet
	LNHLocal  = 2 // IBA transport: BTH follows
	LNHGlobal = 3 // IBA global: GRH then BTH follow
)

// Link layer constants (IBA 1.4 §7.7).
const (
	LinkVersion   = 0      // LVer: the only link version defined
	PermissiveLID = 0xFFFF // DLID accepted by any port (IBA 1.4 §7.11.1)
	MaxPktLen     = 0x7FF  // PktLen is 11 bits of 4-byte words
	VL15          = 15     // the management VL, subnet management only
)

// LRH is a view of the Local Route Header:
//
//	byte 0  VL(4) LVer(4)
//	byte 1  SL(4) Rsv(2) LNH(2)
//	2..3    DLID
//	4..5    Rsv(5) PktLen(11)
//	6..7    SLID
//
// PktLen counts 4-byte words from the first byte of the LRH through the
// ICRC, the VCRC excluded (IBA 1.4 §7.7.8).
type LRH []byte

func (h LRH) VL() uint8            { return h[0] >> 4 }
func (h LRH) LVer() uint8          { return h[0] & 0x0F }
func (h LRH) SL() uint8            { return h[1] >> 4 }
func (h LRH) Reserved2() uint8     { return (h[1] >> 2) & 0x3 }
func (h LRH) LNH() uint8           { return h[1] & 0x3 }
func (h LRH) DLID() uint16         { return binary.BigEndian.Uint16(h[2:]) }
func (h LRH) Reserved5() uint8     { return h[4] >> 3 }
func (h LRH) PktLen() uint16       { return binary.BigEndian.Uint16(h[4:]) & MaxPktLen }
func (h LRH) SLID() uint16         { return binary.BigEndian.Uint16(h[6:]) }
func (h LRH) SetVL(v uint8)        { h[0] = v<<4 | h[0]&0x0F }
func (h LRH) SetLVer(v uint8)      { h[0] = h[0]&0xF0 | v&0x0F }
func (h LRH) SetSL(v uint8)        { h[1] = v<<4 | h[1]&0x0F }
func (h LRH) SetReserved2(v uint8) { h[1] = h[1]&0xF3 | (v&0x3)<<2 }
func (h LRH) SetLNH(v uint8)       { h[1] = h[1]&0xFC | v&0x3 }
func (h LRH) SetDLID(v uint16)     { binary.BigEndian.PutUint16(h[2:], v) }
func (h LRH) SetReserved5(v uint8) {
	h[4] = h[4]&0x07 | v<<3
}
func (h LRH) SetPktLen(words uint16) {
	binary.BigEndian.PutUint16(h[4:], uint16(h[4]&0xF8)<<8|words&MaxPktLen)
}
func (h LRH) SetSLID(v uint16) { binary.BigEndian.PutUint16(h[6:], v) }
