package pingpong

import (
	"fmt"
	"strings"
)

// FormatGID formats a GID as the C programs print it, with glibc's
// inet_ntop(AF_INET6). Go's netip formatting differs for IPv4-compatible
// addresses (glibc prints ::a00:1 as "::10.0.0.1"), so glibc's rules are
// followed here rather than relying on net/netip:
//
//   - the longest run of two or more zero 16-bit words (the first one on a
//     tie) becomes "::";
//   - if that run starts the address and is six words long, or five words
//     long and followed by 0xffff, the last four bytes are printed as a
//     dotted IPv4 address (::a.b.c.d and ::ffff:a.b.c.d);
//   - words are lower-case hex without leading zeros.
func FormatGID(gid [16]byte) string {
	var words [8]uint16
	for i := range words {
		words[i] = uint16(gid[2*i])<<8 | uint16(gid[2*i+1])
	}
	base, n := longestZeroRun(words)

	var b strings.Builder
	for i := 0; i < len(words); i++ {
		if base >= 0 && i >= base && i < base+n {
			if i == base {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && base == 0 && (n == 6 || n == 5 && words[5] == 0xffff) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", gid[12], gid[13], gid[14], gid[15])
			return b.String()
		}
		fmt.Fprintf(&b, "%x", words[i])
	}
	if base >= 0 && base+n == len(words) {
		b.WriteByte(':')
	}
	return b.String()
}

// longestZeroRun returns the start and length of the first longest run of
// zero words, or -1 if there is no run of at least two.
func longestZeroRun(words [8]uint16) (base, n int) {
	base = -1
	for i := 0; i < len(words); {
		if words[i] != 0 {
			i++
			continue
		}
		j := i
		for j < len(words) && words[j] == 0 {
			j++
		}
		if j-i > n {
			base, n = i, j-i
		}
		i = j
	}
	if n < 2 {
		return -1, 0
	}
	return base, n
}
