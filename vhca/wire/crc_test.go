package wire

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// vcrcBitwise is the VCRC one bit at a time, straight from IBA 1.4 §7.8.2:
// polynomial 0x100B, reflected, preset ones, result inverted.
func vcrcBitwise(b []byte) uint16 {
	c := uint16(0xFFFF)
	for _, x := range b {
		c ^= uint16(x)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xD008
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

func TestVCRCMatchesBitwiseDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := VCRC(b), vcrcBitwise(b); got != want {
			t.Fatalf("len %d: VCRC %#04x, bitwise %#04x", n, got, want)
		}
	}
}

// icrcReference computes the ICRC the slow, obvious way: copy the covered
// bytes, set the variant fields to ones as IBA 1.4 §7.8.1 and Annexes A16
// and A17 list them, prepend ones for an absent or global LRH, CRC-32.
func icrcReference(p *Packet) uint32 {
	f := bytes.Clone(p.Frame)
	ones := func(b []byte) {
		for i := range b {
			b[i] = 0xff
		}
	}
	var covered []byte
	maskGRHLike := func(g []byte) {
		g[0] |= 0x0F
		ones(g[1:4])
		g[7] = 0xff
	}
	f[p.bth+4] = 0xff
	switch p.Encap {
	case EncapRoCEv2IPv4:
		ip := f[p.l3:]
		ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
		ones(f[p.l4+6 : p.l4+8])
		covered = append(bytes.Repeat([]byte{0xff}, 8), f[p.l3:p.icrc]...)
	case EncapRoCEv2IPv6:
		maskGRHLike(f[p.l3:])
		ones(f[p.l4+6 : p.l4+8])
		covered = append(bytes.Repeat([]byte{0xff}, 8), f[p.l3:p.icrc]...)
	case EncapRoCEv1:
		maskGRHLike(f[p.grh:])
		covered = append(bytes.Repeat([]byte{0xff}, 8), f[p.grh:p.icrc]...)
	case EncapIB:
		if p.grh >= 0 {
			maskGRHLike(f[p.grh:])
			covered = append(bytes.Repeat([]byte{0xff}, 8), f[p.grh:p.icrc]...)
		} else {
			f[p.lrh] |= 0xF0
			covered = f[p.lrh:p.icrc]
		}
	}
	return crc32.ChecksumIEEE(covered)
}

// TestICRCMatchesReference checks the masked-word ICRC against the obvious
// one on every packet of the encoded corpus, with the variant fields set
// to random values (they must not matter) and with IPv4 options.
func TestICRCMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 16384)
	var p Packet
	for _, e := range encodedCorpus() {
		h := e.h
		h.TClass, h.HopLimit, h.FlowLabel = uint8(r.Uint32()), uint8(r.Uint32()), r.Uint32()&MaxFlowLabel
		h.VL, h.FECN, h.BECN = uint8(r.Uint32()&0xF), r.Uint32()&1 == 0, r.Uint32()&1 == 0
		if err := Build(buf, &h, e.payload, &p); err != nil {
			t.Fatal(err)
		}
		if got, want := p.computeICRC(), icrcReference(&p); got != want {
			t.Fatalf("%s: ICRC %#08x, reference %#08x", e.label, got, want)
		}
		// The variant fields do not change the ICRC.
		before := p.computeICRC()
		BTH(p.Frame[p.bth:]).SetResv6a(0x15)
		if p.computeICRC() != before {
			t.Fatalf("%s: BTH Resv6a changes the ICRC", e.label)
		}
	}
	// IPv4 with options: the options are covered as they are.
	h := corpusHeaders(EncapRoCEv2IPv4, false)
	h.Opcode = RCSendOnly
	if err := Build(buf, &h, corpusPayload(100), &p); err != nil {
		t.Fatal(err)
	}
	frame := insertIPv4Options(p.Frame[:p.Len()], []byte{0x94, 0x04, 0, 0}) // router alert
	if err := ParseEthernet(frame, &p); err != nil {
		t.Fatalf("IPv4 with options: %v", err)
	}
	if got, want := p.computeICRC(), icrcReference(&p); got != want {
		t.Fatalf("IPv4 with options: ICRC %#08x, reference %#08x", got, want)
	}
}

// insertIPv4Options returns a copy of an Ethernet/IPv4 frame with options
// added to its IP header, lengths and header checksum fixed and the ICRC
// recomputed.
func insertIPv4Options(frame, opts []byte) []byte {
	out := append(append(bytes.Clone(frame[:EthernetLen+IPv4Len]), opts...), frame[EthernetLen+IPv4Len:]...)
	ip := IPv4(out[EthernetLen:])
	ip[0] = 4<<4 | byte((IPv4Len+len(opts))/4)
	ip.SetTotalLen(ip.TotalLen() + uint16(len(opts)))
	ip.SetChecksum()
	var p Packet
	p.Frame, p.Encap = out, EncapRoCEv2IPv4
	p.l3, p.l4 = EthernetLen, EthernetLen+ip.IHL()
	p.bth = p.l4 + UDPLen
	p.icrc = len(out) - ICRCLen
	binary.LittleEndian.PutUint32(out[p.icrc:], icrcReference(&p))
	return out
}

// sum16Reference is RFC 1071 one 16-bit word at a time.
func sum16Reference(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}

func TestChecksumMatchesRFC1071(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
			if n%3 == 0 {
				b[i] = 0xff // runs of ones carry the most
			}
		}
		if got, want := foldChecksum(sum16(b, 0)), sum16Reference(b); got != want {
			t.Fatalf("len %d: sum %#04x, RFC 1071 %#04x", n, got, want)
		}
		// Starting from a large partial sum must wrap its carries too:
		// ^0 is a one's complement zero, so the sum is the same, up to
		// the two forms of zero (0x0000 and 0xFFFF).
		norm := func(x uint16) uint16 { return x % 0xFFFF }
		if got, want := norm(foldChecksum(add1c(sum16(b, ^uint64(0)-1), 1))), norm(sum16Reference(b)); got != want {
			t.Fatalf("len %d from a large sum: %#04x, want %#04x", n, got, want)
		}
	}
}
