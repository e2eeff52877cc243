// Package pipe is the in-memory link: two ends, each a bounded queue of
// frames towards the other, for two vHCAs in one process (verbsd's
// in-process pairs, tests). It loses, reorders and corrupts nothing.
package pipe

import (
	"sync/atomic"
)

// End is one end of a pipe. One goroutine drives an end's transmit side
// and one its receive side (they may be the same); the two ends may be
// driven by different goroutines.
type End struct {
	tx   *queue // frames this end sends
	rx   *queue // frames the other end sent
	peer *End
}

// New makes a pipe whose queues hold depth frames of up to size bytes
// each way. depth is rounded up to a power of two.
func New(depth, size int) (*End, *End) {
	n := 1
	for n < depth {
		n <<= 1
	}
	ab, ba := newQueue(n, size), newQueue(n, size)
	a := &End{tx: ab, rx: ba}
	b := &End{tx: ba, rx: ab}
	a.peer, b.peer = b, a
	return a, b
}

// queue is a single-producer single-consumer ring of frame buffers; the
// indices are published once per batch (Flush, the end of Recv).
type queue struct {
	frames [][]byte
	lens   []int
	segs   [][]byte // a segment's payload, by reference (nil: a whole frame)
	mask   uint32
	prod   atomic.Uint32
	_      [60]byte
	cons   atomic.Uint32
	_      [60]byte
	head   uint32 // producer's own index, published by Flush
	tail   uint32 // consumer's own index
}

func newQueue(n, size int) *queue {
	q := &queue{frames: make([][]byte, n), lens: make([]int, n), segs: make([][]byte, n), mask: uint32(n - 1)}
	for i := range q.frames {
		q.frames[i] = make([]byte, size)
	}
	return q
}

// TxBuf is the next free frame buffer, or nil when the queue is full.
func (e *End) TxBuf() []byte {
	q := e.tx
	if q.head-q.cons.Load() > q.mask {
		return nil
	}
	return q.frames[q.head&q.mask]
}

// Send queues the first n bytes of the last TxBuf.
func (e *End) Send(n int) { e.SendSegment(n, nil) }

// SendSegment queues the first n bytes of the last TxBuf as a segment's
// headers, with its payload passed by reference: the sender must keep the
// payload unchanged until the other end has received it.
func (e *End) SendSegment(n int, payload []byte) {
	q := e.tx
	q.lens[q.head&q.mask] = n
	q.segs[q.head&q.mask] = payload
	q.head++
}

// Flush makes the queued frames visible to the other end.
func (e *End) Flush() { e.tx.prod.Store(e.tx.head) }

// Recv hands up to max received frames (and segments' payloads) to fn.
func (e *End) Recv(max int, fn func(frame, segment []byte)) int {
	q := e.rx
	avail := q.prod.Load() - q.tail
	n := 0
	for ; n < max && uint32(n) < avail; n++ {
		i := (q.tail + uint32(n)) & q.mask
		fn(q.frames[i][:q.lens[i]], q.segs[i])
		q.segs[i] = nil
	}
	if n > 0 {
		// Not on an empty poll: the store is a full fence, and verbsd's
		// engine polls every pipe in every round.
		q.tail += uint32(n)
		q.cons.Store(q.tail)
	}
	return n
}

// Pending is how many frames wait to be received at this end.
func (e *End) Pending() int { return int(e.rx.prod.Load() - e.rx.tail) }
