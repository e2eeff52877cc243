package abi

import (
	"bytes"
	"testing"

	"github.com/softib/softib/vhca"
)

// TestPutWC: a completion written from a vhca.WC (verbsd's way) is the
// same CQE as the one written from its fields, and reads back as it.
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
}
