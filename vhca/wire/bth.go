package wire

import "encoding/binary"

// BTHLen is the size of the Base Transport Header (IBA 1.4 §9.2).
const BTHLen = 12

// Transport constants (IBA 1.4 §9.2).
const (
	TransportVersion = 0 // TVer: the only transport header version defined
	DefaultPKey      = 0xFFFF
	MaxQPN           = 0xFFFFFF // QPNs and PSNs are 24 bits
	MaxPSN           = 0xFFFFFF
)

// BTH is a view of the Base Transport Header:
//
//	0       OpCode
//	1       SE(1) M(1) PadCnt(2) TVer(4)
//	2..3    P_Key
//	4       F(1) B(1) Resv6a(6)   (FECN/BECN, IBA 1.4 Annex A10; the ICRC
//	                               treats the whole byte as variant)
//	5..7    DestQP
//	8       A(1) Resv7(7)
//	9..11   PSN
type BTH []byte

func (h BTH) OpCode() Opcode     { return Opcode(h[0]) }
func (h BTH) SE() bool           { return h[1]&0x80 != 0 }
func (h BTH) MigReq() bool       { return h[1]&0x40 != 0 }
func (h BTH) PadCnt() int        { return int(h[1]>>4) & 0x3 }
func (h BTH) TVer() uint8        { return h[1] & 0x0F }
func (h BTH) PKey() uint16       { return binary.BigEndian.Uint16(h[2:]) }
func (h BTH) FECN() bool         { return h[4]&0x80 != 0 }
func (h BTH) BECN() bool         { return h[4]&0x40 != 0 }
func (h BTH) Resv6a() uint8      { return h[4] & 0x3F }
func (h BTH) DestQP() uint32     { return binary.BigEndian.Uint32(h[4:]) & MaxQPN }
func (h BTH) AckReq() bool       { return h[8]&0x80 != 0 }
func (h BTH) Resv7() uint8       { return h[8] & 0x7F }
func (h BTH) PSN() uint32        { return binary.BigEndian.Uint32(h[8:]) & MaxPSN }
func (h BTH) SetOpCode(o Opcode) { h[0] = uint8(o) }
func (h BTH) SetSE(v bool)       { setBit(&h[1], 0x80, v) }
func (h BTH) SetMigReq(v bool)   { setBit(&h[1], 0x40, v) }
func (h BTH) SetPadCnt(n int)    { h[1] = h[1]&0xCF | uint8(n&0x3)<<4 }
func (h BTH) SetTVer(v uint8)    { h[1] = h[1]&0xF0 | v&0x0F }
func (h BTH) SetPKey(v uint16)   { binary.BigEndian.PutUint16(h[2:], v) }
func (h BTH) SetFECN(v bool)     { setBit(&h[4], 0x80, v) }
func (h BTH) SetBECN(v bool)     { setBit(&h[4], 0x40, v) }
func (h BTH) SetResv6a(v uint8)  { h[4] = h[4]&0xC0 | v&0x3F }
func (h BTH) SetDestQP(v uint32) {
	binary.BigEndian.PutUint32(h[4:], uint32(h[4])<<24|v&MaxQPN)
}
func (h BTH) SetAckReq(v bool) { setBit(&h[8], 0x80, v) }
func (h BTH) SetResv7(v uint8) { h[8] = h[8]&0x80 | v&0x7F }
func (h BTH) SetPSN(v uint32) {
	binary.BigEndian.PutUint32(h[8:], uint32(h[8])<<24|v&MaxPSN)
}

func setBit(b *byte, mask byte, on bool) {
	if on {
		*b |= mask
	} else {
		*b &^= mask
	}
}

// put24 and get24 read and write the 24-bit fields (QPNs, PSNs, MSNs, EE
// contexts) that several headers keep in the low three bytes of a word.
func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) {
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}
