package client

// A client that scribbles over the rings it shares with verbsd hurts
// only itself: verbsd (running in this test process, so that a panic of
// its engine would end the test binary) survives, the scribbling QP ends
// in the Error state or completes in error, the peer's memory is not
// touched, and other clients go on being served. The ring memory is
// reached through the fields this package keeps unexported (qp.mem,
// qp.sq, qp.rq, cq.mem); the offsets are those verbsd/abi documents.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
)

// Ring header offsets (verbsd/abi, "Rings").
const (
	ringProducer = 64
	ringConsumer = 128
	ringArm      = 196
)

// ringsOf returns the SQ's and the RQ's ring memory within a QP's
// mapping: the SQ at 0, the RQ on the next page boundary after it.
func ringsOf(t testing.TB, qp *QP) (sq, rq []byte) {
	t.Helper()
	sq = qp.mem[qp.sqOff:][:abi.RingSize(qp.sq.Entries(), qp.sq.EntrySize())]
	rq = qp.mem[qp.rqOff:][:abi.RingSize(qp.rq.Entries(), qp.rq.EntrySize())]
	if ne := binary.NativeEndian; ne.Uint32(sq) != abi.RingMagic || ne.Uint16(rq[6:]) != uint16(abi.KindRQ) {
		t.Fatal("the QP's mapping is not laid out as this test expects")
	}
	return sq, rq
}

// publish stamps the sequence words of a fresh ring's first n entries
// (abi, "Rings"), which publishes them whatever they hold, and returns n.
func publish(ring []byte, kind abi.Kind, n int) int {
	ne := binary.NativeEndian
	size, entries := int(ne.Uint32(ring[8:])), int(ne.Uint32(ring[12:]))
	n = min(n, entries)
	for i := range n {
		ne.PutUint32(ring[abi.RingHeaderSize+i*size+abi.SeqOffset(kind):], uint32(i+1))
	}
	return n
}

// published is how many of a fresh ring's entries are published in a
// row from the first, as their sequence words say.
func published(ring []byte, kind abi.Kind) int {
	ne := binary.NativeEndian
	size, entries := int(ne.Uint32(ring[8:])), int(ne.Uint32(ring[12:]))
	n := 0
	for n < entries && ne.Uint32(ring[abi.RingHeaderSize+n*size+abi.SeqOffset(kind):]) == uint32(n+1) {
		n++
	}
	return n
}

// scribbleSides are a scribbler A and its RC peer B, whose region holds
// a canary nobody may touch.
func scribbleSides(t testing.TB, o *Options) (a, b *side, canary []byte) {
	t.Helper()
	a = newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
	b = newSide(t, o, "vhca1", vhca.QPTypeRC, 1<<16)
	t.Cleanup(func() { a.buf.Free(); b.buf.Free() })
	connect(t, a, b)
	for i := range b.buf.B {
		b.buf.B[i] = byte(i*7 + 3)
	}
	return a, b, bytes.Clone(b.buf.B)
}

// waitError waits until a's QP is in the Error state.
func waitError(t testing.TB, a *side) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		attr, err := a.qp.Query()
		if err != nil {
			t.Fatal(err)
		}
		if attr.State == vhca.QPStateError {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scribbling QP is still in state %v", attr.State)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitEvent waits for an asynchronous event of type typ on ctx.
func waitEvent(t testing.TB, ctx *Context, typ vhca.EventType) AsyncEvent {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := ctx.AsyncEvent(c)
		if err != nil {
			t.Fatalf("no %v event: %v", typ, err)
		}
		if ev.Type == typ {
			return ev
		}
	}
}

// stillServes checks the aftermath: B's region untouched, A's context
// still answering, and a new pair of clients doing a full RC WRITE.
func stillServes(t testing.TB, o *Options, a, b *side, canary []byte) {
	t.Helper()
	if !bytes.Equal(b.buf.B, canary) {
		t.Fatal("the scribbler's peer's region was written")
	}
	if _, err := a.ctx.QueryDevice(); err != nil {
		t.Fatalf("the scribbler's context: %v", err)
	}
	c := newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
	d := newSide(t, o, "vhca1", vhca.QPTypeRC, 1<<16)
	defer func() { c.buf.Free(); d.buf.Free(); c.ctx.Close(); d.ctx.Close() }()
	connect(t, c, d)
	writeAll(t, c, d)
}

// writeAll RDMA WRITEs the whole of c's region into d's and checks it.
func writeAll(t testing.TB, c, d *side) {
	t.Helper()
	for i := range c.buf.B {
		c.buf.B[i] = byte(i*13 + int(c.qp.Num))
	}
	wr := SendWR{WRID: 5, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled, SGL: []SGE{c.mr.SGE()},
		RemoteAddr: d.mr.Addr, RKey: d.mr.RKey}
	if _, err := c.qp.PostSend([]SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, c.cq); wc.Status != vhca.WCSuccess || wc.WRID != 5 {
		t.Fatalf("verbsd no longer serves: write completion %+v", wc)
	}
	if !bytes.Equal(c.buf.B, d.buf.B[:len(c.buf.B)]) {
		t.Fatal("verbsd no longer serves: written data differs")
	}
}

func TestScribbleRings(t *testing.T) {
	o := startVerbsd(t)
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { scribbleCases(t, o, rng) })
	}
}

func scribbleCases(t *testing.T, o *Options, rng *rand.Rand) {
	random := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	ne := binary.NativeEndian
	// garbage fills the entries of a new scribbler's SQ or RQ with
	// random bytes.
	garbage := func(t *testing.T, queue string) (a, b *side, canary, ring []byte, kind abi.Kind) {
		a, b, canary = scribbleSides(t, o)
		sq, rq := ringsOf(t, a.qp)
		ring, kind = sq, abi.KindSQ
		if queue == "rq" {
			ring, kind = rq, abi.KindRQ
		}
		random(ring[abi.RingHeaderSize:])
		return a, b, canary, ring, kind
	}
	for _, queue := range []string{"sq", "rq"} {
		t.Run(queue+"-producer", func(t *testing.T) {
			// Any producer index, over garbage entries that are not
			// published: verbsd reads sequence words, not the
			// index, and takes nothing; the QP goes on working.
			a, b, canary, ring, kind := garbage(t, queue)
			if n := published(ring, kind); n != 0 {
				t.Skipf("the garbage published %d entries", n)
			}
			ne.PutUint32(ring[ringProducer:], rng.Uint32()|1<<31)
			a.ctx.ringBell()
			time.Sleep(10 * time.Millisecond)
			if got := ne.Uint32(ring[ringConsumer:]); got != 0 {
				t.Fatalf("verbsd consumed %d unpublished entries", got)
			}
			if attr, err := a.qp.Query(); err != nil || attr.State != vhca.QPStateRTS {
				t.Fatalf("the QP is in %v (%v), want RTS", attr.State, err)
			}
			stillServes(t, o, a, b, canary)
		})
		t.Run(queue+"-entries", func(t *testing.T) {
			// Garbage entries, published properly: each refused
			// entry completes in error and ends the QP.
			a, b, canary, ring, kind := garbage(t, queue)
			n := publish(ring, kind, 1+rng.IntN(a.qp.sq.Entries()))
			ne.PutUint32(ring[ringProducer:], uint32(n))
			a.ctx.ringBell()
			wc := waitWC(t, a.cq)
			if wc.Status == vhca.WCSuccess {
				t.Fatalf("a garbage entry completed %+v", wc)
			}
			waitError(t, a)
			stillServes(t, o, a, b, canary)
		})
	}
	t.Run("whole-mapping", func(t *testing.T) {
		// Headers too: verbsd never reads a ring's header back. The
		// garbage in the SQ's first entry, published, ends the QP.
		a, b, canary := scribbleSides(t, o)
		sq, _ := ringsOf(t, a.qp)
		size, entries := ne.Uint32(sq[8:]), ne.Uint32(sq[12:])
		random(a.qp.mem)
		ne.PutUint32(sq[8:], size)
		ne.PutUint32(sq[12:], entries)
		publish(sq, abi.KindSQ, 1)
		random(sq[8:16])
		a.ctx.ringBell()
		waitError(t, a)
		stillServes(t, o, a, b, canary)
	})
	t.Run("cq-consumer", func(t *testing.T) {
		// A consumer index claiming more was consumed than was
		// produced: the CQ is dead (CQ_ERR) when verbsd reads that
		// index, which it does once the completions it published fill
		// the ring by its last reading (abi.Ring.Free): by the ring's
		// size and one more completions at the latest.
		a, b, canary := scribbleSides(t, o)
		ne.PutUint32(a.cq.mem[ringConsumer:], rng.Uint32()|1<<31)
		ne.PutUint32(a.cq.mem[ringArm:], rng.Uint32())
		wr := SendWR{WRID: 1, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
			SGL: []SGE{{Addr: a.mr.Addr, Length: 64, LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
		deadline := time.Now().Add(5 * time.Second)
		for posted := 0; posted <= a.cq.ring.Entries(); {
			n, err := a.qp.PostSend([]SendWR{wr})
			if err != nil && err != ErrQueueFull {
				t.Fatal(err)
			}
			if posted += n; n == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d WRITEs posted; the SQ stays full", posted)
				}
				time.Sleep(time.Millisecond)
			}
		}
		if ev := waitEvent(t, a.ctx, vhca.EventCQErr); ev.CQ != a.cq {
			t.Fatalf("CQ_ERR for %v, want the scribbled CQ", ev.CQ)
		}
		copy(b.buf.B, canary) // the WRITE was the scribbler's right
		stillServes(t, o, a, b, canary)
	})
}

// FuzzScribble writes its input over the scribbler's SQ: the first four
// bytes are both the producer index and how many entries to publish
// (their sequence words, abi "Rings"), the rest the entries, sequence
// words included: verbsd takes those published in a row.
func FuzzScribble(f *testing.F) {
	o := startVerbsd(f)
	// One pair, made once per process, keeps checking that verbsd serves.
	c := newSide(f, o, "vhca0", vhca.QPTypeRC, 1<<16)
	d := newSide(f, o, "vhca1", vhca.QPTypeRC, 1<<16)
	connect(f, c, d)

	le := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	entry := func(opcode, nsge uint8, flags uint16, inline uint32, sge ...uint64) []byte {
		w := make([]byte, abi.SendWQEHeader+16*4)
		abi.SendWQE(w).SetOpcode(opcode)
		abi.SendWQE(w).SetNumSGE(int(nsge))
		abi.SendWQE(w).SetFlags(flags)
		abi.SendWQE(w).SetInlineLen(int(inline))
		for i := 0; i+2 < len(sge) && i/3 < 4; i += 3 { // address, length, L_Key
			abi.SendWQE(w).SGE(i/3).Set(sge[i], uint32(sge[i+1]), uint32(sge[i+2]))
		}
		return w
	}
	f.Add([]byte{})
	f.Add(le(0xFFFFFFFF))
	f.Add(le(1 << 31))
	f.Add(append(le(1), entry(uint8(vhca.WRSend), 0, uint16(vhca.SendSignaled), 0)...))
	f.Add(append(le(1), entry(uint8(vhca.WRRDMAWrite), 1, uint16(vhca.SendSignaled), 0, 0x1000, 64, 0x12345678)...))
	f.Add(append(le(1), entry(uint8(vhca.WRSend), 0, uint16(vhca.SendInline), 0xFFFFFFFF)...))
	f.Add(append(le(2), entry(200, 255, 0xFFFF, 70)...))
	f.Add(append(le(128), bytes.Repeat([]byte{0xA5}, 4096)...))
	f.Add(append(le(129), bytes.Repeat([]byte{0x01}, 100)...))

	f.Fuzz(func(t *testing.T, data []byte) {
		a, b, canary := scribbleSides(t, o)
		sq, _ := ringsOf(t, a.qp)
		var prod uint32
		if len(data) >= 4 {
			prod = binary.NativeEndian.Uint32(data)
			copy(sq[abi.RingHeaderSize:], data[4:])
		}
		publish(sq, abi.KindSQ, int(min(prod, 1<<16)))
		binary.NativeEndian.PutUint32(sq[ringProducer:], prod)
		want := uint32(published(sq, abi.KindSQ))
		a.ctx.ringBell()
		// verbsd took the lot: consumed it (the consumer index caught
		// up) or ended the QP.
		deadline := time.Now().Add(5 * time.Second)
		for {
			attr, err := a.qp.Query()
			if err != nil {
				t.Fatal(err)
			}
			if attr.State == vhca.QPStateError {
				break
			}
			if binary.NativeEndian.Uint32(sq[ringConsumer:]) == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d entries published: verbsd neither consumed them nor ended the QP (state %v)", want, attr.State)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if !bytes.Equal(b.buf.B, canary) {
			t.Fatal("the scribbler's peer's region was written")
		}
		if _, err := a.ctx.QueryDevice(); err != nil {
			t.Fatalf("the scribbler's context: %v", err)
		}
		a.ctx.Close()
		b.ctx.Close()
		writeAll(t, c, d)
	})
}
