package verbsd

import "time"

// How a polling engine waits between rounds that find nothing: it spins
// with a core to itself, yields on a host with fewer cores than busy
// threads, and sleeps on its doorbell between rounds while a thread that
// never yields shares its core (run's comment tells why each).

// coresEvery: how often a polling engine asks whether it has a core to
// itself (a microsecond's pread); spinVotes and yieldVotes: how many
// answers in a row change its manner (pollManner).
const (
	coresEvery = time.Millisecond
	spinVotes  = 3
	yieldVotes = 3
)

// pollManner is a polling engine's manner, spinning or yielding, as the
// answers of cores.toSpare decide it: spinVotes answers in a row that a
// core is to spare make it spin, yieldVotes in a row that none is make
// it yield. Either way, one answer alone changes nothing. The running
// count is read at an instant: a busy host's dips for an instant must
// not start a spin, and a quiet host's blips (a kernel worker, a
// runtime's monitor thread, that happen to run as the count is read)
// must not stop one, each of which cost milliseconds of yields (about a
// microsecond each, on the path of every message that comes during
// one). A host that stays busy is yielded to within yieldVotes answers.
type pollManner struct {
	votes int // answers in a row: > 0 that a core is to spare, < 0 that none is
	spin  bool
}

// vote takes one answer of cores.toSpare.
func (m *pollManner) vote(spare bool) {
	if spare {
		m.votes = max(m.votes, 0) + 1
	} else {
		m.votes = min(m.votes, 0) - 1
	}
	switch {
	case m.votes >= spinVotes:
		m.spin = true
	case m.votes <= -yieldVotes:
		m.spin = false
	}
}

// recount forgets the answers so far, keeping the manner: after a sleep,
// the threads around may have changed, and new answers decide.
func (m *pollManner) recount() { m.votes = 0 }

// contendedGap: a yield this long means the engine was taken off its CPU
// for another thread's time slice. contendedFirst and contendedBackoff:
// the first and the longest time it then sleeps between rounds instead
// of polling.
const (
	contendedGap     = 200 * time.Microsecond
	contendedFirst   = time.Millisecond
	contendedBackoff = 100 * time.Millisecond
)

// contention is the engine's backoff from a core it shares with a
// thread that never yields: each yield it comes back from late sends it
// to sleep between rounds for a while, twice as long as the last time,
// from contendedFirst up to contendedBackoff; a yield back in time
// starts over. One late yield alone (verbsd's own control plane, or a
// client's setup, which ran on the engine's CPU) costs a millisecond of
// sleeping between rounds, not contendedBackoff's hundred: that is, on a
// quiet host, ten thousand messages that would each wait for the
// doorbell.
type contention struct {
	until time.Duration // sleeps between rounds until then
	next  time.Duration // the length of the next backoff; 0: contendedFirst
}

// yielded records a yield from start to end.
func (c *contention) yielded(start, end time.Duration) {
	if end-start <= contendedGap {
		c.next = 0
		return
	}
	if c.next == 0 {
		c.next = contendedFirst
	}
	c.until = end + c.next
	c.next = min(2*c.next, contendedBackoff)
}

// backingOff reports whether the engine sleeps between rounds at now.
func (c *contention) backingOff(now time.Duration) bool { return now < c.until }
