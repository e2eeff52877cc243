package pipe

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/softib/softib/vhca/link"
)

var _ link.Link = (*End)(nil)

func TestPipeOrderAndBackPressure(t *testing.T) {
	a, b := New(3, 64) // rounded up to 4
	sent := 0
	for ; ; sent++ {
		buf := a.TxBuf()
		if buf == nil {
			break
		}
		n := copy(buf, fmt.Sprintf("frame %d", sent))
		a.Send(n)
	}
	if sent != 4 {
		t.Fatalf("queue took %d frames, want 4", sent)
	}
	if b.Pending() != 0 {
		t.Fatal("frames visible before Flush")
	}
	a.Flush()
	var got []string
	b.Recv(2, func(f, _ []byte) { got = append(got, string(f)) })
	if a.TxBuf() == nil {
		t.Fatal("no room after the receiver took two frames")
	}
	b.Recv(10, func(f, _ []byte) { got = append(got, string(f)) })
	want := []string{"frame 0", "frame 1", "frame 2", "frame 3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if n := a.Recv(10, func(_, _ []byte) {}); n != 0 {
		t.Fatalf("a received %d frames of its own", n)
	}
}

// Two goroutines, one per end, each sending and checking a numbered
// stream: nothing lost, duplicated or reordered (run with -race).
func TestPipeConcurrent(t *testing.T) {
	const frames = 100000
	a, b := New(64, 16)
	var wg sync.WaitGroup
	run := func(e *End, errs *error) {
		defer wg.Done()
		next, want := 0, 0
		for next < frames || want < frames {
			for next < frames {
				buf := e.TxBuf()
				if buf == nil {
					break
				}
				e.Send(copy(buf, fmt.Sprintf("%08d", next)))
				next++
			}
			e.Flush()
			e.Recv(32, func(f, _ []byte) {
				if !bytes.Equal(f, []byte(fmt.Sprintf("%08d", want))) && *errs == nil {
					*errs = fmt.Errorf("got %q, want %08d", f, want)
				}
				want++
			})
		}
	}
	var ea, eb error
	wg.Add(2)
	go run(a, &ea)
	go run(b, &eb)
	wg.Wait()
	if ea != nil || eb != nil {
		t.Fatal(ea, eb)
	}
}
