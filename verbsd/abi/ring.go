package abi

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Ring layout constants (see the package documentation).
const (
	RingMagic      = 0x52494E47
	RingVersion    = 2
	RingHeaderSize = 256
	offMagic       = 0
	offVersion     = 4
	offKind        = 6
	offEntrySize   = 8
	offEntries     = 12
	offProducer    = 64
	offConsumer    = 128
	offFlags       = 192
	offEvents      = 68  // CQ: completion events raised, written by the producer
	offArm         = 196 // CQ: arm requests, written by the consumer
	FlagAsleep     = 1
	MaxRingEntries = 1 << 20
	MaxRingEntrySz = 1 << 16
)

// Kind is what a ring carries.
type Kind uint16

const (
	KindSQ  Kind = 1
	KindRQ  Kind = 2
	KindSRQ Kind = 3
	KindCQ  Kind = 4
)

// SeqOffset is where in an entry of a ring of kind k its sequence word
// lies: a word of the entry's fixed part that no field uses.
func SeqOffset(k Kind) int {
	switch k {
	case KindSQ:
		return offSendSeq
	case KindRQ, KindSRQ:
		return offRecvSeq
	default:
		return offCQESeq
	}
}

// ErrRingCorrupt says the other side put an impossible index into a ring.
var ErrRingCorrupt = errors.New("abi: ring index out of range: the other side corrupted the ring")

// RingSize is the number of bytes a ring of n entries of size bytes takes.
func RingSize(n, size int) int { return RingHeaderSize + n*size }

// Ring is one side's handle on a ring in shared memory. A Ring is used by
// one goroutine; the other side of the ring is another goroutine or
// another process.
type Ring struct {
	mem       []byte
	entries   uint32
	entrySize int
	seq       int // the sequence word's offset in an entry
	prod      *uint32
	cons      *uint32
	flags     *uint32
	events    *uint32
	arm       *uint32
	// This side's own index (the producer's or the consumer's): kept
	// here, never read back from shared memory.
	local uint32
	// The producer's last reading of the consumer's index (Free).
	seenCons uint32
	// The consumer's next entry's sequence word (Ready).
	next *uint32
}

// NewRing lays a ring out in mem (verbsd's side, which creates it). mem
// must be 8-byte aligned (an mmap'd region is page aligned) and its
// entries zero (a new memfd's are): a zero sequence word publishes no
// entry.
func NewRing(mem []byte, kind Kind, entries, entrySize int) (*Ring, error) {
	if entries < 1 || entries > MaxRingEntries || entries&(entries-1) != 0 {
		return nil, fmt.Errorf("abi: %d ring entries: want a power of two up to %d", entries, MaxRingEntries)
	}
	if entrySize < 8 || entrySize > MaxRingEntrySz || entrySize%8 != 0 {
		return nil, fmt.Errorf("abi: ring entry of %d bytes: want a multiple of 8 up to %d", entrySize, MaxRingEntrySz)
	}
	if entrySize < SeqOffset(kind)+4 {
		return nil, fmt.Errorf("abi: ring entry of %d bytes: kind %d needs %d", entrySize, kind, SeqOffset(kind)+4)
	}
	if len(mem) < RingSize(entries, entrySize) {
		return nil, fmt.Errorf("abi: %d bytes for a ring that needs %d", len(mem), RingSize(entries, entrySize))
	}
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, errors.New("abi: ring memory not 8-byte aligned")
	}
	// Not the entries: clearing them would make the kernel allocate
	// every page of a large queue at once. (Index 2^32-1, whose word
	// would be 0, is reached only after the slot's earlier laps.)
	clear(mem[:RingHeaderSize])
	r := attach(mem, kind, entries, entrySize)
	put32(mem[offMagic:], RingMagic)
	put16(mem[offVersion:], RingVersion)
	put16(mem[offKind:], uint16(kind))
	put32(mem[offEntrySize:], uint32(entrySize))
	put32(mem[offEntries:], uint32(entries))
	return r, nil
}

// OpenRing attaches to a ring another side laid out (the client's side),
// checking its header against what it expects.
func OpenRing(mem []byte, kind Kind) (*Ring, error) {
	if len(mem) < RingHeaderSize || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, errors.New("abi: ring memory too short or misaligned")
	}
	if get32(mem[offMagic:]) != RingMagic || get16(mem[offVersion:]) != RingVersion {
		return nil, fmt.Errorf("abi: not a ring of layout version %d", RingVersion)
	}
	if k := Kind(get16(mem[offKind:])); k != kind {
		return nil, fmt.Errorf("abi: ring of kind %d, want %d", k, kind)
	}
	entries, size := int(get32(mem[offEntries:])), int(get32(mem[offEntrySize:]))
	if entries < 1 || entries > MaxRingEntries || entries&(entries-1) != 0 ||
		size < SeqOffset(kind)+4 || size > MaxRingEntrySz || size%8 != 0 || len(mem) < RingSize(entries, size) {
		return nil, errors.New("abi: ring header out of range")
	}
	return attach(mem, kind, entries, size), nil
}

func attach(mem []byte, kind Kind, entries, size int) *Ring {
	r := &Ring{
		mem:       mem[:RingSize(entries, size)],
		entries:   uint32(entries),
		entrySize: size,
		seq:       SeqOffset(kind),
		prod:      (*uint32)(unsafe.Pointer(&mem[offProducer])),
		cons:      (*uint32)(unsafe.Pointer(&mem[offConsumer])),
		flags:     (*uint32)(unsafe.Pointer(&mem[offFlags])),
		events:    (*uint32)(unsafe.Pointer(&mem[offEvents])),
		arm:       (*uint32)(unsafe.Pointer(&mem[offArm])),
	}
	r.next = r.seqWord(0)
	return r
}

// Entries is the ring's capacity; EntrySize the size of one entry.
func (r *Ring) Entries() int   { return int(r.entries) }
func (r *Ring) EntrySize() int { return r.entrySize }

func (r *Ring) entry(i uint32) []byte {
	off := RingHeaderSize + int(i&(r.entries-1))*r.entrySize
	return r.mem[off : off+r.entrySize : off+r.entrySize]
}

// seqWord is the sequence word of the entry at index i: i+1 once the
// entry is published.
func (r *Ring) seqWord(i uint32) *uint32 {
	off := RingHeaderSize + int(i&(r.entries-1))*r.entrySize + r.seq
	return (*uint32)(unsafe.Pointer(&r.mem[off]))
}

// stamp writes the sequence words of the next n entries, each after its
// entry (the caller's stores to it come first).
func (r *Ring) stamp(n int) {
	for k := range uint32(n) {
		storeRelease(r.seqWord(r.local+k), r.local+k+1)
	}
}

// Producer side.

// Free is how many entries the producer may write now; it is at least
// want when that many are free. The consumer's index is read again only
// when its last reading leaves fewer than want free: the other side
// writes that word each time it consumes, and reading it brings its
// cache line over from the other core (tens of nanoseconds on every
// post). A consumer index that claims more was consumed than was
// produced is the other side's corruption.
func (r *Ring) Free(want int) (int, error) {
	if used := r.local - r.seenCons; used <= r.entries && int(r.entries-used) >= want {
		return int(r.entries - used), nil
	}
	cons := atomic.LoadUint32(r.cons)
	used := r.local - cons
	if used > r.entries {
		return 0, ErrRingCorrupt
	}
	r.seenCons = cons
	return int(r.entries - used), nil
}

// Consumed tells the producer that the consumer has consumed at least
// the first n entries ever published, as it learned otherwise than from
// the consumer index: a client, from the send completions it polled
// (verbsd consumes a send WQE's entry before any completion of it is
// written; see the package documentation). Free then counts that room
// without loading the index, whose cache line the consumer writes at
// every message. A count behind the last reading, or beyond what was
// published, tells nothing and is ignored.
func (r *Ring) Consumed(n uint32) {
	if int32(n-r.seenCons) > 0 && int32(r.local-n) >= 0 {
		r.seenCons = n
	}
}

// Unconsumed is how many published entries the consumer has not yet
// consumed, as far as the producer can tell.
func (r *Ring) Unconsumed() int {
	n := r.local - atomic.LoadUint32(r.cons)
	if n > r.entries {
		return 0
	}
	return int(n)
}

// Produced is how many entries this side, the producer, has published.
func (r *Ring) Produced() uint32 { return r.local }

// Slot is the k-th entry after those already published, to be written
// before Publish; k must be below Free.
func (r *Ring) Slot(k int) []byte { return r.entry(r.local + uint32(k)) }

// Publish makes the next n written entries visible (their sequence
// words), stores the producer index, and reports whether the consumer is
// asleep and needs its doorbell rung. The index's store is sequentially
// consistent, a full fence: with the consumer's Sleep, it makes sure that
// either this side sees the flag or that side sees the entries.
func (r *Ring) Publish(n int) (wake bool) {
	r.stamp(n)
	r.local += uint32(n)
	atomic.StoreUint32(r.prod, r.local)
	return atomic.LoadUint32(r.flags)&FlagAsleep != 0
}

// Release is Publish without the fence, for a ring whose consumer never
// sleeps on it (a CQ: its consumer waits on a completion channel,
// through Arm; verbsd closes that handshake by looking at the arm words
// after the full fence of going to sleep). It does not wait for the
// entries to reach the other core, as Publish's fence does.
func (r *Ring) Release(n int) {
	r.stamp(n)
	r.local += uint32(n)
	storeRelease(r.prod, r.local)
}

// Consumer side.

// Available is how many published entries wait to be consumed, up to
// most: those whose sequence words say so, from the consumer's index on.
// It reads the entries' own cache lines, which the consumer copies next,
// and not the producer index's: one trip between cores per message where
// there were two, one after the other.
func (r *Ring) Available(most int) int {
	n := uint32(0)
	for int(n) < most && n < r.entries && atomic.LoadUint32(r.seqWord(r.local+n)) == r.local+n+1 {
		n++
	}
	return int(n)
}

// Watch is what Ready looks at: the next entry's sequence word, which
// must be read with atomic.LoadUint32, and the value that says the entry
// is published. A consumer that polls many rings can keep these side by
// side and look at each ring with one load; they change when it
// consumes.
func (r *Ring) Watch() (word *uint32, published uint32) { return r.next, r.local + 1 }

// Ready reports whether the next entry is published: Available(1) == 1,
// in one load and a compare, for a consumer that polls rings that are
// mostly empty (verbsd polls every SQ every round).
func (r *Ring) Ready() bool { return atomic.LoadUint32(r.next) == r.local+1 }

// Peek is the k-th available entry, k below Available. The other side
// may still write to it: copy it before trusting anything in it.
func (r *Ring) Peek(k int) []byte { return r.entry(r.local + uint32(k)) }

// Consume releases the next n entries to the producer, with one release
// store: nobody sleeps on the consumer index, so nothing needs the
// sequentially consistent store's wait for it to reach the other core.
func (r *Ring) Consume(n int) {
	r.local += uint32(n)
	r.next = r.seqWord(r.local)
	storeRelease(r.cons, r.local)
}

// Sleep announces that the consumer is about to block on its doorbell and
// reports whether it may: false if entries arrived meanwhile (the flag is
// then cleared again and the consumer goes on consuming).
func (r *Ring) Sleep() bool {
	atomic.StoreUint32(r.flags, FlagAsleep)
	if atomic.LoadUint32(r.seqWord(r.local)) == r.local+1 {
		atomic.StoreUint32(r.flags, 0)
		return false
	}
	return true
}

// Wake clears the asleep flag once the consumer is running again.
func (r *Ring) Wake() { atomic.StoreUint32(r.flags, 0) }

// Completion queues: arming (ibv_req_notify_cq) and completion events
// pass through two more words of the header, each written by one side.

// Arm asks for one completion event (consumer side): the arm word counts
// requests in its upper 31 bits, bit 0 says solicited completions only.
func (r *Ring) Arm(solicitedOnly bool) {
	v := atomic.LoadUint32(r.arm)&^1 + 2
	if solicitedOnly {
		v |= 1
	}
	atomic.StoreUint32(r.arm, v)
}

// ArmRequest is the consumer's arm word (producer side).
func (r *Ring) ArmRequest() uint32 { return atomic.LoadUint32(r.arm) }

// RaiseEvent counts one more completion event (producer side), before
// the producer signals the completion channel.
func (r *Ring) RaiseEvent() { atomic.StoreUint32(r.events, atomic.LoadUint32(r.events)+1) }

// EventCount is how many completion events the producer raised.
func (r *Ring) EventCount() uint32 { return atomic.LoadUint32(r.events) }

func put32(b []byte, v uint32) { *(*uint32)(unsafe.Pointer(&b[0])) = v }
func put16(b []byte, v uint16) { *(*uint16)(unsafe.Pointer(&b[0])) = v }
func get32(b []byte) uint32    { return *(*uint32)(unsafe.Pointer(&b[0])) }
func get16(b []byte) uint16    { return *(*uint16)(unsafe.Pointer(&b[0])) }
