package vswitch

import (
	"fmt"
	"testing"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// Fabric is an in-memory IB fabric for tests: switches joined by cables,
// hosts on some switch ports, and the owner's side of the link layer
// (credit-based flow control per VL) done the way a switch's owner does
// it. Step moves the fabric one round: hosts inject what their credits
// allow, every switch port sends what its credits allow straight into the
// peer's Input, hosts take what reaches them, Freed returns credits
// upstream, and the clock advances by Tick with Expire applied.
//
// A cable's credits for a VL are the receiver's free blocks: the sender
// may send a packet of b blocks when credits ≥ b and then owes them; the
// receiving switch's Freed gives them back. A fabric that respects
// credits never counts ExcessiveBufferOverrunErrors (Check verifies it).
type Fabric struct {
	tb       testing.TB
	Switches []*Switch
	Hosts    []*Host
	Now      time.Duration
	Tick     time.Duration
	// Sent counts the packets each switch port sent to another switch,
	// per VL.
	Sent map[End]*[16]int

	peer    map[End]End      // cable ends, both ways; a host end has Switch -1
	credits map[End]*[16]int // credits to send into a switch port, per VL
	hostAt  map[End]*Host    // switch port → its host
	order   []End            // switch ports with a cable, in a fixed order
}

// End is a switch port, or a host (Switch -1, Port = host index).
type End struct{ Switch, Port int }

// Host is an end node: it injects its Backlog in order, on VL InjectVL,
// and counts what it receives.
type Host struct {
	LID      uint16
	At       End // the switch port it is cabled to
	InjectVL uint8
	Backlog  [][]byte
	Sent     int
	Got      int
	GotFrom  map[uint16]int // by SLID
}

func NewFabric(tb testing.TB) *Fabric {
	return &Fabric{tb: tb, Tick: time.Microsecond, peer: map[End]End{}, credits: map[End]*[16]int{}, hostAt: map[End]*Host{}, Sent: map[End]*[16]int{}}
}

// AddSwitch adds a switch and returns its index.
func (f *Fabric) AddSwitch(c Config) int {
	f.Switches = append(f.Switches, newSwitch(f.tb, c))
	return len(f.Switches) - 1
}

func (f *Fabric) fullCredits(e End) *[16]int {
	var c [16]int
	for vl := range f.Switches[e.Switch].cfg.VLs {
		c[vl] = f.Switches[e.Switch].cfg.BufferBlocks
	}
	return &c
}

// Connect cables switch port a to switch port b.
func (f *Fabric) Connect(a, b End) {
	f.peer[a], f.peer[b] = b, a
	f.credits[a], f.credits[b] = f.fullCredits(a), f.fullCredits(b)
	f.order = append(f.order, a, b)
	f.Sent[a], f.Sent[b] = new([16]int), new([16]int)
}

// AttachHost cables a new host with LID lid to switch port at.
func (f *Fabric) AttachHost(at End, lid uint16) *Host {
	h := &Host{LID: lid, At: at, GotFrom: map[uint16]int{}}
	f.Hosts = append(f.Hosts, h)
	f.hostAt[at] = h
	f.credits[at] = f.fullCredits(at)
	f.order = append(f.order, at)
	return h
}

// Step runs one round and returns how many packets moved (injected,
// forwarded between switches or delivered).
func (f *Fabric) Step() int {
	moved := 0
	for _, h := range f.Hosts {
		cr := f.credits[h.At]
		for len(h.Backlog) > 0 {
			b := h.Backlog[0]
			n := blocksOf(len(b))
			if cr[h.InjectVL] < n {
				break
			}
			cr[h.InjectVL] -= n
			must(f.tb, f.Switches[h.At.Switch].Input(f.Now, h.At.Port, b))
			h.Backlog = h.Backlog[1:]
			h.Sent++
			moved++
		}
	}
	for _, e := range f.order {
		s := f.Switches[e.Switch]
		if h := f.hostAt[e]; h != nil {
			s.Output(f.Now, e.Port, always, func(b []byte) {
				var p wire.Packet
				if err := wire.ParseIB(b, &p); err != nil {
					f.tb.Fatalf("host %#x got a bad packet: %v", h.LID, err)
				}
				if d := p.LRH().DLID(); d != h.LID {
					f.tb.Fatalf("host %#x got a packet for %#x", h.LID, d)
				}
				h.Got++
				h.GotFrom[p.LRH().SLID()]++
				moved++
			})
			continue
		}
		to := f.peer[e]
		cr, sent := f.credits[to], f.Sent[e]
		s.Output(f.Now, e.Port, func(vl uint8, blocks int) bool {
			if cr[vl] < blocks {
				return false
			}
			cr[vl] -= blocks
			return true
		}, func(b []byte) {
			must(f.tb, f.Switches[to.Switch].Input(f.Now, to.Port, b))
			sent[wire.LRH(b).VL()]++
			moved++
		})
	}
	for i, s := range f.Switches {
		s.Freed(func(in int, vl uint8, blocks int) {
			f.credits[End{i, in}][vl] += blocks
		})
	}
	f.Now += f.Tick
	for _, s := range f.Switches {
		s.Expire(f.Now)
	}
	return moved
}

// Run steps until every host's backlog is delivered, or nothing has moved
// for idle rounds (a deadlock), or max rounds. It reports whether all was
// delivered.
func (f *Fabric) Run(max, idle int) (done bool, rounds int) {
	still := 0
	for rounds < max {
		moved := f.Step()
		rounds++
		if f.Delivered() == f.Total() {
			return true, rounds
		}
		if moved == 0 {
			if still++; still == idle {
				return false, rounds
			}
		} else {
			still = 0
		}
	}
	return false, rounds
}

// Total is the number of packets the hosts were given to send.
func (f *Fabric) Total() int {
	n := 0
	for _, h := range f.Hosts {
		n += h.Sent + len(h.Backlog)
	}
	return n
}

// Delivered is the number of packets the hosts received.
func (f *Fabric) Delivered() int {
	n := 0
	for _, h := range f.Hosts {
		n += h.Got
	}
	return n
}

// Check fails the test if a switch dropped a packet (credits ignored,
// relay errors, discards, bad packets) or if credits and held blocks
// disagree.
func (f *Fabric) Check() {
	f.tb.Helper()
	for i, s := range f.Switches {
		for p := 0; p <= s.cfg.Ports; p++ {
			c := s.Counters(p)
			if c.ExcessiveBufferOverrunErrors+c.PortRcvErrors+c.PortRcvSwitchRelayErrors+c.PortXmitDiscards != 0 {
				f.tb.Errorf("switch %d port %d dropped packets: %+v", i, p, c)
			}
			cr, ok := f.credits[End{i, p}]
			if !ok {
				continue
			}
			for vl := range s.cfg.VLs {
				if cr[vl]+s.Held(p, uint8(vl)) > s.cfg.BufferBlocks {
					f.tb.Errorf("switch %d port %d VL%d: credits %d + held %d > %d", i, p, vl, cr[vl], s.Held(p, uint8(vl)), s.cfg.BufferBlocks)
				}
			}
		}
	}
}

// Ring is n switches in a ring, each with a host on port 1 (host i has
// LID i+1); switch i's port 2 is cabled to switch i+1's port 3, and every
// route goes that way (clockwise), so all-to-all traffic has a cyclic
// channel dependency. The link from switch n-1 to switch 0 is the
// dateline.
type Ring struct {
	*Fabric
	N int
}

const (
	ringHost = 1
	ringNext = 2
	ringPrev = 3
)

// NewRing builds the ring. Every SL maps to VL0 everywhere: one VL, with
// the dateline yet to be set (Dateline).
func NewRing(tb testing.TB, n int, c Config) *Ring {
	c.Ports = 3
	r := &Ring{Fabric: NewFabric(tb), N: n}
	for range n {
		r.AddSwitch(c)
	}
	for i := range n {
		r.Connect(End{i, ringNext}, End{(i + 1) % n, ringPrev})
		r.AttachHost(End{i, ringHost}, uint16(i+1))
	}
	var vl0 [16]uint8
	for i, s := range r.Switches {
		for j := range n {
			port := ringNext
			if j == i {
				port = ringHost
			}
			must(tb, s.SetLFT(uint16(j+1), port))
		}
		for in := 0; in <= 3; in++ {
			for out := 0; out <= 3; out++ {
				must(tb, s.SetSL2VL(in, out, vl0))
			}
		}
	}
	return r
}

// Crosses reports whether the route from host src to host dst crosses the
// dateline: the SL its packets use (1 if so, 0 if not), as a path record
// would give it.
func (r *Ring) Crosses(src, dst int) bool { return dst < src }

// AllToAll gives every host perPair packets of payload bytes to each
// other host, interleaved by destination, with the SL Crosses gives.
func (r *Ring) AllToAll(perPair, payload int) {
	for src, h := range r.Hosts {
		for k := range perPair {
			for d := 1; d < r.N; d++ {
				dst := (src + d) % r.N
				var sl uint8
				if r.Crosses(src, dst) {
					sl = 1
				}
				h.Backlog = append(h.Backlog, build(r.tb, pkt{
					VL: h.InjectVL, SL: sl, DLID: uint16(dst + 1), SLID: h.LID,
					Payload: payload, PSN: uint32(k),
				}))
			}
		}
	}
}

// Dateline sets the SL-to-VL tables that break the ring's cycle: packets
// of SL1 (routes that cross the dateline) move to VL1 on the dateline link
// and stay on VL1 until they leave the ring; everything else is on VL0.
// The tables are computed by walking every route, and a (switch, input,
// output) pair that would need both VLs for SL1 fails the test (a ring
// larger than 4 with all-to-all clockwise routes needs more SLs).
func (r *Ring) Dateline() {
	type hop struct{ sw, in, out int }
	need := map[hop]uint8{}
	for src := range r.N {
		for dst := range r.N {
			if src == dst || !r.Crosses(src, dst) {
				continue
			}
			crossed := false
			in := ringHost
			for sw := src; ; sw = (sw + 1) % r.N {
				out := ringNext
				if sw == dst {
					out = ringHost
				}
				if sw == r.N-1 && out == ringNext {
					crossed = true // leaving on the dateline link
				}
				var vl uint8
				if crossed {
					vl = 1
				}
				h := hop{sw, in, out}
				if v, ok := need[h]; ok && v != vl {
					r.tb.Fatalf("dateline: switch %d %d→%d needs VL0 and VL1 for SL1", sw, in, out)
				}
				need[h] = vl
				if out == ringHost {
					break
				}
				in = ringPrev
			}
		}
	}
	for h, vl := range need {
		s := r.Switches[h.sw]
		t := s.SL2VL(h.in, h.out)
		t[1] = vl
		must(r.tb, s.SetSL2VL(h.in, h.out, t))
	}
}

// RingFull reports whether every ring link's input buffer (VL0) is too
// full to take another packet of the given size.
func (r *Ring) RingFull(pktLen int) bool {
	for _, s := range r.Switches {
		if s.Held(ringPrev, 0)+blocksOf(pktLen) <= s.cfg.BufferBlocks {
			return false
		}
	}
	return true
}

func (r *Ring) String() string {
	s := ""
	for i, sw := range r.Switches {
		s += fmt.Sprintf("sw%d: host in %d/%d, ring in VL0 %d VL1 %d blocks; ", i,
			sw.Held(ringHost, 0), sw.cfg.BufferBlocks, sw.Held(ringPrev, 0), sw.Held(ringPrev, 1))
	}
	return s
}

func TestRingDeadlock(t *testing.T) {
	const perPair, payload = 40, 64
	plen := len(build(t, pkt{Payload: payload}))
	c := Config{VLs: 2, BufferBlocks: 4 * blocksOf(plen)}

	// One VL: the ring fills up and stops.
	r := NewRing(t, 4, c)
	r.AllToAll(perPair, payload)
	done, rounds := r.Run(100000, 200)
	if done {
		t.Fatalf("all %d packets delivered in %d rounds without a dateline: no deadlock", r.Total(), rounds)
	}
	if !r.RingFull(plen) {
		t.Errorf("stopped with ring buffers not full: %v", r)
	}
	for range 1000 {
		if r.Step() != 0 {
			t.Fatal("deadlocked ring moved again")
		}
	}
	t.Logf("no dateline: deadlock after %d rounds, %d of %d delivered; %v", rounds, r.Delivered(), r.Total(), r)
	r.Check()

	// The same traffic with a dateline: everything arrives.
	r = NewRing(t, 4, c)
	r.Dateline()
	r.AllToAll(perPair, payload)
	done, rounds = r.Run(100000, 200)
	if !done {
		t.Fatalf("dateline: stopped after %d rounds, %d of %d delivered: %v", rounds, r.Delivered(), r.Total(), r)
	}
	t.Logf("dateline: %d packets delivered in %d rounds", r.Total(), rounds)
	for i, h := range r.Hosts {
		for j := range r.Hosts {
			if j != i && h.GotFrom[uint16(j+1)] != perPair {
				t.Errorf("host %d got %d packets from host %d, want %d", i, h.GotFrom[uint16(j+1)], j, perPair)
			}
		}
	}
	r.Check()
	// The dateline link carried VL1 only; VL1 went on after it and
	// stopped before it.
	for i, want := range []struct{ vl0, vl1 bool }{{true, true}, {true, true}, {true, false}, {false, true}} {
		got := r.Sent[End{i, ringNext}]
		if (got[0] > 0) != want.vl0 || (got[1] > 0) != want.vl1 {
			t.Errorf("link %d→%d: %d packets on VL0, %d on VL1", i, (i+1)%4, got[0], got[1])
		}
	}
	t.Logf("packets per ring link, VL0/VL1: %d/%d %d/%d %d/%d %d/%d",
		r.Sent[End{0, 2}][0], r.Sent[End{0, 2}][1], r.Sent[End{1, 2}][0], r.Sent[End{1, 2}][1],
		r.Sent[End{2, 2}][0], r.Sent[End{2, 2}][1], r.Sent[End{3, 2}][0], r.Sent[End{3, 2}][1])
}
