package verbsd

import (
	"math/rand/v2"
	"testing"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
)

// TestColdSendRings: a send ring idle for coldAfter rounds is looked at
// only every coldEvery rounds; a WQE there is taken at the next such
// round, and its QP is hot again, looked at every round.
func TestColdSendRings(t *testing.T) {
	cap := vhca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	e, h, mr, sides := newEnginePair(t, cap)
	x, y := sides[0], sides[1]
	if h.hot != 2 {
		t.Fatalf("%d hot QPs after creation, want 2", h.hot)
	}
	// A look round past coldAfter rounds of nothing.
	e.rounds = coldAfter + lookEvery - 1
	e.step()
	if h.hot != 0 {
		t.Fatalf("%d hot QPs after %d idle rounds, want 0", h.hot, e.rounds)
	}
	e.step() // the next round looks at the cold rings: the post comes after it
	w := abi.RecvWQE(y.rq.Slot(0))
	w.SetWRID(7)
	w.SetNumSGE(1)
	w.SGE(0).Set(0x10000, 64, mr.Key)
	y.rq.Publish(1)
	s := abi.SendWQE(x.sq.Slot(0))
	s.SetWRID(1)
	s.SetOpcode(uint8(vhca.WRSend))
	s.SetFlags(uint16(vhca.SendSignaled | vhca.SendInline))
	s.SetInlineLen(4)
	copy(s.Inline(), "cold")
	x.sq.Publish(1)
	// Rounds that skip the cold rings leave it; the next that looks
	// takes it.
	rounds := 0
	for ; x.sq.Unconsumed() == 1; rounds++ {
		if rounds > coldEvery {
			t.Fatalf("the WQE of a cold QP waited %d rounds", rounds)
		}
		before := e.rounds
		e.step()
		if taken := x.sq.Unconsumed() == 0; taken != (before%coldEvery == 0) {
			t.Fatalf("round %d took the cold QP's WQE: %v", before, taken)
		}
	}
	if rounds != coldEvery {
		t.Fatalf("taken after %d rounds, want %d", rounds, coldEvery)
	}
	if h.hot != 1 || h.qps[0] != x.r {
		t.Fatalf("after its WQE: %d hot, first %v; want x alone hot", h.hot, h.qps[0].qp.Num)
	}
	if x.cq.Available(1) != 1 || y.cq.Available(1) != 1 {
		t.Fatalf("completions: send %d, receive %d; want 1 and 1", x.cq.Available(1), y.cq.Available(1))
	}
	// Hot, it is looked at in the very next round.
	x.cq.Consume(1)
	s = abi.SendWQE(x.sq.Slot(0))
	s.SetWRID(2)
	s.SetOpcode(uint8(vhca.WRRDMAWrite))
	s.SetFlags(uint16(vhca.SendSignaled))
	s.SetNumSGE(0)
	x.sq.Publish(1)
	for e.rounds%coldEvery == 0 {
		e.step()
	}
	e.step()
	if x.sq.Unconsumed() != 0 || x.cq.Available(1) != 1 {
		t.Fatalf("a hot QP's WQE not taken in a round that skips the cold ones")
	}
}

// TestQPPartition: whatever QPs come and go and warm and cool, qps and
// sqWatch stay in step, every QP is in them once, and the hot ones are
// those made hot and not cooled since.
func TestQPPartition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := &hca{}
	hot := map[*qpRings]bool{}
	var all []*qpRings
	for step := range 2000 {
		switch op := rng.IntN(4); {
		case op == 0 || len(all) == 0:
			m := make([]byte, abi.RingSize(1, abi.SendWQESize(1, 0)))
			ring, err := abi.NewRing(m, abi.KindSQ, 1, abi.SendWQESize(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			r := &qpRings{sq: ring}
			h.addQP(r, uint32(step))
			all = append(all, r)
			hot[r] = true
		case op == 1:
			k := rng.IntN(len(all))
			h.dropQP(all[k])
			delete(hot, all[k])
			all = append(all[:k], all[k+1:]...)
		case op == 2 && h.hot < len(h.qps):
			i := h.hot + rng.IntN(len(h.qps)-h.hot)
			hot[h.qps[i]] = true
			h.warm(i)
		case op == 3 && h.hot > 0:
			i := rng.IntN(h.hot)
			hot[h.qps[i]] = false
			h.cool(i)
		}
		if len(h.qps) != len(all) || len(h.sqWatch) != len(all) {
			t.Fatalf("step %d: %d QPs, %d watched, want %d", step, len(h.qps), len(h.sqWatch), len(all))
		}
		seen := map[*qpRings]bool{}
		for i, r := range h.qps {
			if word, _ := r.sq.Watch(); h.sqWatch[i].word != word {
				t.Fatalf("step %d: qps[%d] and sqWatch[%d] out of step", step, i, i)
			}
			if seen[r] {
				t.Fatalf("step %d: a QP twice", step)
			}
			seen[r] = true
			if hot[r] != (i < h.hot) {
				t.Fatalf("step %d: qps[%d] hot %v, want %v (hot %d)", step, i, i < h.hot, hot[r], h.hot)
			}
		}
		for _, r := range h.sqWatch[len(h.qps):cap(h.sqWatch)] {
			if r.word != nil {
				t.Fatalf("step %d: a dropped QP's ring still watched in the array's storage", step)
			}
		}
	}
}
