package verbsd

import (
	"testing"
	"time"
)

// TestClock: the engine's clock, read in a tight loop for 30 ms and
// through its anchors (each millisecond), never goes back and stays
// within 20 µs of the monotonic clock; on a host whose clocksource is
// the TSC it reads the TSC after the first anchor. Without the TSC it
// is the monotonic clock itself.
func TestClock(t *testing.T) {
	for _, tsc := range []bool{false, true} {
		if tsc && !(haveTSC && tscIsClocksource()) {
			t.Log("no TSC clocksource here: only the monotonic clock is tested")
			continue
		}
		start := time.Now()
		c := &clock{start: start, tsc: tsc}
		c.anchor(time.Since(start))
		var last, worst time.Duration
		reads := 0
		for time.Since(start) < 30*time.Millisecond {
			before := time.Since(start)
			d := c.now()
			after := time.Since(start)
			reads++
			if d < last {
				t.Fatalf("tsc %v: the clock went back from %v to %v", tsc, last, d)
			}
			last = d
			// The clock's time against the monotonic clock's, read
			// just before and after it.
			if off := max(before-d, d-after); off > worst {
				worst = off
			}
		}
		if worst > 20*time.Microsecond {
			t.Errorf("tsc %v: %v off the monotonic clock at worst (%d reads)", tsc, worst, reads)
		}
		if tsc != (c.mult != 0) {
			t.Errorf("tsc %v: rate measured %v", tsc, c.mult != 0)
		}
		t.Logf("tsc %v: %d reads, at worst %v off the monotonic clock", tsc, reads, worst)
	}
}

// BenchmarkClock: a reading of the engine's clock, against time.Since.
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	b.Run("engine", func(b *testing.B) {
		c := newClock(start)
		for range b.N {
			c.now()
		}
	})
	b.Run("time.Since", func(b *testing.B) {
		for range b.N {
			time.Since(start)
		}
	})
}
