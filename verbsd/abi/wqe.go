package abi

import "encoding/binary"

// Ring entries: work queue elements (send and receive) and completion
// queue entries. Each is a view over one ring entry's bytes, with an
// accessor per field; the layouts are in the package documentation.
// Integers are in the host's byte order.

var ne = binary.NativeEndian

// Send queue entry layout.
const (
	SendWQEHeader  = 64 // fixed part; the SGEs or the inline data follow
	SGESize        = 16
	offWRID        = 0
	offSendOpcode  = 8
	offSendNumSGE  = 9
	offSendFlags   = 10
	offSendImm     = 12
	offRemoteAddr  = 16
	offRKey        = 24
	offInlineLen   = 28
	offCompareAdd  = 32
	offSwap        = 40
	offAH          = 48
	offRemoteQPN   = 52
	offRemoteQKey  = 56
	offSendSeq     = 60 // the ring's sequence word (ring.go)
	RecvWQEHeader  = 16
	offRecvNumSGE  = 8
	offRecvSeq     = 12
	CQESize        = 64
	offCQEStatus   = 8
	offCQEOpcode   = 9
	offCQESL       = 10
	offCQEDLIDPath = 11
	offCQEVendor   = 12
	offCQEByteLen  = 16
	offCQEImm      = 20
	offCQEQPNum    = 24
	offCQESrcQP    = 28
	offCQEFlags    = 32
	offCQEPKeyIdx  = 36
	offCQESLID     = 38
	offCQESeq      = 60
)

// SendWQESize is the entry size of a send queue that takes maxSGE SGEs
// or maxInline bytes of inline data, whichever needs more room.
func SendWQESize(maxSGE, maxInline int) int {
	body := max(maxSGE*SGESize, (maxInline+7)/8*8)
	return SendWQEHeader + body
}

// RecvWQESize is the entry size of a receive queue of maxSGE SGEs.
func RecvWQESize(maxSGE int) int { return RecvWQEHeader + max(maxSGE, 1)*SGESize }

// SendWQE is a view over a send queue entry.
type SendWQE []byte

func (w SendWQE) WRID() uint64       { return ne.Uint64(w[offWRID:]) }
func (w SendWQE) Opcode() uint8      { return w[offSendOpcode] }
func (w SendWQE) NumSGE() int        { return int(w[offSendNumSGE]) }
func (w SendWQE) Flags() uint16      { return ne.Uint16(w[offSendFlags:]) }
func (w SendWQE) Imm() uint32        { return ne.Uint32(w[offSendImm:]) }
func (w SendWQE) RemoteAddr() uint64 { return ne.Uint64(w[offRemoteAddr:]) }
func (w SendWQE) RKey() uint32       { return ne.Uint32(w[offRKey:]) }
func (w SendWQE) InlineLen() int     { return int(ne.Uint32(w[offInlineLen:])) }
func (w SendWQE) CompareAdd() uint64 { return ne.Uint64(w[offCompareAdd:]) }
func (w SendWQE) Swap() uint64       { return ne.Uint64(w[offSwap:]) }
func (w SendWQE) AH() uint32         { return ne.Uint32(w[offAH:]) }
func (w SendWQE) RemoteQPN() uint32  { return ne.Uint32(w[offRemoteQPN:]) }
func (w SendWQE) RemoteQKey() uint32 { return ne.Uint32(w[offRemoteQKey:]) }
func (w SendWQE) SGE(i int) SGE      { return SGE(w[SendWQEHeader+i*SGESize:][:SGESize]) }
func (w SendWQE) Inline() []byte     { return w[SendWQEHeader:] }
func (w SendWQE) SetWRID(v uint64)   { ne.PutUint64(w[offWRID:], v) }
func (w SendWQE) SetOpcode(v uint8)  { w[offSendOpcode] = v }
func (w SendWQE) SetNumSGE(n int)    { w[offSendNumSGE] = uint8(n) }
func (w SendWQE) SetFlags(v uint16)  { ne.PutUint16(w[offSendFlags:], v) }
func (w SendWQE) SetImm(v uint32)    { ne.PutUint32(w[offSendImm:], v) }
func (w SendWQE) SetRemoteAddr(v uint64) {
	ne.PutUint64(w[offRemoteAddr:], v)
}
func (w SendWQE) SetRKey(v uint32)       { ne.PutUint32(w[offRKey:], v) }
func (w SendWQE) SetInlineLen(n int)     { ne.PutUint32(w[offInlineLen:], uint32(n)) }
func (w SendWQE) SetCompareAdd(v uint64) { ne.PutUint64(w[offCompareAdd:], v) }
func (w SendWQE) SetSwap(v uint64)       { ne.PutUint64(w[offSwap:], v) }
func (w SendWQE) SetAH(v uint32)         { ne.PutUint32(w[offAH:], v) }
func (w SendWQE) SetRemoteQPN(v uint32)  { ne.PutUint32(w[offRemoteQPN:], v) }
func (w SendWQE) SetRemoteQKey(v uint32) { ne.PutUint32(w[offRemoteQKey:], v) }

// RecvWQE is a view over a receive queue (or SRQ) entry.
type RecvWQE []byte

func (w RecvWQE) WRID() uint64     { return ne.Uint64(w[offWRID:]) }
func (w RecvWQE) NumSGE() int      { return int(ne.Uint32(w[offRecvNumSGE:])) }
func (w RecvWQE) SGE(i int) SGE    { return SGE(w[RecvWQEHeader+i*SGESize:][:SGESize]) }
func (w RecvWQE) SetWRID(v uint64) { ne.PutUint64(w[offWRID:], v) }
func (w RecvWQE) SetNumSGE(n int)  { ne.PutUint32(w[offRecvNumSGE:], uint32(n)) }

// SGE is a view over a scatter/gather element: address, length, L_Key.
type SGE []byte

func (s SGE) Addr() uint64   { return ne.Uint64(s[0:]) }
func (s SGE) Length() uint32 { return ne.Uint32(s[8:]) }
func (s SGE) LKey() uint32   { return ne.Uint32(s[12:]) }
func (s SGE) Set(addr uint64, length, lkey uint32) {
	ne.PutUint64(s[0:], addr)
	ne.PutUint32(s[8:], length)
	ne.PutUint32(s[12:], lkey)
}

// CQE is a view over a completion queue entry (the fields of ibv_wc).
type CQE []byte

func (c CQE) WRID() uint64        { return ne.Uint64(c[offWRID:]) }
func (c CQE) Status() uint8       { return c[offCQEStatus] }
func (c CQE) Opcode() uint8       { return c[offCQEOpcode] }
func (c CQE) SL() uint8           { return c[offCQESL] }
func (c CQE) DLIDPathBits() uint8 { return c[offCQEDLIDPath] }
func (c CQE) VendorErr() uint32   { return ne.Uint32(c[offCQEVendor:]) }
func (c CQE) ByteLen() uint32     { return ne.Uint32(c[offCQEByteLen:]) }
func (c CQE) Imm() uint32         { return ne.Uint32(c[offCQEImm:]) }
func (c CQE) QPNum() uint32       { return ne.Uint32(c[offCQEQPNum:]) }
func (c CQE) SrcQP() uint32       { return ne.Uint32(c[offCQESrcQP:]) }
func (c CQE) WCFlags() uint32     { return ne.Uint32(c[offCQEFlags:]) }
func (c CQE) PKeyIndex() uint16   { return ne.Uint16(c[offCQEPKeyIdx:]) }
func (c CQE) SLID() uint16        { return ne.Uint16(c[offCQESLID:]) }
