package verbsd

import (
	"bytes"
	"math/bits"
	"os"
	"time"
)

// clock is the engine's time, since start. Reading the monotonic clock
// (time.Since: the vDSO's clock_gettime) costs about 25 ns here, once
// in every round of the engine, where a message's whole round trip
// through verbsd takes some 300 ns. Where the kernel's clocksource is
// the TSC (invariant, and checked by the kernel to agree across CPUs),
// the clock reads the TSC instead (about 10 ns) and converts its ticks
// at the rate measured between two readings of the monotonic clock,
// taken again every anchorEvery: the time it gives stays within
// microseconds of the monotonic clock's, and never goes back.
type clock struct {
	start time.Time
	tsc   bool          // the TSC may be read
	base  time.Duration // the monotonic clock's time at the last anchor
	tsc0  uint64        // the TSC then
	mult  uint64        // nanoseconds per tick, 32.32 fixed point; 0: not measured yet
	next  time.Duration // the next anchor
	last  time.Duration // the last time given
}

// anchorEvery: how often the clock reads the monotonic clock again.
const anchorEvery = time.Millisecond

func newClock(start time.Time) *clock {
	c := &clock{start: start, tsc: haveTSC && tscIsClocksource()}
	c.anchor(time.Since(start))
	return c
}

// now is the time since start.
func (c *clock) now() time.Duration {
	if c.mult == 0 {
		d := time.Since(c.start)
		if c.tsc && d >= c.next {
			c.anchor(d)
		}
		return c.monotonic(d)
	}
	hi, lo := bits.Mul64(rdtsc()-c.tsc0, c.mult)
	d := c.base + time.Duration(hi<<32|lo>>32)
	// Past the next anchor (or so far past, after a long sleep, that
	// the product overflows): the monotonic clock's time.
	if d >= c.next || hi >= 1<<31 {
		d = time.Since(c.start)
		c.anchor(d)
	}
	return c.monotonic(d)
}

// monotonic keeps the times given from going back where the rate
// measured changes at an anchor.
func (c *clock) monotonic(d time.Duration) time.Duration {
	if d < c.last {
		return c.last
	}
	c.last = d
	return d
}

// anchor takes the monotonic clock's reading d and the TSC's as the new
// reference, and the rate between them and the last reference.
func (c *clock) anchor(d time.Duration) {
	if !c.tsc {
		return
	}
	t := rdtsc()
	if c.tsc0 != 0 && t > c.tsc0 && d > c.base {
		c.mult = uint64(d-c.base) << 32 / (t - c.tsc0)
	}
	c.base, c.tsc0, c.next = d, t, d+anchorEvery
}

// tscIsClocksource reports whether the kernel keeps time with the TSC:
// then it found the TSC invariant and in step across CPUs.
func tscIsClocksource() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(bytes.TrimSpace(b)) == "tsc"
}
