package wire

import (
	"testing"
)

func TestFlowControl(t *testing.T) {
	var b [FlowControlLen]byte
	f := BuildFlowControl(b[:], FlowControlNormal, 3, 0xABC, 0x123)
	if f.Op() != FlowControlNormal || f.VL() != 3 || f.FCTBS() != 0xABC || f.FCCL() != 0x123 {
		t.Fatalf("fields: op %d vl %d fctbs %#x fccl %#x", f.Op(), f.VL(), f.FCTBS(), f.FCCL())
	}
	if b[0] != 0x0A || b[1] != 0xBC || b[2] != 0x31 || b[3] != 0x23 {
		t.Fatalf("layout % x", b[:4])
	}
	if _, err := CheckFlowControl(b[:]); err != nil {
		t.Fatal(err)
	}
	// Counts wrap at 12 bits; the operand and VL keep their nibbles.
	f = BuildFlowControl(b[:], FlowControlInit, 14, 0x1FFF, 0xF001)
	if f.Op() != FlowControlInit || f.VL() != 14 || f.FCTBS() != 0xFFF || f.FCCL() != 0x001 {
		t.Fatalf("masked fields: op %d vl %d fctbs %#x fccl %#x", f.Op(), f.VL(), f.FCTBS(), f.FCCL())
	}
	for i := range 4 {
		c := b
		c[i] ^= 0x10
		if _, err := CheckFlowControl(c[:]); err != ErrFlowControlCRC {
			t.Errorf("byte %d flipped: %v", i, err)
		}
	}
	if _, err := CheckFlowControl(b[:5]); err != ErrFlowControlLen {
		t.Error(err)
	}
	BuildFlowControl(b[:], 2, 0, 0, 0)
	if _, err := CheckFlowControl(b[:]); err != ErrFlowControlOp {
		t.Error(err)
	}
	BuildFlowControl(b[:], 0, 15, 0, 0)
	if _, err := CheckFlowControl(b[:]); err != ErrFlowControlVL15 {
		t.Error(err)
	}
	if Blocks(1) != 1 || Blocks(64) != 1 || Blocks(65) != 2 || Blocks(4222) != 66 {
		t.Error("Blocks")
	}
}

func FuzzFlowControl(f *testing.F) {
	var b [FlowControlLen]byte
	f.Add([]byte(BuildFlowControl(b[:], 0, 1, 10, 20)))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := CheckFlowControl(in)
		if err != nil {
			return
		}
		var out [FlowControlLen]byte
		q := BuildFlowControl(out[:], p.Op(), p.VL(), p.FCTBS(), p.FCCL())
		if string(q) != string(p) {
			t.Fatalf("round trip % x -> % x", []byte(p), []byte(q))
		}
	})
}
