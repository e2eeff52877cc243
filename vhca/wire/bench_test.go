package wire

import (
	"fmt"
	"hash/crc32"
	"testing"
)

// benchPacket builds an RC RDMA WRITE ONLY of n payload bytes in encap.
func benchPacket(tb testing.TB, encap Encap, n int) []byte {
	h := corpusHeaders(encap, false)
	h.Opcode = RCRDMAWriteOnly
	h.DMALen = uint32(n)
	var p Packet
	buf := make([]byte, 16384)
	if err := Build(buf, &h, corpusPayload(n), &p); err != nil {
		tb.Fatal(err)
	}
	return p.Frame[:p.Len()]
}

var benchEncaps = []Encap{EncapRoCEv2IPv4, EncapRoCEv2IPv6, EncapRoCEv1, EncapIB}

// BenchmarkParse is parse plus ICRC (and VCRC) verification of a whole
// frame; bytes/s counts the frame.
func BenchmarkParse(b *testing.B) {
	for _, e := range benchEncaps {
		for _, n := range []int{64, 4096} {
			frame := benchPacket(b, e, n)
			parse := ParseEthernet
			if e == EncapIB {
				parse = ParseIB
			}
			b.Run(fmt.Sprintf("%s/%d", e, n), func(b *testing.B) {
				var p Packet
				b.SetBytes(int64(len(frame)))
				b.ReportAllocs()
				for b.Loop() {
					if err := parse(frame, &p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkBuild is encode, payload copy and seal (ICRC, IPv6 UDP checksum,
// VCRC); bytes/s counts the frame.
func BenchmarkBuild(b *testing.B) {
	for _, e := range benchEncaps {
		for _, n := range []int{64, 4096} {
			h := corpusHeaders(e, false)
			h.Opcode = RCRDMAWriteOnly
			h.DMALen = uint32(n)
			payload := corpusPayload(n)
			buf := make([]byte, 16384)
			b.Run(fmt.Sprintf("%s/%d", e, n), func(b *testing.B) {
				var p Packet
				if err := Build(buf, &h, payload, &p); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(p.Len()))
				b.ReportAllocs()
				for b.Loop() {
					if err := Build(buf, &h, payload, &p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkICRC measures the ICRC alone against hash/crc32's IEEE CRC of
// the same bytes, the physical limit for this CRC here: the ICRC is one
// crc32.Update over the packet with its variant fields masked in place.
func BenchmarkICRC(b *testing.B) {
	for _, e := range benchEncaps {
		for _, n := range []int{64, 4096} {
			frame := benchPacket(b, e, n)
			var p Packet
			parse := ParseEthernet
			if e == EncapIB {
				parse = ParseIB
			}
			if err := parse(frame, &p); err != nil {
				b.Fatal(err)
			}
			// The bytes the ICRC reads in the frame: from the IP header
			// (RoCEv2), the GRH (RoCEv1, global IB) or the LRH (local IB)
			// to the ICRC; the 8 bytes of ones that stand for the LRH
			// are a precomputed CRC state.
			start := p.lrh
			switch {
			case p.l3 != 0:
				start = p.l3
			case p.grh >= 0:
				start = p.grh
			}
			covered := p.Frame[start:p.icrc]
			b.Run(fmt.Sprintf("icrc/%s/%d", e, n), func(b *testing.B) {
				b.SetBytes(int64(len(covered)))
				b.ReportAllocs()
				for b.Loop() {
					p.computeICRC()
				}
			})
			b.Run(fmt.Sprintf("crc32/%s/%d", e, n), func(b *testing.B) {
				b.SetBytes(int64(len(covered)))
				for b.Loop() {
					crc32.ChecksumIEEE(covered)
				}
			})
		}
	}
}

func BenchmarkVCRC(b *testing.B) {
	for _, n := range []int{64, 4096} {
		frame := benchPacket(b, EncapIB, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				VCRC(frame)
			}
		})
	}
}

// TestParseAndBuildDoNotAllocate holds the hot path to zero allocations
// per packet, in every encapsulation.
func TestParseAndBuildDoNotAllocate(t *testing.T) {
	for _, e := range benchEncaps {
		frame := benchPacket(t, e, 4096)
		parse := ParseEthernet
		if e == EncapIB {
			parse = ParseIB
		}
		var p Packet
		if n := testing.AllocsPerRun(100, func() {
			if err := parse(frame, &p); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: parse allocates %.1f times per packet", e, n)
		}
		bad := append([]byte(nil), frame...)
		bad[len(bad)/2] ^= 1
		if n := testing.AllocsPerRun(100, func() { _ = parse(bad, &p) }); n != 0 {
			t.Errorf("%s: a refused parse allocates %.1f times per packet", e, n)
		}
		h := corpusHeaders(e, false)
		h.Opcode = RCRDMAWriteOnly
		payload := corpusPayload(4096)
		buf := make([]byte, 16384)
		if n := testing.AllocsPerRun(100, func() {
			if err := Build(buf, &h, payload, &p); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: build allocates %.1f times per packet", e, n)
		}
	}
}
