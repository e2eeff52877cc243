package abi

import "unsafe"

// SendWQEFields is a send WQE's fixed part in its order and at its
// offsets (off* in wqe.go, TestSendWQELayout), in host byte order: the
// client writes a WQE through it, verbsd reads its copy through it, in
// one run of stores or loads where each accessor checks its own bounds.
// Assign its fields one by one, never the whole struct: its last word
// is the entry's sequence word, which the Ring alone stamps.
type SendWQEFields struct {
	WRID             uint64
	Opcode, NumSGE   uint8
	Flags            uint16
	Imm              uint32
	RemoteAddr       uint64
	RKey, InlineLen  uint32
	CompareAdd, Swap uint64
	AH, RemoteQPN    uint32
	RemoteQKey       uint32
	seq              uint32 // the ring's (ring.go)
}

// Fields is the WQE's fixed part, in place. A WQE is a ring entry:
// 8-byte aligned.
func (w SendWQE) Fields() *SendWQEFields {
	_ = w[unsafe.Sizeof(SendWQEFields{})-1]
	return (*SendWQEFields)(unsafe.Pointer(&w[0]))
}
