package verbsd

import (
	"testing"
	"time"
)

// TestPollManner: the manner changes only after spinVotes (or
// yieldVotes) answers in a row, and a single answer against it, then or
// later, changes nothing.
func TestPollManner(t *testing.T) {
	var m pollManner
	steps := []struct {
		spare bool
		spin  bool
	}{
		{true, false}, {true, false}, {true, true}, // spinVotes answers to start
		{false, true}, {true, true}, // a blip on a quiet host
		{false, true}, {false, true}, {false, false}, // a host that stays busy
		{true, false}, {false, false}, {true, false}, {true, false}, {true, true},
	}
	for i, s := range steps {
		m.vote(s.spare)
		if m.spin != s.spin {
			t.Fatalf("answer %d (spare %v): spin %v, want %v", i, s.spare, m.spin, s.spin)
		}
	}
	m.recount()
	m.vote(false)
	m.vote(false)
	if !m.spin {
		t.Fatal("answers before a recount counted after it")
	}
}

// TestContention: a late yield backs off for contendedFirst, each one
// after it for twice as long up to contendedBackoff, and a yield back in
// time starts over.
func TestContention(t *testing.T) {
	var c contention
	now := time.Second
	late := func() {
		t.Helper()
		c.yielded(now, now+contendedGap+1)
		now += contendedGap + 1
	}
	if c.yielded(now, now+contendedGap); c.backingOff(now + contendedGap) {
		t.Fatal("a yield of contendedGap backs off")
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 100, 100}
	for i, w := range want {
		late()
		w *= time.Millisecond
		if !c.backingOff(now+w-1) || c.backingOff(now+w) {
			t.Fatalf("late yield %d: backs off until %v after it, want %v", i, c.until-now, w)
		}
		now += w
	}
	c.yielded(now, now+time.Microsecond)
	late()
	if !c.backingOff(now+contendedFirst-1) || c.backingOff(now+contendedFirst) {
		t.Fatalf("after a yield in time: backs off %v, want %v", c.until-now, contendedFirst)
	}
}
