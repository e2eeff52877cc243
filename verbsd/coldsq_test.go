package verbsd

import (
	"math/rand/v2"
	"testing"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
)

// coldPair is newEnginePair's two QPs and CQs, hot when made, gone cold
// in a look round past coldAfter rounds of nothing.
func coldPair(t *testing.T) (e *engine, h *hca, mr *vhca.MR, x, y engineSide) {
	t.Helper()
	cap := vhca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	e, h, mr, sides := newEnginePair(t, cap)
	if h.qpOrder.hot != 2 || h.cqOrder.hot != 2 {
		t.Fatalf("%d hot QPs and %d hot CQs after creation, want 2 and 2", h.qpOrder.hot, h.cqOrder.hot)
	}
	e.rounds = coldAfter + lookEvery - 1
	e.step()
	if h.qpOrder.hot != 0 || h.cqOrder.hot != 0 {
		t.Fatalf("%d hot QPs and %d hot CQs after %d idle rounds, want none", h.qpOrder.hot, h.cqOrder.hot, e.rounds)
	}
	return e, h, mr, sides[0], sides[1]
}

// TestColdSendRings: a send ring idle for coldAfter rounds is looked at
// only every coldEvery rounds; a WQE there is taken at the next such
// round, and its QP is hot again, looked at every round.
func TestColdSendRings(t *testing.T) {
	e, h, mr, x, y := coldPair(t)
	e.step() // the next round looks at the cold rings: the post comes after it
	y.postRecv(mr.Key)
	x.postSend(1, "cold")
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
	if h.qpOrder.hot != 1 || h.qps[0] != x.r {
		t.Fatalf("after its WQE: %d hot, first %v; want x alone hot", h.qpOrder.hot, h.qps[0].qp.Num)
	}
	if x.cq.Available(1) != 1 || y.cq.Available(1) != 1 {
		t.Fatalf("completions: send %d, receive %d; want 1 and 1", x.cq.Available(1), y.cq.Available(1))
	}
	// Hot, it is looked at in the very next round.
	x.cq.Consume(1)
	s := abi.SendWQE(x.sq.Slot(0))
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
		case op == 2 && h.qpOrder.hot < len(h.qps):
			i := h.qpOrder.hot + rng.IntN(len(h.qps)-h.qpOrder.hot)
			hot[h.qps[i]] = true
			h.qpOrder.warm(i, h.swapQPs)
		case op == 3 && h.qpOrder.hot > 0:
			i := rng.IntN(h.qpOrder.hot)
			hot[h.qps[i]] = false
			h.qpOrder.cool(i, h.swapQPs)
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
			if hot[r] != (i < h.qpOrder.hot) {
				t.Fatalf("step %d: qps[%d] hot %v, want %v (hot %d)", step, i, i < h.qpOrder.hot, hot[r], h.qpOrder.hot)
			}
		}
		for _, r := range h.sqWatch[len(h.qps):cap(h.sqWatch)] {
			if r.word != nil {
				t.Fatalf("step %d: a dropped QP's ring still watched in the array's storage", step)
			}
		}
	}
}

// TestColdCQs: a CQ idle for coldAfter rounds has its arm word looked at
// only every coldEvery looks; an arm seen there, or a completion written
// into its ring, makes it hot again, looked at every look.
func TestColdCQs(t *testing.T) {
	e, h, mr, x, y := coldPair(t)
	// An arm of a cold CQ is seen at the next look at the cold ones, not
	// before.
	x.cq.Arm(false)
	for x.c.armSeen != x.cq.ArmRequest() {
		e.step()
		if e.rounds%lookEvery == 0 && e.rounds%(lookEvery*coldEvery) != 0 && x.c.armSeen == x.cq.ArmRequest() {
			t.Fatalf("look %d, not one at the cold CQs, saw the cold CQ's arm", e.rounds)
		}
		if e.rounds > coldAfter+2*lookEvery*coldEvery {
			t.Fatal("the cold CQ's arm never seen")
		}
	}
	if h.cqOrder.hot != 1 || h.cqs[0] != x.c {
		t.Fatalf("after its arm: %d hot CQs; want x's alone", h.cqOrder.hot)
	}
	// Hot, its next arm is seen within a look.
	x.cq.Arm(false)
	for range lookEvery {
		e.step()
	}
	if x.c.armSeen != x.cq.ArmRequest() {
		t.Fatal("a hot CQ's arm not seen within a look")
	}
	// A completion the device writes into y's ring itself (a receive)
	// makes y's CQ hot at the next look at the cold ones.
	y.postRecv(mr.Key)
	x.postSend(1, "warm")
	for y.cq.Available(1) == 0 || e.rounds%(lookEvery*coldEvery) != 1 {
		e.step()
		if e.rounds > coldAfter+4*lookEvery*coldEvery {
			t.Fatal("no receive completion, or no look at the cold CQs")
		}
	}
	if h.cqOrder.hot != 2 {
		t.Fatalf("%d hot CQs after y's completion, want 2", h.cqOrder.hot)
	}
	// Dropped, hot or cold, the rest keep their order.
	h.dropCQ(x.c)
	if len(h.cqs) != 1 || h.cqs[0] != y.c || h.cqOrder.hot != 1 {
		t.Fatalf("after x's CQ dropped: %d CQs, %d hot", len(h.cqs), h.cqOrder.hot)
	}
}
