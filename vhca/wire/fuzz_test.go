package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// fuzzSeedOps are the opcodes (and payload sizes) of the Build outputs
// that seed the fuzzers besides the reference captures: every transport and
// every extended header.
var fuzzSeedOps = []struct {
	op Opcode
	n  int
}{
	{RCSendOnly, 13},
	{RCSendFirst, 256},
	{RCRDMAWriteOnlyWithImm, 7},
	{RCRDMAReadRequest, 0},
	{RCRDMAReadResponseMiddle, 64},
	{RCAcknowledge, 0},
	{RCAtomicAcknowledge, 0},
	{RCCompareSwap, 0},
	{RCSendOnlyWithInvalidate, 3},
	{UDSendOnlyWithImmediate, 9},
	{RCSendOnly.WithTransport(UC), 1},
	{RCSendOnly.WithTransport(RD), 5},
	{RCAcknowledge.WithTransport(RD), 0},
	{RCSendOnly.WithTransport(XRC), 2},
	{CNPOpcode, 0},
}

// FuzzParseEthernet feeds ParseEthernet the Ethernet frames of the
// reference captures (RoCEv2 over IPv4 and IPv6, and the TCP, ARP and
// neighbour discovery frames around them) and Build's RoCE frames.
func FuzzParseEthernet(f *testing.F) {
	for _, rec := range goldenRecords(f, LinkTypeEthernet) {
		f.Add(rec.Data)
	}
	for _, k := range []kind{kindIPv4, kindIPv4VLAN, kindIPv6, kindRoCEv1} {
		for _, s := range fuzzSeedOps {
			f.Add(buildPacket(f, k, s.op, s.n).Frame)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzParse(t, data, false)
	})
}

// FuzzParseIB feeds ParseIB the native InfiniBand frames of the reference
// captures and Build's local and global IB packets.
func FuzzParseIB(f *testing.F) {
	for _, rec := range goldenRecords(f, LinkTypeInfiniBand) {
		f.Add(rec.Data)
	}
	for _, k := range []kind{kindIBLocal, kindIBGlobal} {
		for _, s := range fuzzSeedOps {
			f.Add(buildPacket(f, k, s.op, s.n).Frame)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzParse(t, data, true)
	})
}

func fuzzParseFunc(ib bool) func([]byte, *Packet) error {
	if ib {
		return ParseIB
	}
	return ParseEthernet
}

// fuzzParse parses data; Parse must not panic, must leave the frame as it
// found it, and must return a ParseError or a packet that checkPacket
// accepts and that rebuilds into a packet with the same headers, opcode
// and payload.
//
// A random change almost always breaks a CRC, which would hide every check
// behind it from the fuzzer. So a frame refused only for its VCRC, its UDP
// checksum or its ICRC is repaired (VCRC recomputed, UDP checksum zeroed,
// or Packet.Seal) and parsed again; a frame Seal repaired must then parse.
// The repair uses the offsets Parse left in p when it found the bad CRC.
func fuzzParse(t *testing.T, data []byte, ib bool) {
	// A copy: Parse writes to the frame while it computes the ICRC, and
	// the fuzzer's data must not be changed. No spare capacity, so that a
	// read past the end panics.
	frame := make([]byte, len(data))
	copy(frame, data)
	var p Packet
	sealed := false
	for {
		err := parseUnchanged(t, frame, &p, ib)
		if err == nil {
			checkPacket(t, frame, &p, ib)
			checkRebuild(t, &p, ib)
			return
		}
		if sealed {
			t.Fatalf("a frame Seal repaired does not parse: %v\nframe %x", err, frame)
		}
		switch {
		case errors.Is(err, ErrBadVCRC):
			fixVCRC(frame) // Parse checked that the VCRC ends the frame
		case errors.Is(err, ErrBadUDPChecksum):
			p.UDP().SetChecksum(0)
		case errors.Is(err, ErrBadICRC):
			p.Seal()
			sealed = true
		default:
			return
		}
	}
}

// parseUnchanged parses frame, which must come out unchanged, and checks
// that an error is a ParseError.
func parseUnchanged(t *testing.T, frame []byte, p *Packet, ib bool) error {
	t.Helper()
	before := bytes.Clone(frame)
	err := fuzzParseFunc(ib)(frame, p)
	if !bytes.Equal(frame, before) {
		t.Fatalf("Parse (%v) changed the frame\n got %x\nwant %x", err, frame, before)
	}
	if err != nil {
		var pe ParseError
		if !errors.As(err, &pe) || pe == 0 || pe >= NumParseErrors {
			t.Fatalf("Parse returned %v (%T), not a ParseError", err, err)
		}
	}
	return err
}

// checkRebuild builds the packet p.Headers describes with p's payload and
// checks that it parses back to the same opcode, payload and headers.
func checkRebuild(t *testing.T, p *Packet, ib bool) {
	t.Helper()
	buf := make([]byte, 16<<10)
	if p.Len() > len(buf) {
		return // the rebuild needs a bigger buffer than this test gives it
	}
	var h, h2 Headers
	var q, r Packet
	p.Headers(&h)
	if err := Build(buf, &h, p.Payload(), &q); err != nil {
		t.Fatalf("%v %v: rebuild: %v\nheaders %+v", p.Encap, p.Opcode, err, h)
	}
	// The rebuilt packet drops what Headers does not describe (a second
	// VLAN tag, IP options, Ethernet padding): never longer.
	if q.Len() > p.Len() {
		t.Errorf("%v %v: rebuilt packet has %d bytes, the original %d", p.Encap, p.Opcode, q.Len(), p.Len())
	}
	rebuilt := q.Frame[:q.Len()]
	if err := fuzzParseFunc(ib)(rebuilt, &r); err != nil {
		t.Fatalf("%v %v: the rebuilt packet does not parse: %v\nheaders %+v\nframe %x", p.Encap, p.Opcode, err, h, rebuilt)
	}
	r.Headers(&h2)
	if r.Opcode != p.Opcode || !bytes.Equal(r.Payload(), p.Payload()) || h2 != h {
		t.Fatalf("rebuilt packet differs\n got %v payload %x headers %+v\nwant %v payload %x headers %+v",
			r.Opcode, r.Payload(), h2, p.Opcode, p.Payload(), h)
	}
}

// offsetIn returns where s starts in frame, failing t unless s is a
// slice of frame[:limit].
func offsetIn(t *testing.T, name string, frame, s []byte, limit int) int {
	t.Helper()
	off := cap(frame) - cap(s)
	if off < 0 || off+len(s) > limit || (len(s) > 0 && &frame[off] != &s[0]) {
		t.Fatalf("%s (%d bytes) is not inside the packet's %d bytes", name, len(s), limit)
	}
	return off
}

// headerView returns p's view of extended header x.
func headerView(p *Packet, x Header) []byte {
	switch x {
	case HdrRDETH:
		return p.RDETH()
	case HdrDETH:
		return p.DETH()
	case HdrXRCETH:
		return p.XRCETH()
	case HdrRETH:
		return p.RETH()
	case HdrAtomicETH:
		return p.AtomicETH()
	case HdrAETH:
		return p.AETH()
	case HdrAtomicAckETH:
		return p.AtomicAckETH()
	case HdrImmDt:
		return p.ImmDt()
	case HdrIETH:
		return p.IETH()
	}
	return p.ext(x)
}

// checkPacket checks what a successful Parse of frame says in p: every
// view inside the packet, in the order and at the sizes the encapsulation
// and the opcode table give, and the packet's lengths adding up.
func checkPacket(t *testing.T, frame []byte, p *Packet, ib bool) {
	t.Helper()
	if len(p.Frame) != len(frame) || (len(frame) > 0 && &p.Frame[0] != &frame[0]) {
		t.Fatal("p.Frame is not the parsed frame")
	}
	n := p.Len()
	if n <= 0 || n > len(frame) {
		t.Fatalf("Len %d outside 1..%d", n, len(frame))
	}
	if p.PayloadLen < 0 {
		t.Fatalf("PayloadLen %d", p.PayloadLen)
	}
	if p.Info != p.Opcode.Info() || !p.Info.Valid {
		t.Fatalf("opcode %v: Info %+v is not its valid table row", p.Opcode, p.Info)
	}
	if p.Encap.Ethernet() == ib || (ib && p.Encap != EncapIB) {
		t.Fatalf("encapsulation %v from the IB=%t parser", p.Encap, ib)
	}

	var bth int // where the BTH must start
	switch p.Encap {
	case EncapIB:
		if n != len(frame) {
			t.Fatalf("IB packet of %d bytes in a %d-byte frame", n, len(frame))
		}
		l := p.LRH()
		if offsetIn(t, "LRH", frame, l, n) != 0 || len(l) != LRHLen {
			t.Fatal("LRH not at the start of the frame")
		}
		if int(l.PktLen())*4+VCRCLen != n {
			t.Fatalf("PktLen %d words in a %d-byte packet", l.PktLen(), n)
		}
		if p.VCRC() != binary.LittleEndian.Uint16(frame[n-VCRCLen:]) {
			t.Fatal("VCRC is not the packet's last two bytes")
		}
		bth = LRHLen
		if g := p.GRH(); l.LNH() == LNHGlobal {
			if offsetIn(t, "GRH", frame, g, n) != LRHLen || len(g) != GRHLen {
				t.Fatal("GRH not after the LRH")
			}
			if int(g.PayLen())+LRHLen+GRHLen+VCRCLen != n {
				t.Fatalf("GRH PayLen %d in a %d-byte packet", g.PayLen(), n)
			}
			bth += GRHLen
		} else if g != nil || l.LNH() != LNHLocal {
			t.Fatalf("LNH %d with GRH view %x", l.LNH(), g)
		}
		if p.Ethernet() != nil || p.IPv4() != nil || p.IPv6() != nil || p.UDP() != nil {
			t.Fatal("IB packet with an Ethernet, IP or UDP view")
		}
	default:
		if offsetIn(t, "Ethernet", frame, p.Ethernet(), n) != 0 || len(p.Ethernet()) != EthernetLen {
			t.Fatal("Ethernet header not at the start of the frame")
		}
		if p.VLANs < 0 || p.VLANs > 2 {
			t.Fatalf("%d VLAN tags", p.VLANs)
		}
		l3 := EthernetLen + p.VLANs*VLANTagLen
		if p.LRH() != nil {
			t.Fatal("RoCE packet with an LRH view")
		}
		switch p.Encap {
		case EncapRoCEv1:
			g := p.GRH()
			if offsetIn(t, "GRH", frame, g, n) != l3 || len(g) != GRHLen {
				t.Fatal("GRH not after the Ethernet header")
			}
			if l3+GRHLen+int(g.PayLen()) != n {
				t.Fatalf("GRH PayLen %d, packet end %d", g.PayLen(), n)
			}
			if p.IPv4() != nil || p.IPv6() != nil || p.UDP() != nil {
				t.Fatal("RoCEv1 packet with an IP or UDP view")
			}
			bth = l3 + GRHLen
		case EncapRoCEv2IPv4, EncapRoCEv2IPv6:
			var l4 int
			if ip := p.IPv4(); p.Encap == EncapRoCEv2IPv4 {
				if offsetIn(t, "IPv4", frame, ip, n) != l3 || len(ip) != ip.IHL() || len(ip) < IPv4Len {
					t.Fatal("IPv4 header not after the Ethernet header")
				}
				if l3+int(ip.TotalLen()) != n {
					t.Fatalf("IPv4 total length %d, packet end %d", ip.TotalLen(), n)
				}
				if p.IPv6() != nil {
					t.Fatal("IPv4 packet with an IPv6 view")
				}
				l4 = l3 + len(ip)
			} else {
				ip6 := p.IPv6()
				if offsetIn(t, "IPv6", frame, ip6, n) != l3 || len(ip6) != IPv6Len {
					t.Fatal("IPv6 header not after the Ethernet header")
				}
				if l3+IPv6Len+int(ip6.PayloadLen()) != n {
					t.Fatalf("IPv6 payload length %d, packet end %d", ip6.PayloadLen(), n)
				}
				if ip != nil {
					t.Fatal("IPv6 packet with an IPv4 view")
				}
				l4 = l3 + IPv6Len
			}
			u := p.UDP()
			if offsetIn(t, "UDP", frame, u, n) != l4 || len(u) != UDPLen {
				t.Fatal("UDP header not after the IP header")
			}
			if u.DstPort() != UDPPortRoCEv2 || l4+int(u.Length()) != n {
				t.Fatalf("UDP port %d length %d, packet end %d", u.DstPort(), u.Length(), n)
			}
			if p.GRH() != nil {
				t.Fatal("RoCEv2 packet with a GRH view")
			}
			bth = l4 + UDPLen
		default:
			t.Fatalf("encapsulation %v", p.Encap)
		}
	}

	b := p.BTH()
	if offsetIn(t, "BTH", frame, b, n) != bth || len(b) != BTHLen {
		t.Fatalf("BTH not at %d", bth)
	}
	if b.OpCode() != p.Opcode || b.TVer() != TransportVersion {
		t.Fatalf("BTH opcode %v TVer %d, Packet says %v", b.OpCode(), b.TVer(), p.Opcode)
	}
	for x := Header(0); x < numHeaders; x++ {
		v := headerView(p, x)
		if !p.Info.Has(x) {
			if v != nil {
				t.Fatalf("%v: %v view present", p.Opcode, x)
			}
			continue
		}
		if offsetIn(t, x.String(), frame, v, n) != bth+p.Info.Offset(x) || len(v) != x.Len() {
			t.Fatalf("%v: %v view not at BTH+%d", p.Opcode, x, p.Info.Offset(x))
		}
	}
	end := bth + BTHLen // the extended headers follow each other in the table's order
	for _, x := range p.Info.Headers {
		if p.Info.Offset(x) != end-bth {
			t.Fatalf("%v: %v at BTH+%d, want BTH+%d", p.Opcode, x, p.Info.Offset(x), end-bth)
		}
		end += x.Len()
	}
	if end-bth != p.Info.HeaderLen {
		t.Fatalf("%v: HeaderLen %d, headers end at BTH+%d", p.Opcode, p.Info.HeaderLen, end-bth)
	}
	pl := p.Payload()
	if offsetIn(t, "payload", frame, pl, n) != end || len(pl) != p.PayloadLen {
		t.Fatalf("payload not after the headers")
	}
	if !p.Info.Payload && p.PayloadLen != 0 {
		t.Fatalf("%v carries %d payload bytes", p.Opcode, p.PayloadLen)
	}
	icrc := end + p.PayloadLen + p.PadCnt()
	tail := ICRCLen
	if ib {
		tail += VCRCLen
	}
	if icrc+tail != n {
		t.Fatalf("BTH at %d + headers %d + payload %d + pad %d + CRCs %d != Len %d",
			bth, p.Info.HeaderLen, p.PayloadLen, p.PadCnt(), tail, n)
	}
	if p.ICRC() != binary.LittleEndian.Uint32(frame[icrc:]) {
		t.Fatal("ICRC is not the word after the pad")
	}
	iba := p.IBA()
	start := bth
	if p.Encap == EncapIB {
		start = 0
	} else if p.Encap == EncapRoCEv1 {
		start = bth - GRHLen
	}
	if offsetIn(t, "IBA packet", frame, iba, n) != start || start+len(iba) != icrc+ICRCLen {
		t.Fatalf("IBA packet view [%d:+%d], want [%d:%d]", cap(frame)-cap(iba), len(iba), start, icrc+ICRCLen)
	}
}
