package vhca

import "github.com/softib/softib/vhca/wire"

// PSNs are 24-bit counters that wrap (IBA 1.4 §9.7.1): comparisons are
// modular, over a window of half the space either way.

// psnDiff is a-b as a signed distance in (-2^23, 2^23].
func psnDiff(a, b uint32) int32 {
	return int32((a-b)&wire.MaxPSN<<8) >> 8
}

func psnAdd(a uint32, n uint32) uint32 { return (a + n) & wire.MaxPSN }

// Timers of IBA 1.4 §9.7.6.1.3 (local ACK timeout) and table 45 (RNR NAK
// timer field).

// ackTimeout is the local ACK timeout for a QP's Timeout attribute: 4.096
// µs × 2^t; 0 means the timer is off.
func ackTimeout(t uint8) Time {
	if t == 0 {
		return 0
	}
	return Time(4096) << t
}

// rnrTimerNS is table 45: the RNR NAK timer field's meaning, in
// nanoseconds (code 0 is 655.36 ms).
var rnrTimerNS = [32]Time{
	655360000, 10000, 20000, 30000, 40000, 60000, 80000, 120000,
	160000, 240000, 320000, 480000, 640000, 960000, 1280000, 1920000,
	2560000, 3840000, 5120000, 7680000, 10240000, 15360000, 20480000, 30720000,
	40960000, 61440000, 81920000, 122880000, 163840000, 245760000, 327680000, 491520000,
}
