package wire

import (
	"encoding/binary"
	"errors"
)

// FlowControl is a link-level flow control packet (IBA 1.4 §7.9.4), the
// one link packet: six bytes, never forwarded, sent by each end of a link
// for each data VL to say how many blocks it has sent on the VL (FCTBS)
// and up to which block count the other end may send to it (FCCL).
//
//	byte 0   Op (4 bits) | FCTBS bits 11..8
//	byte 1   FCTBS bits 7..0
//	byte 2   VL (4 bits) | FCCL bits 11..8
//	byte 3   FCCL bits 7..0
//	4..5     LPCRC: the VCRC's CRC-16 over bytes 0..3, stored as the VCRC is
//
// Block counts are of 64-byte blocks, modulo 4096 (12 bits).
type FlowControl []byte

// FlowControlLen is a flow control packet's length.
const FlowControlLen = 6

// Flow control packet operands (§7.9.4.1): Normal carries credits;
// Init is sent while a link comes up, and resets the receiver's count.
const (
	FlowControlNormal = 0
	FlowControlInit   = 1
)

// BlockMask is the modulus of FCTBS, FCCL and ABR: 12 bits.
const BlockMask = 0xFFF

func (f FlowControl) Op() uint8     { return f[0] >> 4 }
func (f FlowControl) FCTBS() uint16 { return binary.BigEndian.Uint16(f[0:]) & BlockMask }
func (f FlowControl) VL() uint8     { return f[2] >> 4 }
func (f FlowControl) FCCL() uint16  { return binary.BigEndian.Uint16(f[2:]) & BlockMask }
func (f FlowControl) LPCRC() uint16 { return binary.LittleEndian.Uint16(f[4:]) }

// BuildFlowControl writes a flow control packet into b (at least
// FlowControlLen bytes) and returns it.
func BuildFlowControl(b []byte, op, vl uint8, fctbs, fccl uint16) FlowControl {
	f := FlowControl(b[:FlowControlLen])
	binary.BigEndian.PutUint16(f[0:], uint16(op)<<12|fctbs&BlockMask)
	binary.BigEndian.PutUint16(f[2:], uint16(vl)<<12|fccl&BlockMask)
	binary.LittleEndian.PutUint16(f[4:], VCRC(f[:4]))
	return f
}

// Errors of a received link packet.
var (
	ErrFlowControlLen  = errors.New("flow control packet: not 6 bytes")
	ErrFlowControlCRC  = errors.New("flow control packet: bad LPCRC")
	ErrFlowControlOp   = errors.New("flow control packet: reserved operand")
	ErrFlowControlVL15 = errors.New("flow control packet: VL 15 is not flow controlled")
)

// CheckFlowControl checks a received link packet: its length, LPCRC,
// operand, and that it is not about VL15.
func CheckFlowControl(b []byte) (FlowControl, error) {
	if len(b) != FlowControlLen {
		return nil, ErrFlowControlLen
	}
	f := FlowControl(b)
	switch {
	case VCRC(f[:4]) != f.LPCRC():
		return nil, ErrFlowControlCRC
	case f.Op() > FlowControlInit:
		return nil, ErrFlowControlOp
	case f.VL() == 15:
		return nil, ErrFlowControlVL15
	}
	return f, nil
}

// Blocks is the number of 64-byte blocks a packet of n bytes takes of a
// receive buffer's credits (§7.9.2: rounded up).
func Blocks(n int) int { return (n + 63) / 64 }
