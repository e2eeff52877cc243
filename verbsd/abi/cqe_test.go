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

// TestSendWQELayout: SendWQEFields puts each field where the accessors
// and the documentation have it, and reads back what they write.
func TestSendWQELayout(t *testing.T) {
	var l SendWQEFields
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"WRID", unsafe.Offsetof(l.WRID), offWRID}, {"Opcode", unsafe.Offsetof(l.Opcode), offSendOpcode},
		{"NumSGE", unsafe.Offsetof(l.NumSGE), offSendNumSGE}, {"Flags", unsafe.Offsetof(l.Flags), offSendFlags},
		{"Imm", unsafe.Offsetof(l.Imm), offSendImm}, {"RemoteAddr", unsafe.Offsetof(l.RemoteAddr), offRemoteAddr},
		{"RKey", unsafe.Offsetof(l.RKey), offRKey}, {"InlineLen", unsafe.Offsetof(l.InlineLen), offInlineLen},
		{"CompareAdd", unsafe.Offsetof(l.CompareAdd), offCompareAdd}, {"Swap", unsafe.Offsetof(l.Swap), offSwap},
		{"AH", unsafe.Offsetof(l.AH), offAH}, {"RemoteQPN", unsafe.Offsetof(l.RemoteQPN), offRemoteQPN},
		{"RemoteQKey", unsafe.Offsetof(l.RemoteQKey), offRemoteQKey},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, want %d", f.name, f.got, f.want)
		}
	}
	if o, s := unsafe.Offsetof(l.seq), unsafe.Sizeof(l); o != offSendSeq || s != SendWQEHeader {
		t.Errorf("sequence word at %d, want %d; %d bytes, want %d", o, offSendSeq, s, SendWQEHeader)
	}
	w := make(SendWQE, SendWQEHeader)
	f := w.Fields()
	f.WRID, f.Opcode, f.NumSGE, f.Flags, f.Imm, f.RemoteAddr = 1<<60, 4, 3, 0x102, 5, 6<<40
	f.RKey, f.InlineLen, f.CompareAdd, f.Swap, f.AH, f.RemoteQPN, f.RemoteQKey = 7, 8, 9<<50, 10, 11, 12, 13
	if w.WRID() != f.WRID || w.Opcode() != f.Opcode || w.NumSGE() != 3 || w.Flags() != f.Flags || w.Imm() != f.Imm ||
		w.RemoteAddr() != f.RemoteAddr || w.RKey() != f.RKey || w.InlineLen() != 8 || w.CompareAdd() != f.CompareAdd ||
		w.Swap() != f.Swap || w.AH() != f.AH || w.RemoteQPN() != f.RemoteQPN || w.RemoteQKey() != f.RemoteQKey {
		t.Errorf("accessors read %x", []byte(w))
	}
}
