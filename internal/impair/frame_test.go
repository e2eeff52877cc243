package impair

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// udpFrame builds an Ethernet frame holding a UDP datagram to dport with
// payload bytes of payload, over IPv4 (with ihl 24: an option) or IPv6,
// tagged if vlan, padded to 60 bytes.
func udpFrame(v6, vlan bool, dport uint16, payload int) []byte {
	f := make([]byte, 12, 128)
	if vlan {
		f = append(f, 0x81, 0, 0, 100)
	}
	udp := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(udp, 50000)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	for i := range payload {
		udp[8+i] = byte(i)
	}
	if v6 {
		f = append(f, 0x86, 0xdd)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
		ip[6], ip[7] = protoUDP, 64
		f = append(append(f, ip...), udp...)
	} else {
		f = append(f, 0x08, 0)
		ip := make([]byte, 24)
		ip[0] = 0x46
		binary.BigEndian.PutUint16(ip[2:], uint16(24+len(udp)))
		ip[8], ip[9] = 64, protoUDP
		f = append(append(f, ip...), udp...)
	}
	for len(f) < 60 {
		f = append(f, 0xee) // padding: not part of the IP packet
	}
	return f
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		v6, vlan bool
		payload  int
	}{{false, false, 100}, {false, true, 100}, {true, false, 100}, {true, true, 3}, {false, false, 0}, {false, false, 1}} {
		f := udpFrame(c.v6, c.vlan, 4791, c.payload)
		l := parse(f)
		l3 := 14 + 4*btoi(c.vlan)
		l4 := l3 + 24
		if c.v6 {
			l4 = l3 + 40
		}
		if !l.ip || !l.udp || l.dport != 4791 || l.l3 != l3 || l.l4 != l4 || l.end != l4+8+c.payload {
			t.Errorf("%+v: parsed %+v", c, l)
		}
		if from, to := l.span(); from != l4+8 || to != l4+8+c.payload {
			t.Errorf("%+v: span %d..%d", c, from, to)
		}
		if !l.faulted(4791) || l.faulted(4792) || !l.faulted(0) {
			t.Errorf("%+v: faulted wrong", c)
		}
	}
	// A later fragment of a UDP datagram has no UDP header.
	f := udpFrame(false, false, 4791, 100)
	binary.BigEndian.PutUint16(f[20:], 185)
	if l := parse(f); l.udp || l.faulted(4791) || !l.faulted(0) {
		t.Errorf("a later fragment parsed %+v", l)
	}
	// ARP, and frames cut short.
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	if l := parse(arp); l.ip || l.udp || l.faulted(4791) {
		t.Errorf("ARP parsed %+v", l)
	} else if from, to := l.span(); from != 14 || to != 60 {
		t.Errorf("ARP span %d..%d", from, to)
	}
	for n := range 60 {
		parse(udpFrame(false, true, 4791, 20)[:n]) // must not panic
		parse(udpFrame(true, false, 4791, 20)[:n])
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// decide is a function of the generator state: the same seed gives the
// same verdicts; the rates are about those asked.
func TestDecide(t *testing.T) {
	c := &Config{Loss: 0.1, Duplicate: 0.2, Reorder: 0.3, Corrupt: 0.4}
	run := func(seed uint64) []verdict {
		rng := rand.New(rand.NewPCG(seed, 1))
		var vs []verdict
		for i := range 100000 {
			vs = append(vs, decide(rng, c, i%50))
		}
		return vs
	}
	a, b, other := run(5), run(5), run(6)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different verdicts")
	}
	if slices.Equal(a, other) {
		t.Fatal("different seeds, same verdicts")
	}
	var lost, dup, reord, corr, kept int
	for i, v := range a {
		if v.Lose {
			lost++
			if v.Duplicate || v.Reorder || v.Corrupt {
				t.Fatalf("verdict %d: lost and more: %+v", i, v)
			}
			continue
		}
		kept++
		dup += btoi(v.Duplicate)
		reord += btoi(v.Reorder)
		corr += btoi(v.Corrupt)
		if v.Corrupt && (i%50 == 0 || v.At >= i%50 || v.Mask == 0) {
			t.Fatalf("verdict %d (span %d): %+v", i, i%50, v)
		}
	}
	for _, x := range []struct {
		name string
		got  int
		of   int
		p    float64
	}{
		{"loss", lost, len(a), c.Loss}, {"duplicate", dup, kept, c.Duplicate},
		{"reorder", reord, kept, c.Reorder}, {"corrupt", corr, kept * 49 / 50, c.Corrupt},
	} {
		if r := float64(x.got) / float64(x.of); math.Abs(r-x.p) > 0.01 {
			t.Errorf("%s: rate %.4f, want %.2f", x.name, r, x.p)
		}
	}
	// A probability of 0 draws nothing: the loss choices are the same
	// with the other faults off.
	rng1, rng2 := rand.New(rand.NewPCG(9, 1)), rand.New(rand.NewPCG(9, 1))
	for range 1000 {
		if decide(rng1, &Config{Loss: 0.3}, 10).Lose != decide(rng2, &Config{Loss: 0.3}, 10).Lose {
			t.Fatal("Loss alone: two generators with the same seed disagree")
		}
	}
}

// finishChecksum computes what the receiver checks: the UDP checksum of
// the datagram over its pseudo-header sums to 0xffff.
func TestFinishChecksum(t *testing.T) {
	f := udpFrame(false, true, 4791, 37)
	l := parse(f)
	src, dst := []byte{10, 66, 0, 1}, []byte{10, 66, 0, 2}
	copy(f[l.l3+12:], src)
	copy(f[l.l3+16:], dst)
	udpLen := l.end - l.l4
	// The pseudo-header sum, folded but not complemented, as the stack
	// leaves it for the hardware.
	pseudo := append(append(append([]byte{}, src...), dst...), 0, protoUDP, byte(udpLen>>8), byte(udpLen))
	binary.BigEndian.PutUint16(f[l.l4+6:], ^checksum(pseudo))
	h := make(vnet, vnetLen)
	h[0] = vnetNeedsCsum
	binary.NativeEndian.PutUint16(h[6:], uint16(l.l4))
	binary.NativeEndian.PutUint16(h[8:], 6)
	finishChecksum(h, f[:l.end])
	if h.flags()&vnetNeedsCsum != 0 {
		t.Fatal("NEEDS_CSUM still set")
	}
	if got := checksum(append(pseudo, f[l.l4:l.end]...)); got != 0 {
		t.Fatalf("checksum over pseudo-header and datagram %#04x, want 0", got)
	}
	// A GSO frame is left to the kernel.
	h[0], h[1] = vnetNeedsCsum, 1
	before := string(f)
	finishChecksum(h, f)
	if string(f) != before || h.flags() != vnetNeedsCsum {
		t.Fatal("a GSO frame's checksum was touched")
	}
}

func TestVLANTag(t *testing.T) {
	oob := make([]byte, unix.CmsgSpace(unsafeSizeofAuxdata))
	binary.NativeEndian.PutUint64(oob, uint64(unix.CmsgLen(unsafeSizeofAuxdata)))
	binary.NativeEndian.PutUint32(oob[8:], unix.SOL_PACKET)
	binary.NativeEndian.PutUint32(oob[12:], unix.PACKET_AUXDATA)
	a := oob[unix.SizeofCmsghdr:]
	binary.NativeEndian.PutUint32(a, unix.TP_STATUS_USER)
	if _, _, ok := vlanTag(oob); ok {
		t.Fatal("a tag where there is none")
	}
	binary.NativeEndian.PutUint32(a, unix.TP_STATUS_USER|unix.TP_STATUS_VLAN_VALID|unix.TP_STATUS_VLAN_TPID_VALID)
	binary.NativeEndian.PutUint16(a[16:], 0x2064)
	binary.NativeEndian.PutUint16(a[18:], etherQinQ)
	if tci, tpid, ok := vlanTag(oob); !ok || tci != 0x2064 || tpid != etherQinQ {
		t.Fatalf("tag %v %#x %#x", ok, tci, tpid)
	}
	for n := range len(oob) {
		vlanTag(oob[:n]) // must not panic
	}
}
