package vhca

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// pairs makes n connected RC QP pairs between two devices.
func pairs(t *testing.T, n int) (da, db *Device, as, bs []*endpoint) {
	da, db = testDevice(t, 1), testDevice(t, 2)
	for range n {
		a, b := newEndpoint(t, da, QPTypeRC, 1<<16, 1), newEndpoint(t, db, QPTypeRC, 1<<16, 2)
		connectWith(t, a, b, defaultConn())
		as, bs = append(as, a), append(bs, b)
	}
	return
}

// TestTransmitRoundRobin: QPs with packets to send take turns, one
// packet each (net.go Transmit), so that a long message on one QP does
// not hold the others back.
func TestTransmitRoundRobin(t *testing.T) {
	da, db, as, bs := pairs(t, 3)
	s := newXSim(t, da, db)
	for k, a := range as {
		postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, uint32(20+10*k)<<10), RemoteAddr: bs[k].addr(0), RKey: bs[k].mr.Key})
	}
	s.must(1e9, "WRITEs", func() bool { return as[0].scq.Len()+as[1].scq.Len()+as[2].scq.Len() == 3 })
	var order []uint32
	for _, p := range s.sentBy(0) {
		order = append(order, p.DestQP)
	}
	if len(order) != 20+30+40 {
		t.Fatalf("%d packets", len(order))
	}
	// 20 rounds of three, then 10 of two, then 10 of one.
	for i, q := range order {
		var want uint32
		switch {
		case i < 60:
			want = bs[i%3].qp.Num
		case i < 80:
			want = bs[1+(i-60)%2].qp.Num
		default:
			want = bs[2].qp.Num
		}
		if q != want {
			t.Fatalf("packet %d for QP %d, want %d: order %v", i, q, want, order)
		}
	}
}

// TestDestroyQPWhileScheduled: packets for a destroyed QP are counted as
// for no QP; a QP destroyed with a WRITE outstanding and its timer running
// sends nothing more; the other QPs are not disturbed.
func TestDestroyQPWhileScheduled(t *testing.T) {
	da, db, as, bs := pairs(t, 3)
	s := newXSim(t, da, db)
	for k, a := range as {
		for i := range 4096 {
			a.mem[i] = byte(i + k)
		}
		postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 4096), RemoteAddr: bs[k].addr(0), RKey: bs[k].mr.Key})
	}
	// B's second QP goes before it can acknowledge.
	gone := bs[1].qp.Num
	if err := db.DestroyQP(bs[1].qp); err != nil {
		t.Fatal(err)
	}
	s.must(1e9, "WRITEs", func() bool { return as[0].scq.Len() == 1 && as[2].scq.Len() == 1 })
	for _, k := range []int{0, 2} {
		if got := summarize(drain(as[k].scq)); !equalSummaries(got, []wcSummary{{1, WCSuccess}}) {
			t.Fatalf("QP %d: %+v", k, got)
		}
		if !bytes.Equal(bs[k].mem[:4096], as[k].mem[:4096]) {
			t.Fatalf("QP %d: data", k)
		}
	}
	toGone := func() int {
		n := 0
		for _, p := range s.sentBy(0) {
			if p.DestQP == gone {
				n++
			}
		}
		return n
	}
	if n := toGone(); n != 4 || db.Ports[0].Counters.RcvNoQP != 4 {
		t.Fatalf("%d packets for the destroyed QP, %d counted as for no QP; want 4 and 4", n, db.Ports[0].Counters.RcvNoQP)
	}
	// A's second QP waits for an ACK that will not come; destroy it
	// with its retransmission timer running.
	if as[1].qp.req.timer == 0 || as[1].scq.Len() != 0 {
		t.Fatalf("A's second QP: timer %d, %d completions", as[1].qp.req.timer, as[1].scq.Len())
	}
	if err := da.DestroyQP(as[1].qp); err != nil {
		t.Fatal(err)
	}
	s.run(10*ackTimeout(defaultConn().Timeout), nil)
	if n := toGone(); n != 4 {
		t.Fatalf("the destroyed QP sent %d packets more", n-4)
	}
	if as[1].scq.Len() != 0 {
		t.Fatalf("completions of a destroyed QP: %+v", drain(as[1].scq))
	}
	if err := da.DestroyQP(as[1].qp); err != ErrNoSuchObject {
		t.Errorf("second DestroyQP: %v", err)
	}
}

// TestQPRingModel checks the transmit ring against a slice: pushes, pops
// and removals in random order, through growth and wrap-around.
func TestQPRingModel(t *testing.T) {
	qps := make([]*QP, 64)
	for i := range qps {
		qps[i] = &QP{Num: uint32(i)}
	}
	r := rand.New(rand.NewPCG(1, 2))
	var ring qpRing
	var model []*QP
	in := map[*QP]bool{}
	for step := range 200000 {
		switch op := r.IntN(3); {
		case op == 0 || len(model) == 0:
			q := qps[r.IntN(len(qps))]
			if in[q] {
				continue
			}
			ring.push(q)
			model = append(model, q)
			in[q] = true
		case op == 1:
			got := ring.pop()
			if got != model[0] {
				t.Fatalf("step %d: pop %d, want %d", step, got.Num, model[0].Num)
			}
			model = model[1:]
			delete(in, got)
		default:
			q := qps[r.IntN(len(qps))]
			ring.remove(q)
			if in[q] {
				for i, m := range model {
					if m == q {
						model = append(model[:i:i], model[i+1:]...)
						break
					}
				}
				delete(in, q)
			}
		}
		if ring.n != len(model) {
			t.Fatalf("step %d: ring holds %d, model %d", step, ring.n, len(model))
		}
	}
	for len(model) > 0 {
		if got := ring.pop(); got != model[0] {
			t.Fatalf("final pop %d, want %d", got.Num, model[0].Num)
		}
		model = model[1:]
	}
}
