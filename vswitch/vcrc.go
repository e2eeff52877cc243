package vswitch

import "encoding/binary"

// The VCRC (wire.VCRC, IBA 1.4 §7.8.2) is a CRC: apart from its preset and
// final inversion, which cancel out between two packets of the same
// length, it is linear. So when a hop changes a few header bytes, the new
// VCRC is the old one XOR the raw CRC (no preset, no inversion) of the
// change: the XOR of old and new header bytes, followed by zeros to the
// end of the packet. Feeding the zeros one at a time would cost as much as
// recomputing; vcrcZeros skips 2^j zero bytes in two table lookups, so the
// patch costs a few dozen lookups whatever the packet's length, where
// recomputing a 4 KiB packet's VCRC costs thousands. Input has verified the
// VCRC a packet arrived with; the switch keeps it valid by patching.

// vcrcTable is the byte-wise table of the VCRC polynomial (x^16+x^12+x^3+x+1,
// reflected: 0xD008), the one wire.VCRC uses.
var vcrcTable = func() (t [256]uint16) {
	for n := range t {
		c := uint16(n)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xD008
			} else {
				c >>= 1
			}
		}
		t[n] = c
	}
	return t
}()

// vcrcZeros[j] advances a raw CRC state over 2^j zero bytes: the new state
// is vcrcZeros[j][0][low byte] ^ vcrcZeros[j][1][high byte]. 2^13 bytes is
// more than any packet.
var vcrcZeros = func() (z [13][2][256]uint16) {
	for b := range 256 {
		z[0][0][b] = vcrcTable[b]
		z[0][1][b] = uint16(b)
	}
	for j := 1; j < len(z); j++ {
		for h := range 2 {
			for b := range 256 {
				c := z[j-1][h][b]
				z[j][h][b] = z[j-1][0][c&0xFF] ^ z[j-1][1][c>>8]
			}
		}
	}
	return z
}()

// vcrcSkip advances raw CRC state c over k zero bytes.
func vcrcSkip(c uint16, k int) uint16 {
	z := &vcrcZeros
	for j := 0; k != 0; j++ {
		if k&1 != 0 {
			c = z[j][0][c&0xFF] ^ z[j][1][c>>8]
		}
		k >>= 1
	}
	return c
}

// vcrcPatch updates the VCRC of pkt (LRH through VCRC) whose first
// len(old) bytes were old when its VCRC was computed.
func vcrcPatch(pkt, old []byte) {
	n := len(pkt) - 2
	var c uint16
	for i, o := range old {
		c = vcrcTable[byte(c)^o^pkt[i]] ^ c>>8
	}
	c = vcrcSkip(c, n-len(old))
	binary.LittleEndian.PutUint16(pkt[n:], binary.LittleEndian.Uint16(pkt[n:])^c)
}

// vcrcPatchByte0 is vcrcPatch for a change of the first byte only (the
// LRH's VL).
func vcrcPatchByte0(pkt []byte, old byte) {
	n := len(pkt) - 2
	c := vcrcSkip(vcrcTable[old^pkt[0]], n-1)
	binary.LittleEndian.PutUint16(pkt[n:], binary.LittleEndian.Uint16(pkt[n:])^c)
}
