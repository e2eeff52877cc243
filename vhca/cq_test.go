package vhca

import "testing"

// TestCQAtDrop: At and Drop read and remove completions in place, in
// order, across the end of the CQ's ring, as Poll does with copies.
func TestCQAtDrop(t *testing.T) {
	d := testDevice(t, 1)
	cq, err := d.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	next, want := uint64(0), uint64(0)
	push := func(n int) {
		for range n {
			cq.push(&WC{WRID: next, ByteLen: uint32(next) * 3}, false)
			next++
		}
	}
	push(6)
	wcs := make([]WC, 5)
	if n := cq.Poll(wcs); n != 5 {
		t.Fatalf("polled %d", n)
	}
	want = 5
	push(7) // 8 queued, the ring's end crossed
	for round := range 3 {
		n := cq.Len()
		for k := range n {
			if w := cq.At(k); w.WRID != want+uint64(k) || w.ByteLen != uint32(w.WRID)*3 {
				t.Fatalf("round %d: At(%d) = %+v, want WRID %d", round, k, *w, want+uint64(k))
			}
		}
		drop := min(n, 3)
		cq.Drop(drop)
		want += uint64(drop)
		if cq.Len() != n-drop {
			t.Fatalf("round %d: %d left after dropping %d of %d", round, cq.Len(), drop, n)
		}
	}
	if n := cq.Poll(wcs); n != 0 || cq.Len() != 0 || want != next {
		t.Fatalf("end: %d polled, %d left, next %d, want %d", n, cq.Len(), want, next)
	}
}

// TestTakeCompleted: the CQs that took completions since the last call,
// each once however many it took, in the order of their first; none
// that was destroyed; and a completion that comes while the caller goes
// through the list it got goes in the next.
func TestTakeCompleted(t *testing.T) {
	d := testDevice(t, 1)
	var cqs [3]*CQ
	for i := range cqs {
		cq, err := d.CreateCQ(8)
		if err != nil {
			t.Fatal(err)
		}
		cqs[i] = cq
	}
	same := func(got []*CQ, want ...*CQ) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("took %d CQs, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("CQ %d is handle %d, want %d", i, got[i].Handle, want[i].Handle)
			}
		}
	}
	if got := d.TakeCompleted(); len(got) != 0 {
		t.Fatalf("took %d CQs before any completion", len(got))
	}
	cqs[2].push(&WC{WRID: 1}, false)
	cqs[0].push(&WC{WRID: 2}, false)
	cqs[2].push(&WC{WRID: 3}, false)
	got := d.TakeCompleted()
	same(got, cqs[2], cqs[0])
	cqs[1].push(&WC{WRID: 4}, false) // while got is gone through
	same(got, cqs[2], cqs[0])
	cqs[0].push(&WC{WRID: 5}, false)
	same(d.TakeCompleted(), cqs[1], cqs[0])
	same(d.TakeCompleted())

	cqs[1].push(&WC{WRID: 6}, false)
	cqs[2].push(&WC{WRID: 7}, false)
	cqs[1].Drop(cqs[1].Len())
	if err := d.DestroyCQ(cqs[1]); err != nil {
		t.Fatal(err)
	}
	same(d.TakeCompleted(), cqs[2])
	// An overflowing CQ takes nothing: no completion to move.
	for range 9 {
		cqs[0].push(&WC{WRID: 8}, false)
	}
	same(d.TakeCompleted(), cqs[0])
	cqs[0].push(&WC{WRID: 9}, false)
	same(d.TakeCompleted())
}

// testRing is a CQRing of n entries, consumed in order by take.
type testRing struct {
	buf         []WC
	head, count int
	writing     bool
}

func (r *testRing) Entry() *WC {
	if r.count == len(r.buf) {
		return nil
	}
	r.writing = true
	return &r.buf[(r.head+r.count)%len(r.buf)]
}

func (r *testRing) Publish() {
	if !r.writing {
		panic("Publish without Entry")
	}
	r.writing = false
	r.count++
}

func (r *testRing) take() (WC, bool) {
	if r.count == 0 {
		return WC{}, false
	}
	w := r.buf[r.head]
	r.head, r.count = (r.head+1)%len(r.buf), r.count-1
	return w, true
}

// TestCQRing: completions go straight into the owner's ring while it has
// room; then into the CQ, and every one after them too until the owner
// has moved them, so that the consumer sees them in order; a CQ whose
// own ring is full too overflows as before; an armed CQ raises its event
// for a completion written into the owner's ring.
func TestCQRing(t *testing.T) {
	d := testDevice(t, 1)
	cq, err := d.CreateCQ(3)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRing{buf: make([]WC, 2)}
	cq.Ring = r
	next := uint64(1)
	push := func(n int) {
		t.Helper()
		for range n {
			if !cq.push(&WC{WRID: next, ByteLen: uint32(next)}, false) {
				t.Fatalf("completion %d refused", next)
			}
			next++
		}
	}
	var seen []uint64
	consume := func(n int) {
		t.Helper()
		for range n {
			w, ok := r.take()
			if !ok {
				t.Fatalf("ring empty after %v", seen)
			}
			if w.ByteLen != uint32(w.WRID) {
				t.Fatalf("completion %+v garbled", w)
			}
			seen = append(seen, w.WRID)
		}
	}
	// fill moves what the CQ holds into the ring, as verbsd's fillCQ.
	fill := func() {
		for cq.Len() > 0 {
			e := r.Entry()
			if e == nil {
				return
			}
			*e = *cq.At(0)
			r.Publish()
			cq.Drop(1)
		}
	}
	push(2)
	if r.count != 2 || cq.Len() != 0 || len(d.TakeCompleted()) != 0 {
		t.Fatalf("ring %d, CQ %d: want both in the ring, none in the CQ", r.count, cq.Len())
	}
	push(2) // the ring is full: 3 and 4 wait in the CQ
	if cq.Len() != 2 {
		t.Fatalf("CQ holds %d, want 2", cq.Len())
	}
	if l := d.TakeCompleted(); len(l) != 1 || l[0] != cq {
		t.Fatalf("TakeCompleted %v, want the CQ", l)
	}
	consume(1)
	push(1) // room in the ring, but 5 comes after 3 and 4
	if r.count != 1 || cq.Len() != 3 {
		t.Fatalf("ring %d, CQ %d: want 5 behind 3 and 4 in the CQ", r.count, cq.Len())
	}
	consume(1)
	fill()
	consume(2)
	fill()
	push(1) // the CQ is empty: 6 goes to the ring, behind 5
	if cq.Len() != 0 {
		t.Fatalf("CQ holds %d after being emptied", cq.Len())
	}
	consume(2)
	if want := []uint64{1, 2, 3, 4, 5, 6}; len(seen) != len(want) || seen[5] != 6 || seen[2] != 3 || seen[4] != 5 {
		t.Fatalf("consumed %v, want %v", seen, want)
	}
	for i := range seen {
		if seen[i] != uint64(i+1) {
			t.Fatalf("consumed %v, want 1 to 6 in order", seen)
		}
	}

	drainEvents(d)
	cq.ReqNotify(false)
	push(1)
	if ev := eventsOf(drainEvents(d), EventCompletion); len(ev) != 1 || ev[0].CQ != cq {
		t.Fatalf("armed CQ, completion into the ring: events %+v, want one", ev)
	}
	consume(1)

	push(2 + 3) // the ring's 2, the CQ's 3
	if cq.push(&WC{WRID: next}, false) || !cq.Err {
		t.Fatal("a completion past the ring and the CQ did not overflow the CQ")
	}
	if ev := eventsOf(drainEvents(d), EventCQErr); len(ev) != 1 {
		t.Fatalf("overflow: events %+v, want one EventCQErr", ev)
	}
	consume(2)
	if cq.push(&WC{WRID: next}, false) || r.count != 0 {
		t.Fatal("a CQ in error took a completion into the ring")
	}
}
