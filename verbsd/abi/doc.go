// Package abi is what verbsd and its clients share: the layout of the
// rings in shared memory through which work requests and completions pass,
// and (with the control plane, to come) the messages of the control socket.
// It is written so that a client in another language can follow it; this
// comment is the reference.
//
// # Rings
//
// Every send queue, receive queue, shared receive queue and completion
// queue is a single-producer single-consumer ring in a memfd that verbsd
// creates and both sides map. verbsd decides the ring's size and entry size
// and writes the header; it never reads them back, since the client can
// write anywhere in the mapping.
//
//	offset  size  field
//	0       4     magic 0x52494E47 ("RING" read as a big-endian word)
//	4       2     layout version, 1
//	6       2     kind: 1 send queue, 2 receive queue, 3 SRQ, 4 CQ
//	8       4     entry size in bytes, a multiple of 8
//	12      4     number of entries, a power of two
//	16      48    reserved, zero
//	64      4     producer index
//	128     4     consumer index
//	192     4     flags: bit 0, the consumer is asleep
//	256     ...   the entries: entry at index i starts at
//	              256 + (i mod entries) × entry size
//
// All integers are in the host's byte order: both sides run on one host.
// The producer and consumer indices are free-running 32-bit counters (they
// wrap at 2^32, which the power-of-two size keeps consistent), each on its
// own cache line and each written by one side only: the producer index by
// the producer, the consumer index by the consumer. producer − consumer
// (mod 2^32) entries are published and not yet consumed; it is never more
// than the number of entries.
//
// Producing: write entries at the producer index onwards, then store the
// new producer index once for the whole batch with release ordering (a
// store per entry costs a full fence each on x86-64 and halves the ring's
// rate). Then read the flags: if the consumer is asleep, signal its
// doorbell (an eventfd, handed over on the control socket).
//
// Consuming: load the producer index with acquire ordering, copy each
// entry out of shared memory before looking at it (the other side may
// still write to it), then store the new consumer index with release
// ordering.
//
// Sleeping: a consumer that finds the ring empty sets the asleep flag,
// loads the producer index again, and only then blocks on its doorbell if
// the ring is still empty (clearing the flag when it wakes). With
// sequentially consistent stores and loads on both sides (what Go's
// sync/atomic gives; C11 memory_order_seq_cst), either the producer sees
// the flag and rings, or the consumer sees the new entries: no wake-up is
// lost.
//
// verbsd treats every value it reads from a client's ring as hostile: a
// producer index more than a ring ahead of the consumer index is an error
// of that client (its queue goes to the error state), never a crash.
package abi
