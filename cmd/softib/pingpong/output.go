package pingpong

import (
	"fmt"
	"math"
	"time"
)

// The lines the C programs print on stdout, each returned with its newline
// so that writing the strings reproduces the C output byte for byte.

// LocalAddressLine is the line main() prints before the exchange. ud's
// format has a colon before "GID" where rc and uc have a comma; that quirk
// of ud_pingpong.c is kept.
func LocalAddressLine(t Transport, d Dest) string {
	sep := ","
	if t == UD {
		sep = ":"
	}
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
		d.LID, d.QPN, d.PSN, sep, FormatGID(d.GID))
}

// RemoteAddressLine is the line main() prints after the exchange, the same
// in all three programs.
func RemoteAddressLine(d Dest) string {
	return fmt.Sprintf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// ResultLines is the throughput and latency report printed after the loop:
//
//	%lld bytes in %.2f seconds = %.2f Mbit/sec
//	%d iters in %.2f seconds = %.2f usec/iter
//
// elapsed is the loop's duration, truncated to whole microseconds as
// gettimeofday gives them. C keeps that count in a float, so it is rounded
// to float32 here too, and usec/iter is a single-precision division; the
// other quotients are double. Infinities and NaNs (a zero elapsed time or
// zero iterations) print as glibc prints them.
func ResultLines(size, iters uint32, elapsed time.Duration) string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	secs := float64(usec) / 1000000
	return fmt.Sprintf("%d bytes in %s seconds = %s Mbit/sec\n"+
		"%d iters in %s seconds = %s usec/iter\n",
		bytes, cFloat(secs, 2), cFloat(float64(bytes)*8/float64(usec), 2),
		int32(iters), cFloat(secs, 2), cFloat(float64(usec/float32(iters)), 2))
}

// TimestampLines is what rc_pingpong -t adds after ResultLines when at
// least one pair of receive completions had timestamps: the largest,
// smallest and total clock-cycle gaps between consecutive receive
// completions and the number n of gaps.
func TimestampLines(maxDelta, minDelta, totalDelta uint64, n uint32) string {
	return fmt.Sprintf("Max receive completion clock cycles = %d\n"+
		"Min receive completion clock cycles = %d\n"+
		"Average receive completion clock cycles = %s\n",
		maxDelta, minDelta, cFloat(float64(totalDelta)/float64(n), 6))
}

// InvalidPageLine is what the server prints, with -c, for each page whose
// first payload byte did not arrive as the client set it.
func InvalidPageLine(page int) string {
	return fmt.Sprintf("invalid data in page %d\n", page)
}

// cFloat formats x as glibc's printf("%.*f") does. Finite values print the
// same in Go and C (both round the exact binary value correctly); glibc
// spells the others inf, -inf, nan and -nan, keeping a NaN's sign bit.
func cFloat(x float64, prec int) string {
	switch {
	case math.IsNaN(x) && math.Signbit(x):
		return "-nan"
	case math.IsNaN(x):
		return "nan"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	}
	return fmt.Sprintf("%.*f", prec, x)
}
