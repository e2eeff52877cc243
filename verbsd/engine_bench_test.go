package verbsd

import (
	"testing"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// BenchmarkEngineMessage is the engine's own work for one 8-byte SEND of
// send_lat --loopback, in one goroutine: the client's side writes the
// send WQE and a receive into their rings, the engine runs one round
// (step: the SQ, the request and its ACK without frames, the CQ rings),
// and the client's side takes the two completions. No second core, no
// wait: ns/op is what the engine's round costs per message, on top of
// which the real thing pays the trips between cores.
func BenchmarkEngineMessage(b *testing.B) { benchmarkEngine(b, false, 0) }

// BenchmarkEngineMessageOthers is the same beside 64 idle QPs of other
// clients, each with its CQ, idle long enough to be cold (coldAfter):
// what a message costs more than alone is what the rounds spend on each
// QP and CQ of the device.
func BenchmarkEngineMessageOthers(b *testing.B) { benchmarkEngine(b, false, 64) }

// BenchmarkEngineIdleRound is one round of the same engine with nothing
// to do.
func BenchmarkEngineIdleRound(b *testing.B) { benchmarkEngine(b, true, 0) }

func benchmarkEngine(b *testing.B, idle bool, others int) {
	cap := vhca.QPCap{MaxSendWR: 64, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	e, h, mr, sides := newEnginePair(b, cap)
	s, dev, pd := sides[0].r.s, h.dev, sides[0].r.qp.PD
	// The other clients' rings in page-aligned memory, laid out as
	// createQP lays them out in their memfds.
	pages := func(n int) []byte {
		m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Munmap(m) })
		return m
	}
	newRing := func(m []byte, kind abi.Kind, n, size int) *abi.Ring {
		r, err := abi.NewRing(m, kind, n, size)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	for range others {
		cq, err := dev.CreateCQ(16)
		if err != nil {
			b.Fatal(err)
		}
		c := &cqRing{s: s, cq: cq, ring: newRing(pages(abi.RingSize(16, abi.CQESize)), abi.KindCQ, 16, abi.CQESize)}
		cq.Ring = c
		h.addCQ(c, e.rounds)
		e.cqOf[cq] = c
		qp, err := dev.CreateQP(pd, vhca.QPInitAttr{Type: vhca.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
		if err != nil {
			b.Fatal(err)
		}
		r := &qpRings{s: s, qp: qp, cap: cap}
		sqBytes, rqBytes := abi.RingSize(64, abi.SendWQESize(1, 64)), abi.RingSize(512, abi.RecvWQESize(1))
		sqOff, rqOff, total := qpLayout(qp.Num, sqBytes, rqBytes)
		m := pages(total)
		r.sq = newRing(m[sqOff:], abi.KindSQ, 64, abi.SendWQESize(1, 64))
		r.rq = newRing(m[rqOff:], abi.KindRQ, 512, abi.RecvWQESize(1))
		h.addQP(r, e.rounds)
		e.qpOf[qp] = r
	}
	// Receives enough for the run, as perf's rx-depth.
	postRecv := func(x engineSide) {
		w := abi.RecvWQE(x.rq.Slot(0))
		w.SetWRID(7)
		w.SetNumSGE(1)
		w.SGE(0).Set(0x10000+0x8000, 64, mr.Key)
		x.rq.Publish(1)
	}
	for _, x := range sides {
		for range 256 {
			postRecv(x)
		}
	}
	payload := []byte("8 bytes!")
	post := func(x engineSide) {
		w := abi.SendWQE(x.sq.Slot(0))
		w.SetWRID(1)
		w.SetOpcode(uint8(vhca.WRSend))
		w.SetFlags(uint16(vhca.SendSignaled | vhca.SendInline))
		w.SetInlineLen(len(payload))
		copy(w.Inline(), payload)
		x.sq.Publish(1)
	}
	// take consumes the next completion of a side's CQ ring.
	take := func(x engineSide, recv bool) {
		if x.cq.Available(1) != 1 {
			b.Fatal("no completion")
		}
		c := abi.CQE(x.cq.Peek(0))
		if c.Status() != 0 || (vhca.WCOpcode(c.Opcode())&vhca.WCRecv != 0) != recv {
			b.Fatalf("completion status %d opcode %d, want a receive: %v", c.Status(), c.Opcode(), recv)
		}
		x.cq.Consume(1)
	}
	round := func(i int) {
		from, to := sides[i&1], sides[1-i&1]
		post(from)
		// A cold QP's WQE (the first after the others' idle rounds)
		// waits for a round that looks at the cold rings.
		for n := 0; !e.step(); n++ {
			if n == coldEvery {
				b.Fatal("no work")
			}
		}
		take(to, true)
		take(from, false)
		postRecv(to)
	}
	if others > 0 {
		for range coldAfter + lookEvery {
			e.step() // the others go cold, idle
		}
	}
	for i := range 600 {
		round(i) // warm up: and past the first turns
	}
	b.ReportAllocs()
	if idle {
		// A round that finds nothing: what a message posted just after
		// one began waits for, at most.
		for b.Loop() {
			e.step()
		}
		return
	}
	i := 0
	for b.Loop() {
		round(i)
		i++
	}
}
