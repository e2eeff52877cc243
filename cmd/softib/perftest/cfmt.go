package perftest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Go's fmt agrees with C's printf for the plain conversions perftest uses
// (%-7d, %04x, %-7.2f of finite numbers), but not in two corners that show
// up in real perftest output, so these helpers reproduce glibc there.

// cAltHex formats v like C's "%#0<width>x": a nonzero value gets a "0x"
// prefix that counts towards the width and zeros go between prefix and
// digits; zero gets no prefix at all, so "%#04x" prints LID 0 as "0000".
// Go's %#x always prefixes, which is why BASIC_ADDR_FMT needs this.
func cAltHex(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	prefix := ""
	if v != 0 {
		prefix = "0x"
	}
	if pad := width - len(prefix) - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	return prefix + digits
}

// cFloat formats v like C's "%-<width>.<prec>f" (left) or
// "%<width>.<prec>f": finite values as Go does, infinities and NaNs with
// glibc's spellings "inf", "-inf", "nan" and "-nan" (the sign bit of a NaN
// is printed; x86's 0.0/0.0 yields a negative NaN), which perftest prints
// when a run measured no time.
func cFloat(v float64, width, prec int, left bool) string {
	var s string
	switch {
	case math.IsInf(v, 1):
		s = "inf"
	case math.IsInf(v, -1):
		s = "-inf"
	case math.IsNaN(v):
		s = "nan"
		if math.Signbit(v) {
			s = "-nan"
		}
	default:
		s = strconv.FormatFloat(v, 'f', prec, 64)
	}
	if left {
		return fmt.Sprintf("%-*s", width, s)
	}
	return fmt.Sprintf("%*s", width, s)
}
