package vhca

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
)

// keySpace hands out the 32-bit L_Keys and R_Keys of memory regions.
//
// A key is the n-th value of a keyed pseudo-random permutation of the
// 32-bit integers, n counting registrations. Because n only grows, a
// deregistered region's key never comes back (until 2^32 registrations);
// because the permutation is keyed by a secret drawn when the device is
// made, a peer that has seen some keys cannot guess another (IBA 1.4
// leaves the key's format to the HCA; rxe uses an index and an
// 8-bit random part, which does repeat). Every lookup compares all 32 bits.
//
// The permutation is a four-round Feistel network on two 16-bit halves
// whose round function is AES under the secret: Luby and Rackoff's
// construction of a pseudo-random permutation from a pseudo-random
// function.
type keySpace struct {
	block cipher.Block
	next  uint32
}

func newKeySpace(secret [16]byte) *keySpace {
	b, err := aes.NewCipher(secret[:])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return &keySpace{block: b}
}

// alloc returns the next key; ok is false once 2^32 keys have been used.
func (k *keySpace) alloc() (key uint32, ok bool) {
	n := k.next
	k.next++
	if k.next == 0 {
		return 0, false
	}
	return k.permute(n), true
}

func (k *keySpace) permute(n uint32) uint32 {
	l, r := uint16(n>>16), uint16(n)
	var in, out [16]byte
	for round := byte(0); round < 4; round++ {
		in[0] = round
		binary.BigEndian.PutUint16(in[1:], r)
		k.block.Encrypt(out[:], in[:])
		l, r = r, l^binary.BigEndian.Uint16(out[:])
	}
	return uint32(l)<<16 | uint32(r)
}
