package abi

import (
	"testing"
	"unsafe"

	"github.com/softib/softib/vhca"
)

// TestPutWC: a completion written from a vhca.WC (verbsd's way) reads
// back as it, by every accessor and by WC (the client's way), and
// leaves the sequence word alone.
func TestPutWC(t *testing.T) {
	wc := vhca.WC{WRID: 0x0102030405060708, Status: vhca.WCRemAccessErr, Opcode: vhca.WCRecvRDMAWithImm,
		VendorErr: 0x11, ByteLen: 4096, Imm: 0xC0FFEE, QPNum: 0x123456, SrcQP: 0x654321,
		Flags: vhca.WCWithImm | vhca.WCWithGRH, PKeyIndex: 3, SLID: 0xBEEF, SL: 5, DLIDPath: 2}
	a := make(CQE, CQESize)
	ne.PutUint32(a[offCQESeq:], 0xA5A5A5A5)
	a.PutWC(&wc)
	if a.WRID() != wc.WRID || a.Status() != uint8(wc.Status) || a.Opcode() != uint8(wc.Opcode) ||
		a.SL() != wc.SL || a.DLIDPathBits() != wc.DLIDPath || a.VendorErr() != wc.VendorErr ||
		a.ByteLen() != wc.ByteLen || a.Imm() != wc.Imm || a.QPNum() != wc.QPNum || a.SrcQP() != wc.SrcQP ||
		vhca.WCFlags(a.WCFlags()) != wc.Flags || a.PKeyIndex() != wc.PKeyIndex || a.SLID() != wc.SLID {
		t.Fatalf("accessors read back %x", []byte(a))
	}
	if seq := ne.Uint32(a[offCQESeq:]); seq != 0xA5A5A5A5 {
		t.Fatalf("sequence word %#x after PutWC", seq)
	}
	var back vhca.WC
	a.WC(&back)
	if back != wc {
		t.Fatalf("WC read back %+v, want %+v", back, wc)
	}
}

// fieldAt is a field's offset in a layout struct and where the ABI puts it.
type fieldAt struct {
	name      string
	got, want uintptr
}

func checkOffsets(t *testing.T, fields []fieldAt) {
	t.Helper()
	for _, f := range fields {
		if f.got != f.want {
			t.Errorf("%s at %d, want %d", f.name, f.got, f.want)
		}
	}
}

// TestCQELayout: vhca.WC, through which CQEs are written and read (in
// verbsd, by vhca itself: CQE.Entry), puts each field where the
// accessors and the documentation have it, and ends before the sequence
// word.
func TestCQELayout(t *testing.T) {
	var l vhca.WC
	checkOffsets(t, []fieldAt{
		{"WRID", unsafe.Offsetof(l.WRID), offWRID}, {"Status", unsafe.Offsetof(l.Status), offCQEStatus},
		{"Opcode", unsafe.Offsetof(l.Opcode), offCQEOpcode}, {"SL", unsafe.Offsetof(l.SL), offCQESL},
		{"DLIDPath", unsafe.Offsetof(l.DLIDPath), offCQEDLIDPath}, {"VendorErr", unsafe.Offsetof(l.VendorErr), offCQEVendor},
		{"ByteLen", unsafe.Offsetof(l.ByteLen), offCQEByteLen}, {"Imm", unsafe.Offsetof(l.Imm), offCQEImm},
		{"QPNum", unsafe.Offsetof(l.QPNum), offCQEQPNum}, {"SrcQP", unsafe.Offsetof(l.SrcQP), offCQESrcQP},
		{"Flags", unsafe.Offsetof(l.Flags), offCQEFlags}, {"PKeyIndex", unsafe.Offsetof(l.PKeyIndex), offCQEPKeyIdx},
		{"SLID", unsafe.Offsetof(l.SLID), offCQESLID},
	})
	if s := unsafe.Sizeof(l); s > offCQESeq {
		t.Errorf("layout of %d bytes reaches the sequence word at %d", s, offCQESeq)
	}
}

// TestSendWQELayout: SendWQEFields puts each field where the accessors
// and the documentation have it, and reads back what they write.
func TestSendWQELayout(t *testing.T) {
	var l SendWQEFields
	checkOffsets(t, []fieldAt{
		{"WRID", unsafe.Offsetof(l.WRID), offWRID}, {"Opcode", unsafe.Offsetof(l.Opcode), offSendOpcode},
		{"NumSGE", unsafe.Offsetof(l.NumSGE), offSendNumSGE}, {"Flags", unsafe.Offsetof(l.Flags), offSendFlags},
		{"Imm", unsafe.Offsetof(l.Imm), offSendImm}, {"RemoteAddr", unsafe.Offsetof(l.RemoteAddr), offRemoteAddr},
		{"RKey", unsafe.Offsetof(l.RKey), offRKey}, {"InlineLen", unsafe.Offsetof(l.InlineLen), offInlineLen},
		{"CompareAdd", unsafe.Offsetof(l.CompareAdd), offCompareAdd}, {"Swap", unsafe.Offsetof(l.Swap), offSwap},
		{"AH", unsafe.Offsetof(l.AH), offAH}, {"RemoteQPN", unsafe.Offsetof(l.RemoteQPN), offRemoteQPN},
		{"RemoteQKey", unsafe.Offsetof(l.RemoteQKey), offRemoteQKey},
	})
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
