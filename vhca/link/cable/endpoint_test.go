package cable

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// wirePair joins two endpoints with a simulated link: link packets and
// data are delivered in order, the data of a lost packet never.
type wirePair struct {
	a, b   *Endpoint
	now    time.Duration
	mute   [2]bool // an end that says nothing (gone away)
	loseAt map[int]bool
	sent   int
}

func (w *wirePair) exchange() {
	var buf [wire.FlowControlLen]byte
	for i, pair := range [][2]*Endpoint{{w.a, w.b}, {w.b, w.a}} {
		from, to := pair[0], pair[1]
		from.LinkPackets(w.now, func(op, vl uint8, fctbs, fccl uint16) {
			if !w.mute[i] {
				to.LinkPacket(w.now, wire.BuildFlowControl(buf[:], op, vl, fctbs, fccl))
			}
		})
	}
}

func (w *wirePair) run(d time.Duration) {
	for end := w.now + d; w.now < end; w.now += time.Millisecond {
		w.a.Tick(w.now)
		w.b.Tick(w.now)
		w.exchange()
	}
}

func newPair(buffer int) *wirePair {
	return &wirePair{a: NewEndpoint(2, buffer, true), b: NewEndpoint(2, buffer, true), loseAt: map[int]bool{}}
}

func up(t *testing.T, e *Endpoint, name string) {
	t.Helper()
	if p, l := e.State(); p != PhysLinkUp || l != LogicalActive {
		t.Fatalf("%s: %v/%v, want LinkUp/Active", name, p, l)
	}
}

func TestBringUp(t *testing.T) {
	w := newPair(64)
	if w.a.Fits(0, 1) {
		t.Fatal("a polling link has credit")
	}
	w.run(30 * time.Millisecond)
	up(t, w.a, "A")
	up(t, w.b, "B")
	if !w.a.Fits(0, 64) || w.a.Fits(0, 65) || !w.a.Fits(15, 1000) {
		t.Fatal("credits after bring-up: want exactly the 64-block buffer, and VL15 free")
	}
}

// A sender stops exactly at the receiver's buffer, resumes when the
// receiver releases, and never overruns it, over many wraps of the
// 12-bit counts and with data packets lost on the way.
func TestCredits(t *testing.T) {
	w := newPair(100)
	w.run(30 * time.Millisecond)
	rng := rand.New(rand.NewPCG(1, 2))
	var held []int
	sentBlocks, lost := 0, 0
	for round := 0; round < 20000; round++ {
		for k := 0; k < 8; k++ {
			n := 26 + rng.IntN(4200)
			if !w.a.Fits(1, wire.Blocks(n)) {
				break
			}
			w.a.Sent(1, n)
			sentBlocks += wire.Blocks(n)
			if rng.IntN(100) == 0 { // lost on the wire
				lost++
				continue
			}
			if !w.b.Received(w.now, 1, n) {
				t.Fatalf("round %d: B overrun: held %d of 100 blocks", round, w.b.Held(1))
			}
			held = append(held, n)
		}
		for len(held) > 0 && rng.IntN(3) > 0 {
			w.b.Release(1, held[0])
			held = held[1:]
		}
		w.now += 100 * time.Microsecond
		w.exchange()
	}
	if sentBlocks < 20*4096 || lost == 0 {
		t.Fatalf("only %d blocks sent (%d packets lost): the counts did not wrap", sentBlocks, lost)
	}
	if w.b.Counters.ExcessiveBufferOverrunErrors != 0 {
		t.Fatalf("overruns: %+v", w.b.Counters)
	}
	// Everything released: the whole buffer is granted again, lost
	// packets' blocks included (ABR follows FCTBS).
	for _, n := range held {
		w.b.Release(1, n)
	}
	w.run(20 * time.Millisecond)
	if !w.a.Fits(1, 100) || w.a.Fits(1, 101) {
		t.Fatal("credits leaked or grew after losses")
	}
}

// A far end that goes silent takes the link down within DownAfter; when
// it speaks again the link comes back; a far end that restarts with
// fresh counts is noticed (LinkDowned) and the counts restart.
func TestLiveness(t *testing.T) {
	w := newPair(64)
	w.run(30 * time.Millisecond)
	w.mute[1] = true
	w.run(DefaultDownAfter + 5*time.Millisecond)
	if p, l := w.a.State(); p != PhysPolling || l != LogicalDown || w.a.Counters.LinkDowned != 1 {
		t.Fatalf("A after B went silent: %v/%v, %+v", p, l, w.a.Counters)
	}
	w.mute[1] = false
	w.run(40 * time.Millisecond)
	up(t, w.a, "A, B back")
	up(t, w.b, "B back")

	// B restarts: a new endpoint, counts at zero.
	w.a.Sent(0, 4000)
	w.b = NewEndpoint(2, 64, true)
	w.run(500 * time.Millisecond) // and stays up: no Init bouncing between the ends
	if w.b.Counters.LinkDowned != 0 {
		t.Fatalf("the restarted end saw the link go down %d times", w.b.Counters.LinkDowned)
	}
	up(t, w.a, "A after B's restart")
	up(t, w.b, "restarted B")
	if w.a.Counters.LinkDowned != 2 {
		t.Fatalf("A's LinkDowned %d, want 2", w.a.Counters.LinkDowned)
	}
	if !w.a.Fits(0, 64) || w.a.Fits(0, 65) {
		t.Fatal("credits after the far end restarted")
	}
}

// Without a subnet manager's word a port stays in Init: data neither
// goes nor comes; VL15 does.
func TestManagedPort(t *testing.T) {
	w := &wirePair{a: NewEndpoint(1, 64, false), b: NewEndpoint(1, 64, false)}
	w.run(30 * time.Millisecond)
	if p, l := w.a.State(); p != PhysLinkUp || l != LogicalInit {
		t.Fatalf("%v/%v, want LinkUp/Init", p, l)
	}
	if w.a.Fits(0, 1) || !w.a.Fits(15, 1) || w.b.Received(w.now, 0, 100) || !w.b.Received(w.now, 15, 100) {
		t.Fatal("data crossed a port in Init, or VL15 did not")
	}
	w.a.SetLogical(LogicalActive)
	w.b.SetLogical(LogicalActive)
	if !w.a.Fits(0, 1) {
		t.Fatal("an Active port has no credit")
	}
}

// Whatever a datagram holds, the cable counts it and goes on: no panic,
// and only a packet with a right VCRC reaches the owner.
func FuzzPacket(f *testing.F) {
	var fc [wire.FlowControlLen]byte
	f.Add([]byte(wire.BuildFlowControl(fc[:], wire.FlowControlInit, 0, 0, 0)))
	f.Add([]byte(wire.BuildFlowControl(fc[:], wire.FlowControlNormal, 0, 10, 300)))
	pkt := make([]byte, 128)
	f.Add(pkt[:packet(pkt, 64, 0, 1)])
	f.Fuzz(func(t *testing.T, data []byte) {
		k := &Cable{ep: NewEndpoint(2, 128, true)}
		k.ep.up(0)
		k.ep.peerUp = true
		for i := range 2 {
			k.ep.tx[i].granted = true
		}
		k.packet(time.Millisecond, data, func(p []byte) bool {
			if _, ok := checkVCRC(p); !ok {
				t.Fatalf("a packet with a bad VCRC reached the owner: % x", p)
			}
			return true
		})
	})
}
