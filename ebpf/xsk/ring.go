package xsk

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one of the four single-producer single-consumer rings the
// kernel shares with us: two u32 indices that only grow (wrapping), a
// flags word, and a power-of-two array of entries.
//
// Each side keeps its own index in plain memory and publishes it once
// per batch; the other side's index is read, with an atomic load, only
// when the copy we hold does not show enough room or entries. The
// atomics are what order the entries against the indices: entries
// written before the store of our index are seen by the kernel after
// its load of it, and entries the kernel wrote before its store of its
// index are seen by us after our load.
type ring struct {
	producer *uint32 // in the mapping
	consumer *uint32 // in the mapping
	flags    *uint32 // in the mapping: XDP_RING_NEED_WAKEUP
	mask     uint32
	size     uint32

	// On a ring we produce (fill, TX), prod is our producer index, ahead
	// of the published one by the entries not yet published, and cons
	// the kernel's consumer index as last read. On a ring we consume
	// (RX, completion), cons is our consumer index and prod the kernel's
	// producer index as last read.
	prod uint32
	cons uint32

	mem []byte // the mapping, for munmap
}

// free is how many entries a producer can write now, reading the
// kernel's consumer index only if the last one read leaves fewer than
// want.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.prod - r.cons)
	if n < want {
		r.cons = atomic.LoadUint32(r.consumer)
		n = r.size - (r.prod - r.cons)
	}
	return n
}

// ready is how many entries a consumer can read now, reading the
// kernel's producer index only if the last one read shows fewer than
// want.
func (r *ring) ready(want uint32) uint32 {
	n := r.prod - r.cons
	if n < want {
		r.prod = atomic.LoadUint32(r.producer)
		n = r.prod - r.cons
	}
	return n
}

// publishProducer makes the entries written so far visible.
func (r *ring) publishProducer() { atomic.StoreUint32(r.producer, r.prod) }

// publishConsumer hands the entries read so far back to the kernel.
func (r *ring) publishConsumer() { atomic.StoreUint32(r.consumer, r.cons) }

// needWakeup reports whether the kernel asked for a system call to make
// progress on this ring (it sets the flag when it stopped polling it).
func (r *ring) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// unmap releases the mapping; the kernel keeps the socket (and its
// queue binding) alive while any ring of it is mapped.
func (r *ring) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	*r = ring{}
	return err
}

// addrRing is the fill or completion ring: UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

// descRing is the RX or TX ring: descriptors of frames in the UMEM.
type descRing struct {
	ring
	descs []unix.XDPDesc
}

// mapRing maps the ring at pgoff, of n entries of entry bytes, laid out
// as off says, and returns its header and entry array.
func mapRing(fd int, name string, pgoff int64, off *unix.XDPRingOffset, n uint32, entry uintptr) (ring, unsafe.Pointer, error) {
	length := uintptr(off.Desc) + uintptr(n)*entry
	mem, err := unix.Mmap(fd, pgoff, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, nil, fmt.Errorf("xsk: mmap %s ring (%d bytes): %w", name, length, err)
	}
	r := ring{
		producer: (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		mask:     n - 1,
		size:     n,
		mem:      mem,
	}
	// A fresh socket's rings are empty, but read both indices rather
	// than assume it.
	r.prod = atomic.LoadUint32(r.producer)
	r.cons = atomic.LoadUint32(r.consumer)
	return r, unsafe.Pointer(&mem[off.Desc]), nil
}

func mapAddrRing(fd int, name string, pgoff int64, off *unix.XDPRingOffset, n uint32) (addrRing, error) {
	r, p, err := mapRing(fd, name, pgoff, off, n, 8)
	if err != nil {
		return addrRing{}, err
	}
	return addrRing{ring: r, addrs: unsafe.Slice((*uint64)(p), n)}, nil
}

func mapDescRing(fd int, name string, pgoff int64, off *unix.XDPRingOffset, n uint32) (descRing, error) {
	r, p, err := mapRing(fd, name, pgoff, off, n, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return descRing{}, err
	}
	return descRing{ring: r, descs: unsafe.Slice((*unix.XDPDesc)(p), n)}, nil
}
