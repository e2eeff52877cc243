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
