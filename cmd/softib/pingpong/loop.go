package pingpong

import "fmt"

// The wr_ids every receive and every send carry. They double as the bits of
// Loop's pending mask, which is why they are 1 and 2.
const (
	RecvWRID = 1
	SendWRID = 2
)

// Loop is the bookkeeping of the C programs' ping-pong loop (main()'s
// while loop, rc_pingpong's parse_single_wc), without the verbs: the caller
// polls the CQ and posts work requests, Loop decides which. It keeps scnt
// and rcnt (completed sends and receives), routs (receives still posted)
// and pending (the wr_ids the next send waits for).
type Loop struct {
	iters, rxDepth int
	scnt, rcnt     int
	routs          int
	pending        int
}

// Step is what a completion asks the caller to do, in this order: post
// Repost more receives (all with wr_id RecvWRID; posting fewer is fatal, as
// "Couldn't post receive" is in C), then, if Send, post one send with wr_id
// SendWRID.
type Step struct {
	Repost int
	Send   bool
}

// NewLoop returns the loop's state at the moment the C programs start the
// clock: rxDepth receives pre-posted and, on the client, the first send
// already posted (the client must post it before calling Complete).
func NewLoop(iters, rxDepth uint32, client bool) *Loop {
	l := &Loop{iters: int(iters), rxDepth: int(rxDepth), routs: int(rxDepth), pending: RecvWRID}
	if client {
		l.pending |= SendWRID
	}
	return l
}

// Complete accounts for one successful completion with the given wr_id.
// Completions with an error status end the C programs before they get
// here ("Failed status %s (%d) for wr_id %d"). Completions must be fed in
// CQ order.
func (l *Loop) Complete(wrID uint64) (Step, error) {
	var st Step
	switch wrID {
	case SendWRID:
		l.scnt++
	case RecvWRID:
		// Refill only when the receive queue is nearly empty, in one batch.
		if l.routs--; l.routs <= 1 {
			st.Repost = l.rxDepth - l.routs
			l.routs = l.rxDepth
		}
		l.rcnt++
	default:
		return Step{}, fmt.Errorf("pingpong: completion for unknown wr_id %d", int(wrID))
	}
	// The next message goes out once the previous send has completed and
	// the peer's answer has arrived.
	l.pending &^= int(wrID)
	if l.scnt < l.iters && l.pending == 0 {
		st.Send = true
		l.pending = RecvWRID | SendWRID
	}
	return st, nil
}

// Finished reports whether both scnt and rcnt have reached iters, the
// C loop's exit condition.
func (l *Loop) Finished() bool { return l.rcnt >= l.iters && l.scnt >= l.iters }

// Counts returns scnt and rcnt: completed sends and receives so far.
func (l *Loop) Counts() (sent, received int) { return l.scnt, l.rcnt }
