package abi

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/softib/softib/vhca"
)

// TestPutWC: a completion written from a vhca.WC (verbsd's way) is the
// same CQE as the one written from its fields, and reads back as it,
// by the accessors and by WC (the client's way).
func TestPutWC(t *testing.T) {
	wc := vhca.WC{WRID: 0x0102030405060708, Status: vhca.WCRemAccessErr, Opcode: vhca.WCRecvRDMAWithImm,
		VendorErr: 0x11, ByteLen: 4096, Imm: 0xC0FFEE, QPNum: 0x123456, SrcQP: 0x654321,
		Flags: vhca.WCWithImm | vhca.WCWithGRH, PKeyIndex: 3, SLID: 0xBEEF, SL: 5, DLIDPath: 2}
	a, b := make(CQE, 64), make(CQE, 64)
	a.PutWC(&wc)
	b.Put(&CQEFields{WRID: wc.WRID, Status: uint8(wc.Status), Opcode: uint8(wc.Opcode), SL: wc.SL,
		DLIDPathBits: wc.DLIDPath, VendorErr: wc.VendorErr, ByteLen: wc.ByteLen, Imm: wc.Imm,
		QPNum: wc.QPNum, SrcQP: wc.SrcQP, WCFlags: uint32(wc.Flags), PKeyIndex: wc.PKeyIndex, SLID: wc.SLID})
	if !bytes.Equal(a, b) {
		t.Fatalf("PutWC %x, Put %x", a, b)
	}
	if a.WRID() != wc.WRID || a.ByteLen() != wc.ByteLen || a.Imm() != wc.Imm || a.SLID() != wc.SLID ||
		vhca.WCFlags(a.WCFlags()) != wc.Flags || a.Status() != uint8(wc.Status) || a.SL() != wc.SL {
		t.Fatalf("read back: WRID %x ByteLen %d Imm %x SLID %x", a.WRID(), a.ByteLen(), a.Imm(), a.SLID())
	}
	var back vhca.WC
	a.WC(&back)
	if back != wc {
		t.Fatalf("WC read back %+v, want %+v", back, wc)
	}
}

// TestCQELayout: the struct CQEs are written and read through puts each
// field where the accessors and the documentation have it.
func TestCQELayout(t *testing.T) {
	var l cqeLayout
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"WRID", unsafe.Offsetof(l.WRID), offWRID}, {"Status", unsafe.Offsetof(l.Status), offCQEStatus},
		{"Opcode", unsafe.Offsetof(l.Opcode), offCQEOpcode}, {"SL", unsafe.Offsetof(l.SL), offCQESL},
		{"DLIDPath", unsafe.Offsetof(l.DLIDPath), offCQEDLIDPath}, {"VendorErr", unsafe.Offsetof(l.VendorErr), offCQEVendor},
		{"ByteLen", unsafe.Offsetof(l.ByteLen), offCQEByteLen}, {"Imm", unsafe.Offsetof(l.Imm), offCQEImm},
		{"QPNum", unsafe.Offsetof(l.QPNum), offCQEQPNum}, {"SrcQP", unsafe.Offsetof(l.SrcQP), offCQESrcQP},
		{"Flags", unsafe.Offsetof(l.Flags), offCQEFlags}, {"PKeyIndex", unsafe.Offsetof(l.PKeyIndex), offCQEPKeyIdx},
		{"SLID", unsafe.Offsetof(l.SLID), offCQESLID},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, want %d", f.name, f.got, f.want)
		}
	}
	if s := unsafe.Sizeof(l); s > offCQESeq {
		t.Errorf("layout of %d bytes reaches the sequence word at %d", s, offCQESeq)
	}
}
