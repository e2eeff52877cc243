package vswitch

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softib/softib/vhca/wire"
)

func TestNewConfig(t *testing.T) {
	bad := []Config{
		{Ports: 0, VLs: 1, BufferBlocks: 8},
		{Ports: 255, VLs: 1, BufferBlocks: 8},
		{Ports: 4, VLs: 3, BufferBlocks: 8},
		{Ports: 4, VLs: 16, BufferBlocks: 8},
		{Ports: 4, VLs: 1, BufferBlocks: 0},
		{Ports: 4, VLs: 1, BufferBlocks: 8, LMC: 8},
		{Ports: 4, VLs: 1, BufferBlocks: 8, HOQLife: -1},
	}
	for _, c := range bad {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
	for _, vls := range []int{1, 2, 4, 8, 15} {
		if _, err := New(Config{Ports: 36, VLs: vls, BufferBlocks: 128}); err != nil {
			t.Errorf("VLs %d: %v", vls, err)
		}
	}
}

func TestBadPort(t *testing.T) {
	s := newSwitch(t, Config{Ports: 4, VLs: 1, BufferBlocks: 8})
	b := build(t, pkt{DLID: 2})
	for _, p := range []int{-1, 5, 255} {
		if err := s.Input(0, p, b); !errors.Is(err, ErrPort) {
			t.Errorf("Input on port %d: %v", p, err)
		}
		if s.Output(0, p, always, func([]byte) {}) != 0 || s.Pending(p) {
			t.Errorf("Output on port %d", p)
		}
	}
	if err := s.SetLFT(2, 5); !errors.Is(err, ErrPort) {
		t.Error("SetLFT to port 5:", err)
	}
	if err := s.SetLFT(0xC000, 1); !errors.Is(err, ErrLID) {
		t.Error("SetLFT of an MLID:", err)
	}
	if err := s.SetMFT(0xBFFF, []int{1}); !errors.Is(err, ErrLID) {
		t.Error("SetMFT of a unicast LID:", err)
	}
	if err := s.SetSL2VL(1, 2, [16]uint8{1}); !errors.Is(err, ErrVL) {
		t.Error("SetSL2VL to VL1 with 1 VL:", err)
	}
	if err := s.SetVLArb(1, []VLArbEntry{{VL: 15, Weight: 1}}, nil, 0); !errors.Is(err, ErrVL) {
		t.Error("SetVLArb with VL15:", err)
	}
}

// fourPorts is a switch whose port p reaches LID p.
func fourPorts(t *testing.T, c Config) *Switch {
	if c.Ports == 0 {
		c.Ports = 4
	}
	if c.VLs == 0 {
		c.VLs = 1
	}
	if c.BufferBlocks == 0 {
		c.BufferBlocks = 64
	}
	s := newSwitch(t, c)
	for p := 1; p <= c.Ports; p++ {
		must(t, s.SetLFT(uint16(p), p))
	}
	return s
}

func TestForwardLFT(t *testing.T) {
	s := fourPorts(t, Config{})
	var want [5][]uint32
	psn := uint32(0)
	for in := 1; in <= 4; in++ {
		for dst := 1; dst <= 4; dst++ {
			if dst == in {
				continue
			}
			psn++
			input(t, s, 0, in, build(t, pkt{DLID: uint16(dst), SLID: uint16(in), Payload: 64, PSN: psn}))
			want[dst] = append(want[dst], psn)
		}
	}
	for out := 1; out <= 4; out++ {
		if !s.Pending(out) {
			t.Errorf("port %d: nothing pending", out)
		}
		got := drain(s, 0, out)
		if len(got) != 3 {
			t.Fatalf("port %d sent %d packets, want 3", out, len(got))
		}
		seen := map[uint32]bool{}
		for _, b := range got {
			p := parse(t, b)
			if d := p.LRH().DLID(); d != uint16(out) {
				t.Errorf("port %d sent DLID %d", out, d)
			}
			seen[p.BTH().PSN()] = true
		}
		for _, psn := range want[out] {
			if !seen[psn] {
				t.Errorf("port %d: PSN %d missing", out, psn)
			}
		}
		if s.Pending(out) {
			t.Errorf("port %d still pending", out)
		}
		c := s.Counters(out)
		n := len(build(t, pkt{Payload: 64}))
		if c.PortXmitPkts != 3 || c.PortRcvPkts != 3 || c.PortUnicastXmitPkts != 3 || c.PortUnicastRcvPkts != 3 ||
			c.PortXmitData != uint64(3*n/4) || c.PortRcvData != uint64(3*n/4) {
			t.Errorf("port %d counters %+v", out, c)
		}
	}
	// Every block came back.
	total := 0
	for k, b := range freed(s) {
		if k[1] != 0 {
			t.Errorf("freed on VL %d", k[1])
		}
		total += b
	}
	if want := 12 * blocksOf(len(build(t, pkt{Payload: 64}))); total != want {
		t.Errorf("freed %d blocks, want %d", total, want)
	}
}

func TestUnknownDLIDDropped(t *testing.T) {
	s := fourPorts(t, Config{})
	must(t, s.SetLFT(7, NoRoute))
	b := build(t, pkt{DLID: 9, Payload: 64}) // never set
	input(t, s, 0, 1, b)
	input(t, s, 0, 1, build(t, pkt{DLID: 7}))      // explicitly no route
	input(t, s, 0, 1, build(t, pkt{DLID: 0}))      // reserved LID
	input(t, s, 0, 1, build(t, pkt{DLID: 1}))      // back out of its input port
	input(t, s, 0, 1, build(t, pkt{DLID: 0xC123})) // multicast LID without MFT entry
	if c := s.Counters(1); c.PortRcvSwitchRelayErrors != 5 || c.PortRcvPkts != 5 || c.PortMulticastRcvPkts != 1 {
		t.Errorf("counters %+v", c)
	}
	for out := 1; out <= 4; out++ {
		if s.Pending(out) {
			t.Errorf("port %d pending", out)
		}
	}
	if s.Held(1, 0) != 0 {
		t.Error("dropped packets held")
	}
	f := freed(s)
	if f[[2]int{1, 0}] != blocksOf(len(b))+4 {
		t.Errorf("freed %v", f)
	}
	if got := s.LFTBlock(0); got[1] != 1 || got[4] != 4 || got[7] != NoRoute || got[9] != NoRoute {
		t.Errorf("LFT block 0: %v", got)
	}
}

func TestBadPackets(t *testing.T) {
	s := fourPorts(t, Config{VLs: 2})
	good := build(t, pkt{DLID: 2, Payload: 8})
	corrupt := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	bads := map[string][]byte{
		"VCRC":    corrupt(func(b []byte) { b[len(b)-1] ^= 1 }),
		"payload": corrupt(func(b []byte) { b[40] ^= 0x80 }),
		"LVer":    corrupt(func(b []byte) { wire.LRH(b).SetLVer(1); sealVCRC(b) }),
		"PktLen":  corrupt(func(b []byte) { wire.LRH(b).SetPktLen(wire.LRH(b).PktLen() - 1); sealVCRC(b) }),
		"VL3":     corrupt(func(b []byte) { wire.LRH(b).SetVL(3); sealVCRC(b) }),
		"short":   good[:6],
		"trunc":   good[:len(good)-4],
	}
	for name, b := range bads {
		before := s.Counters(1).PortRcvErrors
		input(t, s, 0, 1, b)
		if s.Counters(1).PortRcvErrors != before+1 {
			t.Errorf("%s: not counted", name)
		}
	}
	if s.Pending(2) || s.Counters(1).PortRcvPkts != 0 {
		t.Error("a bad packet went through")
	}
	input(t, s, 0, 1, good)
	if got := drain(s, 0, 2); len(got) != 1 || !bytes.Equal(got[0], good) {
		t.Error("good packet changed or lost")
	}
}

func sealVCRC(b []byte) {
	n := len(b) - wire.VCRCLen
	v := wire.VCRC(b[:n])
	b[n], b[n+1] = byte(v), byte(v>>8)
}

func TestMulticast(t *testing.T) {
	s := fourPorts(t, Config{})
	const mlid = 0xC001
	must(t, s.SetMFT(mlid, []int{1, 2, 3}))
	if got := s.MFT(mlid); len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Errorf("MFT = %v", got)
	}
	b := build(t, pkt{DLID: mlid, Payload: 100})
	input(t, s, 0, 1, b)
	blocks := blocksOf(len(b))
	if s.Pending(1) || s.Pending(4) || !s.Pending(2) || !s.Pending(3) {
		t.Fatal("multicast pending on the wrong ports")
	}
	got2 := drain(s, 0, 2)
	if len(got2) != 1 || !bytes.Equal(got2[0], b) {
		t.Fatal("port 2 copy")
	}
	// The packet stays until its last copy leaves.
	if s.Held(1, 0) != blocks || len(freed(s)) != 0 {
		t.Fatal("multicast packet freed before its last copy left")
	}
	got3 := drain(s, 0, 3)
	if len(got3) != 1 || !bytes.Equal(got3[0], b) {
		t.Fatal("port 3 copy")
	}
	if s.Held(1, 0) != 0 || freed(s)[[2]int{1, 0}] != blocks {
		t.Fatal("multicast packet not freed after its last copy")
	}
	if len(drain(s, 0, 1)) != 0 || len(drain(s, 0, 4)) != 0 {
		t.Fatal("copy sent to a non-member or back to the input")
	}
	for _, p := range []int{2, 3} {
		if c := s.Counters(p); c.PortMulticastXmitPkts != 1 || c.PortXmitPkts != 1 || c.PortUnicastXmitPkts != 0 {
			t.Errorf("port %d: %+v", p, c)
		}
	}
	if c := s.Counters(1); c.PortMulticastRcvPkts != 1 || c.PortUnicastRcvPkts != 0 {
		t.Errorf("port 1: %+v", c)
	}
	// A group whose only member is the input port: nothing to do.
	must(t, s.SetMFT(0xC002, []int{4}))
	input(t, s, 0, 4, build(t, pkt{DLID: 0xC002}))
	if s.Held(4, 0) != 0 || s.Pending(4) {
		t.Error("multicast to its own input port held")
	}
	// Removing an entry: its packets are dropped.
	must(t, s.SetMFT(mlid, nil))
	input(t, s, 0, 2, b)
	if s.Counters(2).PortRcvSwitchRelayErrors != 1 {
		t.Error("packet to a removed group not dropped")
	}
}

func TestManagement(t *testing.T) {
	s := fourPorts(t, Config{LID: 8, LMC: 2})
	must(t, s.SetLFT(20, 0))
	for i, dlid := range []uint16{wire.PermissiveLID, 8, 9, 11, 20} {
		input(t, s, 0, 2, build(t, pkt{DLID: dlid, PSN: uint32(i)}))
	}
	input(t, s, 0, 2, build(t, pkt{VL: 15, DLID: wire.PermissiveLID})) // an SMP
	if st := s.Stats(); st.ToManagement != 6 {
		t.Errorf("ToManagement = %d", st.ToManagement)
	}
	if c := s.Counters(2); c.PortRcvPkts != 6 || c.PortRcvSwitchRelayErrors != 0 {
		t.Errorf("counters %+v", c)
	}
	for p := 1; p <= 4; p++ {
		if s.Pending(p) {
			t.Errorf("port %d pending", p)
		}
	}
	input(t, s, 0, 2, build(t, pkt{DLID: 12})) // outside LID 8 with LMC 2
	if s.Counters(2).PortRcvSwitchRelayErrors != 1 {
		t.Error("LID 12 taken as the switch's")
	}
	// The management port sends too (the SMA, later).
	input(t, s, 0, 0, build(t, pkt{VL: 15, DLID: 3, PSN: 5}))
	input(t, s, 0, 0, build(t, pkt{DLID: 20}))
	if got := drain(s, 0, 3); len(got) != 1 || psnOf(got[0]) != 5 {
		t.Error("packet from port 0")
	}
	if s.Stats().ToManagement != 7 {
		t.Error("port 0 to itself")
	}
}

func TestSL2VL(t *testing.T) {
	s := fourPorts(t, Config{VLs: 4})
	var tab [16]uint8
	for sl := range tab {
		tab[sl] = uint8(sl % 4)
	}
	tab[3] = 2
	tab[5] = 15 // discard
	must(t, s.SetSL2VL(1, 2, tab))
	if s.SL2VL(1, 2) != tab {
		t.Error("SL2VL readback")
	}
	b := build(t, pkt{VL: 0, SL: 3, DLID: 2, Payload: 64})
	input(t, s, 0, 1, b)
	got := drain(s, 0, 2)
	if len(got) != 1 {
		t.Fatal("nothing out")
	}
	p := parse(t, got[0]) // the VCRC was recomputed; the ICRC masks the VL
	if p.LRH().VL() != 2 || p.LRH().SL() != 3 {
		t.Errorf("out on VL%d SL%d, want VL2 SL3", p.LRH().VL(), p.LRH().SL())
	}
	if bytes.Equal(got[0], b) {
		t.Error("packet unchanged")
	}
	// The input queue was the VL as received: its blocks come back on VL0.
	if f := freed(s); f[[2]int{1, 0}] != blocksOf(len(b)) {
		t.Errorf("freed %v", f)
	}
	// The default elsewhere: SL mod VLs.
	input(t, s, 0, 3, build(t, pkt{VL: 1, SL: 7, DLID: 2}))
	if got := drain(s, 0, 2); len(got) != 1 || parse(t, got[0]).LRH().VL() != 3 {
		t.Error("default SL2VL")
	}
	// SL5 maps to VL15 from 1 to 2: discarded.
	input(t, s, 0, 1, build(t, pkt{VL: 1, SL: 5, DLID: 2}))
	if s.Pending(2) || s.Counters(1).PortRcvSwitchRelayErrors != 1 {
		t.Error("packet mapped to VL15 not discarded")
	}
	if f := freed(s); f[[2]int{1, 1}] != 1 {
		t.Errorf("freed %v", f)
	}
}

func TestVL15(t *testing.T) {
	s := fourPorts(t, Config{BufferBlocks: 8})
	// Data VL0 without credit; VL15 still goes, and first.
	input(t, s, 0, 1, build(t, pkt{DLID: 2, PSN: 1}))
	smp := build(t, pkt{VL: 15, DLID: 2, Payload: 256, PSN: 2})
	input(t, s, 0, 3, smp)
	var got []uint32
	s.Output(0, 2, func(vl uint8, _ int) bool {
		if vl == 15 {
			t.Error("credit asked for VL15")
		}
		return false
	}, func(b []byte) { got = append(got, psnOf(b)) })
	if len(got) != 1 || got[0] != 2 {
		t.Fatalf("sent %v, want the SMP only", got)
	}
	// The VL15 buffer overflows into VL15Dropped, and VL15 blocks are
	// not credits.
	n := 0
	for range 20 {
		input(t, s, 0, 3, smp)
		n++
	}
	fit := VL15Blocks / blocksOf(len(smp))
	if c := s.Counters(3); c.VL15Dropped != uint64(n-fit) || c.ExcessiveBufferOverrunErrors != 0 {
		t.Errorf("VL15Dropped = %d, want %d", c.VL15Dropped, n-fit)
	}
	if f := freed(s); len(f) != 0 {
		t.Errorf("freed %v", f)
	}
	if len(drain(s, 0, 2)) != fit+1 {
		t.Error("VL15 packets lost")
	}
}

func TestCredits(t *testing.T) {
	s := fourPorts(t, Config{VLs: 2, BufferBlocks: 8})
	b := build(t, pkt{VL: 0, DLID: 2, Payload: 64}) // 98 bytes: 2 blocks
	if blocksOf(len(b)) != 2 {
		t.Fatal(len(b))
	}
	for range 4 {
		input(t, s, 0, 1, b)
	}
	if s.Held(1, 0) != 8 {
		t.Fatalf("held %d", s.Held(1, 0))
	}
	input(t, s, 0, 1, b) // the upstream ignored credits
	if c := s.Counters(1); c.ExcessiveBufferOverrunErrors != 1 {
		t.Errorf("overrun not counted: %+v", c)
	}
	if f := freed(s); f[[2]int{1, 0}] != 2 {
		t.Errorf("overrun packet's blocks not given back: %v", f)
	}
	// VL1 has its own buffer.
	input(t, s, 0, 1, build(t, pkt{VL: 1, SL: 1, DLID: 2, PSN: 9}))
	noVL0 := func(vl uint8, blocks int) bool {
		if blocks != blocksOf(len(b)) && vl == 0 {
			t.Errorf("credit for %d blocks", blocks)
		}
		return vl != 0
	}
	var sent []uint32
	for i := range 10 {
		s.Output(time.Duration(i), 2, noVL0, func(b []byte) { sent = append(sent, psnOf(b)) })
	}
	if len(sent) != 1 || sent[0] != 9 {
		t.Errorf("sent %v, want only the VL1 packet", sent)
	}
	if w := s.Counters(2).PortXmitWait; w != 10 {
		t.Errorf("PortXmitWait = %d, want 10", w)
	}
	if !s.Pending(2) || s.Held(1, 0) != 8 {
		t.Error("VL0 packets gone")
	}
	if len(drain(s, 0, 2)) != 4 {
		t.Error("VL0 packets lost")
	}
	if s.Counters(2).PortXmitWait != 10 {
		t.Error("PortXmitWait grew with credit")
	}
}

func TestHOQLife(t *testing.T) {
	const life = 10 * time.Millisecond
	s := fourPorts(t, Config{BufferBlocks: 16, HOQLife: life})
	b := build(t, pkt{DLID: 2, Payload: 64})
	for range 3 {
		input(t, s, 0, 1, b)
	}
	none := func(uint8, int) bool { return false }
	s.Output(time.Millisecond, 2, none, func([]byte) {})
	s.Expire(life - 1)
	if s.Counters(2).PortXmitDiscards != 0 || s.Held(1, 0) != 6 {
		t.Fatal("expired early")
	}
	s.Expire(life)
	if s.Counters(2).PortXmitDiscards != 1 || s.Held(1, 0) != 4 {
		t.Fatalf("head not discarded at HOQLife: %+v", s.Counters(2))
	}
	if f := freed(s); f[[2]int{1, 0}] != 2 {
		t.Errorf("freed %v", f)
	}
	// The next packet became the head at the discard: it has its own
	// lifetime.
	s.Expire(2*life - 1)
	if s.Counters(2).PortXmitDiscards != 1 {
		t.Fatal("second head discarded early")
	}
	s.Expire(2 * life)
	if s.Counters(2).PortXmitDiscards != 2 {
		t.Fatal("second head not discarded")
	}
	// A head that leaves in time is not discarded; the next one starts
	// its time then.
	if got := drain(s, 2*life+5*time.Millisecond, 2); len(got) != 1 {
		t.Fatal("last packet lost")
	}
	if s.Pending(2) || s.Held(1, 0) != 0 {
		t.Fatal("queue not empty")
	}
	// Multicast: each waiting replica counts.
	must(t, s.SetMFT(0xC000, []int{1, 2, 3, 4}))
	input(t, s, 100*life, 1, build(t, pkt{DLID: 0xC000}))
	drain(s, 100*life, 3)
	s.Expire(101 * life)
	for p, want := range []uint64{1: 0, 2: 3, 3: 0, 4: 1} {
		if got := s.Counters(p).PortXmitDiscards; p > 0 && got != want {
			t.Errorf("port %d discards %d, want %d", p, got, want)
		}
	}
	if s.Pending(2) || s.Pending(4) || s.Held(1, 0) != 0 {
		t.Error("multicast packet not discarded")
	}
}

func TestSwitchLife(t *testing.T) {
	const life = 50 * time.Millisecond
	s := fourPorts(t, Config{BufferBlocks: 64, SwitchLife: life})
	b := build(t, pkt{DLID: 3, Payload: 64})
	for i := range 5 {
		input(t, s, time.Duration(i)*10*time.Millisecond, 1, b) // 0, 10, ..., 40 ms
	}
	s.Expire(life + 15*time.Millisecond) // the ones from 0 and 10 ms are too old
	if c := s.Counters(3); c.PortXmitDiscards != 2 {
		t.Fatalf("discards %d, want 2", c.PortXmitDiscards)
	}
	if s.Queued(1, 0) != 3 {
		t.Fatalf("queued %d", s.Queued(1, 0))
	}
	if f := freed(s); f[[2]int{1, 0}] != 2*blocksOf(len(b)) {
		t.Errorf("freed %v", f)
	}
	s.Expire(time.Second)
	if s.Counters(3).PortXmitDiscards != 5 || s.Pending(3) || s.Held(1, 0) != 0 {
		t.Fatal("old packets kept")
	}
}

// TestStorageWrap pushes packets of random sizes through a small queue
// with random credit, checking each comes out whole and in order.
func TestStorageWrap(t *testing.T) {
	s := fourPorts(t, Config{BufferBlocks: 70})
	r := rand.New(rand.NewPCG(1, 2))
	var want [][]byte
	var psn uint32
	free := 70
	for round := range 3000 {
		for {
			p := pkt{DLID: 2, Payload: r.IntN(4097), PSN: psn}
			if r.IntN(4) != 0 {
				p.Payload = r.IntN(300)
			}
			b := build(t, p)
			if blocksOf(len(b)) > free {
				break
			}
			input(t, s, 0, 1, b)
			free -= blocksOf(len(b))
			want = append(want, b)
			psn++
		}
		s.Output(time.Duration(round), 2, func(uint8, int) bool { return r.IntN(3) != 0 }, func(b []byte) {
			if !bytes.Equal(b, want[0]) {
				t.Fatalf("packet %d changed", psnOf(want[0]))
			}
			want = want[1:]
		})
		s.Freed(func(_ int, _ uint8, n int) { free += n })
		if s.Held(1, 0) != 70-free {
			t.Fatalf("held %d, credits %d", s.Held(1, 0), free)
		}
	}
	if psn < 2000 {
		t.Errorf("only %d packets", psn)
	}
}

func TestMaxPacket(t *testing.T) {
	s := fourPorts(t, Config{BufferBlocks: maxPacketBlocks})
	big := build(t, pkt{DLID: 2, Payload: 4096, GRH: true, HopLimit: 9})
	if len(big) > MaxPacketLen {
		t.Fatal(len(big))
	}
	input(t, s, 0, 1, big)
	if got := drain(s, 0, 2); len(got) != 1 || !bytes.Equal(got[0], big) {
		t.Fatal("largest packet")
	}
	small := newSwitch(t, Config{Ports: 2, VLs: 1, BufferBlocks: 4})
	must(t, small.SetLFT(2, 2))
	input(t, small, 0, 1, big)
	if small.Counters(1).ExcessiveBufferOverrunErrors != 1 {
		t.Error("packet larger than the buffer")
	}
}

func TestCountersSaturate(t *testing.T) {
	c := PortCounters{PortRcvErrors: 70000, ExcessiveBufferOverrunErrors: 20, PortXmitData: 1 << 40, PortXmitPkts: 5, LinkDownedCounter: 300}
	a := c.Attribute()
	if a.PortRcvErrors != 0xFFFF || a.ExcessiveBufferOverrunErrors != 15 || a.PortXmitData != 0xFFFFFFFF || a.PortXmitPkts != 5 || a.LinkDownedCounter != 255 {
		t.Errorf("%+v", a)
	}
	s := fourPorts(t, Config{})
	input(t, s, 0, 1, build(t, pkt{DLID: 2}))
	s.ClearCounters(1)
	if s.Counters(1) != (PortCounters{}) {
		t.Error("ClearCounters")
	}
}

func TestNoAllocs(t *testing.T) {
	s := fourPorts(t, Config{VLs: 2, BufferBlocks: 64, HOQLife: time.Second, SwitchLife: time.Second})
	must(t, s.SetMFT(0xC000, []int{2, 3, 4}))
	uni := build(t, pkt{DLID: 2, Payload: 64})
	multi := build(t, pkt{DLID: 0xC000, SL: 1, VL: 1, Payload: 64})
	n := 0
	send := func(b []byte) { n += len(b) }
	now := time.Duration(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += time.Microsecond
		_ = s.Input(now, 1, uni)
		_ = s.Input(now, 1, multi)
		_ = s.Input(now, 3, uni)
		for p := 2; p <= 4; p++ {
			s.Output(now, p, always, send)
		}
		s.Expire(now)
		s.Freed(func(int, uint8, int) {})
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run", allocs)
	}
	r := newSwitch(t, Config{Ports: 2, VLs: 1, BufferBlocks: 64, Router: true, HOQLife: time.Second})
	must(t, r.SetRoute(0xFE80_0000_0000_00BB, 2, 0x55))
	glob := build(t, pkt{DLID: 0x10, GRH: true, DGID: gid(0xFE80_0000_0000_00BB, 2), HopLimit: 64, Payload: 64})
	allocs = testing.AllocsPerRun(1000, func() {
		now += time.Microsecond
		_ = r.Input(now, 1, glob)
		r.Output(now, 2, always, send)
		r.Expire(now)
		r.Freed(func(int, uint8, int) {})
	})
	if allocs != 0 {
		t.Errorf("router: %v allocations per run", allocs)
	}
	if n == 0 {
		t.Error("nothing sent")
	}
}
