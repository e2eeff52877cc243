package vswitch

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestVCRCPatch checks the incremental VCRC against a full computation for
// random packets, lengths and header changes.
func TestVCRCPatch(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	seal := func(b []byte) {
		n := len(b) - 2
		binary.LittleEndian.PutUint16(b[n:], wire.VCRC(b[:n]))
	}
	for i := range 5000 {
		n := 4*(r.IntN(MaxPacketLen/4-4)+4) + 2 // 18..MaxPacketLen, 2 mod 4
		if i < 3 {
			n = []int{18, MaxPacketLen, 4096 + 2}[i]
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		seal(b)
		h := 1 + r.IntN(16)
		old := append([]byte(nil), b[:h]...)
		for j := range h {
			if r.IntN(2) == 0 {
				b[j] = byte(r.Uint32())
			}
		}
		want := append([]byte(nil), b...)
		seal(want)
		if r.IntN(2) == 0 {
			vcrcPatch(b, old)
		} else {
			// A change of byte 0 alone.
			copy(b[1:h], old[1:])
			copy(want, b)
			seal(want)
			vcrcPatchByte0(b, old[0])
		}
		if string(b) != string(want) {
			t.Fatalf("length %d, %d bytes changed: VCRC %#04x, want %#04x", n, h,
				binary.LittleEndian.Uint16(b[n-2:]), binary.LittleEndian.Uint16(want[n-2:]))
		}
	}
}
