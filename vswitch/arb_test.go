package vswitch

import (
	"math"
	"testing"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// arbRig is one output port (3) fed by two inputs that are always full:
// input 1 with packets a, input 2 with packets b.
type arbRig struct {
	t    *testing.T
	s    *Switch
	a, b []byte
}

func newArbRig(t *testing.T, a, b pkt) *arbRig {
	// Buffers of more than OutputBatch packets of any size: no queue runs
	// dry within an Output call.
	s := newSwitch(t, Config{Ports: 3, VLs: 2, BufferBlocks: 66 * (OutputBatch + 1)})
	must(t, s.SetLFT(3, 3))
	a.DLID, b.DLID = 3, 3
	return &arbRig{t: t, s: s, a: build(t, a), b: build(t, b)}
}

func (r *arbRig) fill() {
	for _, f := range []struct {
		in int
		p  []byte
	}{{1, r.a}, {2, r.b}} {
		vl := wire.LRH(f.p).VL()
		for r.s.Held(f.in, vl)+blocksOf(len(f.p)) <= r.s.cfg.BufferBlocks {
			input(r.t, r.s, 0, f.in, f.p)
		}
	}
}

// run sends n packets and returns the VL of each and the bytes per VL.
func (r *arbRig) run(n int) (seq []uint8, bytes [16]int) {
	for len(seq) < n {
		r.fill()
		r.s.Output(0, 3, always, func(b []byte) {
			vl := wire.LRH(b).VL()
			seq = append(seq, vl)
			bytes[vl] += len(b)
		})
	}
	return seq, bytes
}

func TestVLArbWeights(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pa, pb     int // payload sizes on VL0, VL1
		w0, w1     uint8
		wantRatio  float64 // bytes VL1 / VL0
		packetsOut int
	}{
		{"64B 1:4", 64, 64, 1, 4, 4, 20000},
		{"4096B vs 64B 1:4", 4096, 64, 1, 4, 4, 40000},
		{"64B vs 2048B 1:4", 64, 2048, 1, 4, 4, 20000},
		{"1000B 3:5", 1000, 1000, 3, 5, 5.0 / 3, 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newArbRig(t, pkt{VL: 0, SL: 0, Payload: tc.pa}, pkt{VL: 1, SL: 1, Payload: tc.pb})
			must(t, r.s.SetVLArb(3, nil, []VLArbEntry{{0, tc.w0}, {1, tc.w1}}, 0))
			_, by := r.run(tc.packetsOut)
			ratio := float64(by[1]) / float64(by[0])
			if math.Abs(ratio/tc.wantRatio-1) > 0.05 {
				t.Errorf("bytes VL1/VL0 = %d/%d = %.3f, want %.3f ±5%%", by[1], by[0], ratio, tc.wantRatio)
			}
			t.Logf("bytes VL1/VL0 = %.4f", ratio)
		})
	}
}

func TestVLArbSkipsEmptyAndZeroWeight(t *testing.T) {
	r := newArbRig(t, pkt{VL: 0, Payload: 64}, pkt{VL: 1, SL: 1, Payload: 64})
	// VL1 only in an entry of weight 0: never served, VL0 has the port.
	must(t, r.s.SetVLArb(3, nil, []VLArbEntry{{1, 0}, {0, 1}}, 0))
	seq, _ := r.run(100)
	for _, vl := range seq {
		if vl != 0 {
			t.Fatal("VL1 served with weight 0")
		}
	}
	// VL0 with nothing to send: VL1 (weight 1) takes everything.
	s := newSwitch(t, Config{Ports: 3, VLs: 2, BufferBlocks: 64})
	must(t, s.SetLFT(3, 3))
	must(t, s.SetVLArb(3, nil, []VLArbEntry{{0, 200}, {1, 1}}, 0))
	for i := range 10 {
		input(t, s, 0, 2, build(t, pkt{VL: 1, SL: 1, DLID: 3, PSN: uint32(i)}))
	}
	if got := drain(s, 0, 3); len(got) != 10 {
		t.Fatalf("sent %d", len(got))
	}
}

func TestVLArbHighLimit(t *testing.T) {
	run := func(limit uint8) []uint8 {
		r := newArbRig(t, pkt{VL: 0, Payload: 64}, pkt{VL: 1, SL: 1, Payload: 64})
		must(t, r.s.SetVLArb(3, []VLArbEntry{{1, 255}}, []VLArbEntry{{0, 255}}, limit))
		seq, _ := r.run(2000)
		return seq
	}
	size := len(build(t, pkt{Payload: 64}))

	// Limit 1 (4096 bytes): high-priority packets up to the limit, then
	// one low-priority packet.
	seq := run(1)
	burst := (4096 + size - 1) / size // the packet crossing the limit completes
	if seq[0] != 1 {
		t.Fatal("high-priority VL not served first")
	}
	runs := 0
	for i := 0; i < len(seq); {
		j := i
		for j < len(seq) && seq[j] == 1 {
			j++
		}
		if j == len(seq) {
			break
		}
		if j-i != burst {
			t.Fatalf("high burst of %d packets at %d, want %d", j-i, i, burst)
		}
		if j+1 < len(seq) && seq[j+1] != 1 {
			t.Fatalf("two low-priority packets in a row at %d", j)
		}
		runs++
		i = j + 1
	}
	if runs < 10 {
		t.Fatalf("only %d bursts", runs)
	}

	// Limit 0: one high packet, then a low one.
	seq = run(0)
	for i, vl := range seq {
		if vl != uint8(1-i%2) {
			t.Fatalf("limit 0: packet %d on VL%d", i, vl)
		}
	}

	// Limit 255: the low table starves while the high one has packets.
	for _, vl := range run(255) {
		if vl != 1 {
			t.Fatal("limit 255: low-priority packet sent")
		}
	}
}

// TestVLArbHighWithoutCredit: a high-priority VL refused credit lets the
// low table send, and counts PortXmitWait.
func TestVLArbHighWithoutCredit(t *testing.T) {
	r := newArbRig(t, pkt{VL: 0, Payload: 64}, pkt{VL: 1, SL: 1, Payload: 64})
	must(t, r.s.SetVLArb(3, []VLArbEntry{{1, 255}}, []VLArbEntry{{0, 255}}, 255))
	r.fill()
	var seq []uint8
	n := r.s.Output(0, 3, func(vl uint8, _ int) bool { return vl == 0 }, func(b []byte) { seq = append(seq, wire.LRH(b).VL()) })
	if n != OutputBatch || len(seq) != n {
		t.Fatalf("sent %d", n)
	}
	for _, vl := range seq {
		if vl != 0 {
			t.Fatal("VL1 sent without credit")
		}
	}
	if r.s.Counters(3).PortXmitWait != 1 {
		t.Error("PortXmitWait")
	}
}

// TestVLArbRoundRobinInputs: two inputs on the same VL share the port
// packet by packet.
func TestVLArbRoundRobinInputs(t *testing.T) {
	r := newArbRig(t, pkt{VL: 0, Payload: 64, PSN: 1}, pkt{VL: 0, Payload: 64, PSN: 2})
	var got []uint32
	for range 10 {
		r.fill()
		r.s.Output(time.Duration(0), 3, always, func(b []byte) { got = append(got, psnOf(b)) })
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("input %d served twice in a row at %d", got[i], i)
		}
	}
}

// TestArbTableDebt: an entry whose packets are much larger than its
// weight is served once its overdraft is paid, without spinning.
func TestArbTableDebt(t *testing.T) {
	var tb arbTable
	tb.set([]VLArbEntry{{0, 1}, {1, 1}}, 2)
	const big = 4222
	sent := [2]int{}
	for range 1000 {
		i := tb.pick(1<<0 | 1<<1)
		n := 100
		if tb.e[i].vl == 0 {
			n = big
		}
		tb.charge(i, n)
		sent[tb.e[i].vl] += n
	}
	if r := float64(sent[0]) / float64(sent[1]); math.Abs(r-1) > 0.05 {
		t.Errorf("equal weights, bytes %v", sent)
	}
	// Only the indebted entry ready: it is served at once.
	tb.set([]VLArbEntry{{0, 1}}, 1)
	i := tb.pick(1)
	tb.charge(i, big)
	if tb.pick(1) != 0 {
		t.Fatal("pick")
	}
}
