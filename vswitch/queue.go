package vswitch

import "time"

// queue is the buffer of one (input port, VL): a ring of blocks holding
// whole packets in arrival order, and a ring of their descriptors.
type queue struct {
	in     int
	vl     uint8 // as received; 15 for the management queue
	buf    []byte
	blocks int // capacity in blocks
	used   int // blocks held
	next   int // block where the next packet starts
	slots  []slot
	head   int // slot of the head packet
	n      int // packets held

	since   time.Duration // when the head packet became the head
	pending portSet       // output ports the head packet still waits for
	npend   int
	freed   int // blocks freed since the last Freed
}

// slot describes a packet in a queue.
type slot struct {
	off, len int32
	blocks   int32
	out      int16 // unicast output port; -1 for multicast
	arrival  time.Duration
}

func (q *queue) init(in int, vl uint8, blocks int) {
	q.in, q.vl, q.blocks = in, vl, blocks
	// The tail past the ring takes the part of a packet that wraps
	// around, so that every packet is contiguous.
	q.buf = make([]byte, (blocks+min(blocks, maxPacketBlocks))*BlockSize)
	q.slots = make([]slot, blocks) // every packet takes a block at least
}

func blocksOf(n int) int { return (n + BlockSize - 1) / BlockSize }

// push copies pkt in as the tail packet, or reports that it does not fit.
func (q *queue) push(pkt []byte, now time.Duration, out int) (*slot, bool) {
	b := blocksOf(len(pkt))
	if q.used+b > q.blocks {
		return nil, false
	}
	off := q.next * BlockSize
	copy(q.buf[off:], pkt)
	i := q.head + q.n
	if i >= len(q.slots) {
		i -= len(q.slots)
	}
	sl := &q.slots[i]
	*sl = slot{off: int32(off), len: int32(len(pkt)), blocks: int32(b), out: int16(out), arrival: now}
	q.used += b
	q.n++
	q.next += b
	if q.next >= q.blocks {
		q.next -= q.blocks
	}
	return sl, true
}

// headSlot is the head packet's descriptor; the queue must not be empty.
func (q *queue) headSlot() *slot { return &q.slots[q.head] }

func (q *queue) bytes(sl *slot) []byte { return q.buf[sl.off : sl.off+sl.len] }

// pop removes the head packet and returns its blocks.
func (q *queue) pop() int {
	b := int(q.slots[q.head].blocks)
	q.used -= b
	q.n--
	q.head++
	if q.head == len(q.slots) {
		q.head = 0
	}
	if q.n == 0 {
		// Empty: start again at the ring's beginning, so that fewer
		// packets wrap.
		q.head, q.next = 0, 0
	}
	return b
}
