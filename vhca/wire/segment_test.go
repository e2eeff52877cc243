package wire

import (
	"bytes"
	"testing"
)

// A segment parses back to the headers and the payload it was built
// from, with the same lengths a whole packet would carry; and a whole
// frame built from the same headers parses to the same packet.
func TestSegmentRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte{0xA5}, 3*4096+13)
	for _, encap := range []Encap{EncapRoCEv2IPv4, EncapRoCEv2IPv6, EncapRoCEv1} {
		h := Headers{Encap: encap, Opcode: RCRDMAWriteOnly, PSN: 77, DestQP: 9, VA: 0x1000, RKey: 5,
			DMALen: uint32(len(payload)), PKey: DefaultPKey, HopLimit: 64, Unsealed: true, SGID: IPv4MappedGID([4]byte{10, 0, 0, 1}), DGID: IPv4MappedGID([4]byte{10, 0, 0, 2})}
		buf := make([]byte, 256)
		var p Packet
		if err := h.EncodeSegment(buf, payload, &p); err != nil {
			t.Fatal(encap, err)
		}
		if !p.Segment() || len(p.Frame) >= 256 || !bytes.Equal(p.Payload(), payload) {
			t.Fatalf("%v: segment of %d header bytes", encap, len(p.Frame))
		}
		var q Packet
		if err := ParseEthernetSegment(p.Frame, payload, &q); err != nil {
			t.Fatal(encap, err)
		}
		if q.Opcode != h.Opcode || q.BTH().PSN() != 77 || q.RETH().DMALen() != uint32(len(payload)) ||
			!bytes.Equal(q.Payload(), payload) || q.Len() != p.Len() {
			t.Fatalf("%v: parsed %+v", encap, q)
		}
		// The same headers as a whole frame: same length fields.
		whole := make([]byte, 16384)
		var w Packet
		if err := Build(whole, &h, payload, &w); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w.Frame[:len(p.Frame)], p.Frame) {
			t.Fatalf("%v: segment headers differ from the whole frame's", encap)
		}
		// A payload of another length than the headers announce fails.
		if err := ParseEthernetSegment(p.Frame, payload[:len(payload)-4], &q); err == nil {
			t.Fatalf("%v: short payload accepted", encap)
		}
	}
}
