package abi

import "unsafe"

// cqeLayout is a CQE's fixed fields in their order and at their offsets
// (off* in wqe.go, TestCQELayout), in host byte order: a completion is
// written and read through it in one run of stores or loads, with one
// bounds check, where each accessor checks its own. Both ends of every
// completion are hot (verbsd writes two per message, the client reads
// them while the other side waits).
type cqeLayout struct {
	WRID                         uint64
	Status, Opcode, SL, DLIDPath uint8
	VendorErr, ByteLen, Imm      uint32
	QPNum, SrcQP, Flags          uint32
	PKeyIndex, SLID              uint16
}

// fields is the CQE's fixed part. A CQE is a ring entry: 8-byte aligned
// (RingHeaderSize and CQESize are multiples of 8 from an aligned ring).
func (c CQE) fields() *cqeLayout {
	_ = c[unsafe.Sizeof(cqeLayout{})-1]
	return (*cqeLayout)(unsafe.Pointer(&c[0]))
}
