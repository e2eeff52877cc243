package wire

import "encoding/binary"

// The variant CRC (IBA 1.4 §7.8.2) protects a native IB packet on one link:
// CRC-16 with polynomial x^16+x^12+x^3+x+1 (0x100B), preset to ones,
// bit-reflected (so computed with 0x100B reversed, 0xD008), the result
// inverted, over everything from the first byte of the LRH through the
// ICRC as sent, stored least significant byte first. Every switch
// recomputes it, since the LRH's VL may change hop by hop.
//
// It is computed sixteen bytes per step with sixteen tables ("slicing by
// 16"): table k holds the CRC of a byte followed by k zero bytes. The
// steps depend on each other through the CRC, so the wider step halves
// the chain of table lookups per byte.
var vcrcTable = func() (t [16][256]uint16) {
	const poly = 0xD008
	for n := range t[0] {
		c := uint16(n)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ poly
			} else {
				c >>= 1
			}
		}
		t[0][n] = c
	}
	for n := range t[0] {
		c := t[0][n]
		for k := 1; k < 16; k++ {
			c = t[0][c&0xFF] ^ c>>8
			t[k][n] = c
		}
	}
	return t
}()

// VCRC returns the variant CRC of b (an IB packet from its LRH through its
// ICRC).
func VCRC(b []byte) uint16 {
	c := uint16(0xFFFF)
	t := &vcrcTable
	for len(b) >= 16 {
		w := binary.LittleEndian.Uint64(b) ^ uint64(c)
		v := binary.LittleEndian.Uint64(b[8:])
		c = t[15][byte(w)] ^ t[14][byte(w>>8)] ^ t[13][byte(w>>16)] ^ t[12][byte(w>>24)] ^
			t[11][byte(w>>32)] ^ t[10][byte(w>>40)] ^ t[9][byte(w>>48)] ^ t[8][byte(w>>56)] ^
			t[7][byte(v)] ^ t[6][byte(v>>8)] ^ t[5][byte(v>>16)] ^ t[4][byte(v>>24)] ^
			t[3][byte(v>>32)] ^ t[2][byte(v>>40)] ^ t[1][byte(v>>48)] ^ t[0][byte(v>>56)]
		b = b[16:]
	}
	for _, x := range b {
		c = t[0][byte(c)^x] ^ c>>8
	}
	return ^c
}
