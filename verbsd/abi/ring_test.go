package abi

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// sharedRing makes a ring in a memfd mapped twice, as verbsd and a client
// map it: the creator's view and the opener's view are different virtual
// addresses for the same pages.
func sharedRing(t testing.TB, kind Kind, entries, size int) (creator, opener *Ring) {
	t.Helper()
	fd, err := unix.MemfdCreate("softib-ring-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	n := RingSize(entries, size)
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	var views [2][]byte
	for i := range views {
		if views[i], err = unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, v := range views {
			unix.Munmap(v)
		}
	})
	if creator, err = NewRing(views[0], kind, entries, size); err != nil {
		t.Fatal(err)
	}
	if opener, err = OpenRing(views[1], kind); err != nil {
		t.Fatal(err)
	}
	return creator, opener
}

// TestRingAcrossMappings moves a million entries from a producer goroutine
// to a consumer goroutine through two mappings of one memfd, in batches of
// random sizes, with the consumer sleeping on an eventfd doorbell whenever
// the ring is empty: every entry arrives once, in order, intact, and no
// wake-up is lost (the test would hang).
func TestRingAcrossMappings(t *testing.T) {
	prod, cons := sharedRing(t, KindSQ, 64, 64)
	bell, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bell)
	const total = 1_000_000
	var wakes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		for seq := uint64(0); seq < total; {
			free, err := prod.Free(1)
			if err != nil {
				t.Error(err)
				return
			}
			n := min(free, 1+r.IntN(32), int(total-seq))
			for k := range n {
				e := prod.Slot(k)
				binary.LittleEndian.PutUint64(e, seq)
				binary.LittleEndian.PutUint64(e[48:], ^seq) // short of the sequence word
				seq++
			}
			if n > 0 && prod.Publish(n) {
				wakes.Add(1)
				unix.Write(bell, one)
			}
		}
	}()
	var buf [8]byte
	var copyOut [64]byte
	for want := uint64(0); want < total; {
		n := cons.Available(64)
		if n == 0 {
			if cons.Sleep() {
				unix.Read(bell, buf[:])
				cons.Wake()
			}
			continue
		}
		for k := range n {
			copy(copyOut[:], cons.Peek(k))
			if got := binary.LittleEndian.Uint64(copyOut[:]); got != want || binary.LittleEndian.Uint64(copyOut[48:]) != ^want {
				t.Fatalf("entry %d: got %d", want, got)
			}
			want++
		}
		cons.Consume(n)
	}
	wg.Wait()
	t.Logf("%d entries, %d doorbells", total, wakes.Load())
}

// TestRingIndicesWrap runs a ring across the 2^32 wrap of its indices.
func TestRingIndicesWrap(t *testing.T) {
	prod, cons := sharedRing(t, KindCQ, 4, CQESize)
	start := ^uint32(0) - 5
	prod.local, cons.local = start, start
	*prod.prod, *prod.cons = start, start
	for i := range 40 {
		free, err := prod.Free(4)
		if err != nil || free != 4 {
			t.Fatalf("round %d: free %d, %v", i, free, err)
		}
		for k := range 3 {
			binary.LittleEndian.PutUint64(prod.Slot(k), uint64(i*3+k))
		}
		prod.Publish(3)
		if n := cons.Available(4); n != 3 {
			t.Fatalf("round %d: available %d", i, n)
		}
		for k := range 3 {
			if got := binary.LittleEndian.Uint64(cons.Peek(k)); got != uint64(i*3+k) {
				t.Fatalf("round %d entry %d: %d", i, k, got)
			}
		}
		cons.Consume(3)
	}
}

// TestRingCorruptIndices: what the consumer takes is what the sequence
// words say, whatever the producer index claims, and never more than the
// ring holds or the consumer asks; a consumer index claiming more than
// was produced is reported.
func TestRingCorruptIndices(t *testing.T) {
	prod, cons := sharedRing(t, KindRQ, 8, 16)
	atomic.StoreUint32(prod.prod, 9) // a producer index claiming 9 entries in a ring of 8
	if n := cons.Available(100); n != 0 {
		t.Fatalf("nothing stamped, producer index 9: available %d", n)
	}
	for i := range uint32(8) {
		*prod.seqWord(i) = i + 1 // all 8 stamped
	}
	if n := cons.Available(100); n != 8 {
		t.Fatalf("8 stamped: available %d", n)
	}
	if n := cons.Available(3); n != 3 {
		t.Fatalf("8 stamped, 3 asked: available %d", n)
	}
	*prod.seqWord(5) = 99
	if n := cons.Available(100); n != 5 {
		t.Fatalf("entry 5 unstamped: available %d", n)
	}
	prod.local = 8                   // the producer has produced 8
	atomic.StoreUint32(prod.cons, 9) // a consumer claiming to have consumed what was never produced
	if _, err := prod.Free(1); !errors.Is(err, ErrRingCorrupt) {
		t.Fatalf("consumer ahead of the producer: %v", err)
	}
}

// TestOpenRingChecksHeader: a client opening a ring checks what verbsd
// wrote; a damaged header is refused, not trusted.
func TestOpenRingChecksHeader(t *testing.T) {
	mem := make([]uint64, RingSize(8, SendWQEHeader)/8)
	b := unsafeBytes(mem)
	if _, err := NewRing(b, KindSQ, 8, SendWQEHeader); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRing(b, KindCQ); err == nil {
		t.Fatal("opened an SQ as a CQ")
	}
	for _, c := range []struct {
		off int
		v   uint32
	}{{offMagic, 1}, {offEntries, 6}, {offEntries, 1 << 30}, {offEntrySize, 12}, {offEntrySize, 0}, {offEntrySize, 56}} {
		bad := append([]byte(nil), b...)
		put32(bad[c.off:], c.v)
		if _, err := OpenRing(alignedCopy(bad), KindSQ); err == nil {
			t.Errorf("header with %#x at %d accepted", c.v, c.off)
		}
	}
	// 56 bytes leave an SQ entry no room for its sequence word.
	for _, c := range []struct{ n, size int }{{3, 64}, {8, 12}, {8, 56}, {0, 64}, {MaxRingEntries * 2, 64}} {
		if _, err := NewRing(make([]byte, 1<<16), KindSQ, c.n, c.size); err == nil {
			t.Errorf("NewRing(%d entries of %d) accepted", c.n, c.size)
		}
	}
}

// TestRingFreeReadsConsumerWhenShort: Free answers from its last reading
// of the consumer's index while that leaves enough free, and reads the
// index again when it does not; what it answers is never more than is
// free.
func TestRingFreeReadsConsumerWhenShort(t *testing.T) {
	prod, cons := sharedRing(t, KindCQ, 8, CQESize)
	produce := func(n int) {
		for k := range n {
			prod.Slot(k)[0] = byte(k)
		}
		prod.Release(n)
	}
	consume := func(want int) {
		if n := cons.Available(8); n != want {
			t.Fatalf("available %d; want %d", n, want)
		}
		cons.Consume(want)
	}
	produce(8)
	if n, err := prod.Free(1); err != nil || n != 0 {
		t.Fatalf("full ring: free %d, %v", n, err)
	}
	consume(8)
	if n, err := prod.Free(1); err != nil || n != 8 {
		t.Fatalf("emptied ring: free %d, %v; want 8", n, err)
	}
	produce(2)
	consume(2)
	// 6 were free at the last reading: enough for 6, not read again.
	if n, err := prod.Free(6); err != nil || n != 6 {
		t.Fatalf("free %d, %v; want the last reading's 6", n, err)
	}
	// Asked for 7, it reads the index and finds all 8 free.
	if n, err := prod.Free(7); err != nil || n != 8 {
		t.Fatalf("free %d, %v; want 8 after a new reading", n, err)
	}
}

// TestRingConsumed: a count of consumed entries learned otherwise lets
// Free answer without reading the consumer index; a count behind the
// last reading or beyond what was published changes nothing.
func TestRingConsumed(t *testing.T) {
	prod, cons := sharedRing(t, KindSQ, 2, SendWQESize(1, 0))
	publish := func() {
		if n, err := prod.Free(1); err != nil || n < 1 {
			t.Fatalf("free %d, %v; want room for one", n, err)
		}
		prod.Publish(1)
	}
	publish()
	publish()
	if n := cons.Available(2); n != 2 {
		t.Fatalf("available %d; want 2", n)
	}
	cons.Consume(2)
	// The index says 2 consumed; a stale index, as if Free read it
	// before the consumer's store, would say 0 and the ring full.
	ne := binary.NativeEndian
	idx := prod.mem[offConsumer:]
	ne.PutUint32(idx, 0)
	if n, err := prod.Free(1); err != nil || n != 0 {
		t.Fatalf("free %d, %v; want 0 from the stale index", n, err)
	}
	prod.Consumed(3) // beyond the 2 published: ignored
	if n, _ := prod.Free(1); n != 0 {
		t.Fatalf("free %d after a count beyond what was published; want 0", n)
	}
	prod.Consumed(1)
	if n, err := prod.Free(1); err != nil || n != 1 {
		t.Fatalf("free %d, %v after 1 consumed; want 1 without reading the index", n, err)
	}
	prod.Consumed(0) // behind: ignored
	if n, _ := prod.Free(1); n != 1 {
		t.Fatalf("free %d after a count behind; want 1", n)
	}
	prod.Consumed(2)
	if n, _ := prod.Free(2); n != 2 {
		t.Fatalf("free %d after 2 consumed; want 2", n)
	}
}

// FuzzRingIndices: whatever the other side writes into the indices and
// the sequence words, the ring never panics, takes exactly the entries
// stamped in a row from its own index, never more than it holds or is
// asked for, and reports a consumer index ahead of the producer.
func FuzzRingIndices(f *testing.F) {
	f.Add(uint32(0), uint32(0), uint32(0), uint8(0), uint8(8))
	f.Add(uint32(9), uint32(0), ^uint32(0), uint8(0xFF), uint8(3))
	f.Add(uint32(1), uint32(5), uint32(3), uint8(0x7B), uint8(100))
	f.Fuzz(func(t *testing.T, p, c, local uint32, stamped, most uint8) {
		mem := unsafeBytes(make([]uint64, RingSize(8, SendWQEHeader)/8))
		r, err := NewRing(mem, KindSQ, 8, SendWQEHeader)
		if err != nil {
			t.Fatal(err)
		}
		r.local = local
		*r.prod, *r.cons = p, c
		want := 0
		for i := range uint32(8) {
			// Bit i of stamped: the i-th entry from local is stamped,
			// else its word holds a wrong value.
			v := local + i + 1
			if stamped&(1<<i) == 0 {
				v = ^v
			}
			*r.seqWord(local + i) = v
			if stamped&(1<<i) != 0 && want == int(i) {
				want++
			}
		}
		want = min(want, int(most))
		if n := r.Available(int(most)); n != want {
			t.Fatalf("stamped %08b, most %d: available %d, want %d", stamped, most, n, want)
		} else if n > 0 {
			_ = r.Peek(n - 1)
		}
		// Free answers from its last reading of the consumer index (0,
		// at first) while that leaves enough, else reads it.
		asked := int(local % 10)
		used := local - c
		if local <= 8 && int(8-local) >= asked {
			used = local
		}
		n, err := r.Free(asked)
		if used > 8 {
			if err == nil {
				t.Fatalf("consumer %d, producer %d: no error", c, local)
			}
		} else if err != nil || n != 8-int(used) {
			t.Fatalf("consumer %d, producer %d: free %d, %v", c, local, n, err)
		} else if n > 0 {
			_ = r.Slot(n - 1)
		}
	})
}

// BenchmarkRing passes 64-byte entries between two goroutines through
// shared memory, published and consumed in batches of 32.
func BenchmarkRing(b *testing.B) {
	prod, cons := sharedRing(b, KindSQ, 256, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for got := 0; got < b.N; {
			n := cons.Available(256)
			if n == 0 {
				continue
			}
			for k := range n {
				_ = cons.Peek(k)[0]
			}
			cons.Consume(n)
			got += n
		}
	}()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		free, _ := prod.Free(min(32, b.N-sent))
		n := min(free, 32, b.N-sent)
		for k := range n {
			prod.Slot(k)[0] = byte(sent + k)
		}
		if n > 0 {
			prod.Publish(n)
		}
		sent += n
	}
	<-done
}

// TestRingReady: Ready says what Available(1) says, entry after entry,
// across the ring's end.
func TestRingReady(t *testing.T) {
	mem := make([]byte, RingSize(4, 64))
	prod, err := NewRing(mem, KindSQ, 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := OpenRing(mem, KindSQ)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 11 {
		if cons.Ready() || cons.Available(1) != 0 {
			t.Fatalf("entry %d: ready before it is published", i)
		}
		prod.Publish(1 + i%2)
		if !cons.Ready() || cons.Available(1) != 1 {
			t.Fatalf("entry %d: not ready once published", i)
		}
		cons.Consume(cons.Available(2))
		if f, _ := prod.Free(4); f != 4 {
			t.Fatalf("entry %d: %d free after consuming all", i, f)
		}
	}
}
