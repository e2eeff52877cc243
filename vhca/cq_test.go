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
