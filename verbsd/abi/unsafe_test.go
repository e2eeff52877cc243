package abi

import "unsafe"

// unsafeBytes views 8-byte-aligned memory as bytes, as an mmap'd ring is.
func unsafeBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}

func alignedCopy(b []byte) []byte {
	out := unsafeBytes(make([]uint64, (len(b)+7)/8))
	copy(out, b)
	return out
}
