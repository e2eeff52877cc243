package wire

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// field is one header field: its width in bits and its accessors.
type field struct {
	name string
	bits int
	get  func([]byte) uint64
	set  func([]byte, uint64)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// checkFields sets every field of a header to random values in random
// order and reads them all back: a setter that spills into its neighbour
// or a getter that reads the wrong bits fails.
func checkFields(t *testing.T, name string, size int, fields []field) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, uint64(size)))
	h := make([]byte, size)
	for round := range 200 {
		want := make([]uint64, len(fields))
		for _, i := range r.Perm(len(fields)) {
			v := r.Uint64() & (1<<fields[i].bits - 1)
			if round%2 == 0 {
				v = 1<<fields[i].bits - 1 // all ones, then zeros around
			}
			if round%4 == 0 && i%2 == 0 {
				v = 0
			}
			want[i] = v
			fields[i].set(h, v)
		}
		for i, f := range fields {
			if got := f.get(h); got != want[i] {
				t.Fatalf("%s.%s = %#x, set %#x (header %x)", name, f.name, got, want[i], h)
			}
		}
	}
}

func TestHeaderFieldsAreIndependent(t *testing.T) {
	checkFields(t, "LRH", LRHLen, []field{
		{"VL", 4, func(b []byte) uint64 { return uint64(LRH(b).VL()) }, func(b []byte, v uint64) { LRH(b).SetVL(uint8(v)) }},
		{"LVer", 4, func(b []byte) uint64 { return uint64(LRH(b).LVer()) }, func(b []byte, v uint64) { LRH(b).SetLVer(uint8(v)) }},
		{"SL", 4, func(b []byte) uint64 { return uint64(LRH(b).SL()) }, func(b []byte, v uint64) { LRH(b).SetSL(uint8(v)) }},
		{"Rsv2", 2, func(b []byte) uint64 { return uint64(LRH(b).Reserved2()) }, func(b []byte, v uint64) { LRH(b).SetReserved2(uint8(v)) }},
		{"LNH", 2, func(b []byte) uint64 { return uint64(LRH(b).LNH()) }, func(b []byte, v uint64) { LRH(b).SetLNH(uint8(v)) }},
		{"DLID", 16, func(b []byte) uint64 { return uint64(LRH(b).DLID()) }, func(b []byte, v uint64) { LRH(b).SetDLID(uint16(v)) }},
		{"Rsv5", 5, func(b []byte) uint64 { return uint64(LRH(b).Reserved5()) }, func(b []byte, v uint64) { LRH(b).SetReserved5(uint8(v)) }},
		{"PktLen", 11, func(b []byte) uint64 { return uint64(LRH(b).PktLen()) }, func(b []byte, v uint64) { LRH(b).SetPktLen(uint16(v)) }},
		{"SLID", 16, func(b []byte) uint64 { return uint64(LRH(b).SLID()) }, func(b []byte, v uint64) { LRH(b).SetSLID(uint16(v)) }},
	})
	checkFields(t, "GRH", GRHLen, []field{
		{"IPVer", 4, func(b []byte) uint64 { return uint64(GRH(b).IPVer()) }, func(b []byte, v uint64) { GRH(b).SetIPVer(uint8(v)) }},
		{"TClass", 8, func(b []byte) uint64 { return uint64(GRH(b).TClass()) }, func(b []byte, v uint64) { GRH(b).SetTClass(uint8(v)) }},
		{"FlowLabel", 20, func(b []byte) uint64 { return uint64(GRH(b).FlowLabel()) }, func(b []byte, v uint64) { GRH(b).SetFlowLabel(uint32(v)) }},
		{"PayLen", 16, func(b []byte) uint64 { return uint64(GRH(b).PayLen()) }, func(b []byte, v uint64) { GRH(b).SetPayLen(uint16(v)) }},
		{"NxtHdr", 8, func(b []byte) uint64 { return uint64(GRH(b).NxtHdr()) }, func(b []byte, v uint64) { GRH(b).SetNxtHdr(uint8(v)) }},
		{"HopLmt", 8, func(b []byte) uint64 { return uint64(GRH(b).HopLmt()) }, func(b []byte, v uint64) { GRH(b).SetHopLmt(uint8(v)) }},
		{"SGID.hi", 64, func(b []byte) uint64 { g := GRH(b).SGID(); return be64(g[:8]) }, func(b []byte, v uint64) { g := GRH(b).SGID(); put64(g[:8], v); GRH(b).SetSGID(g) }},
		{"SGID.lo", 64, func(b []byte) uint64 { g := GRH(b).SGID(); return be64(g[8:]) }, func(b []byte, v uint64) { g := GRH(b).SGID(); put64(g[8:], v); GRH(b).SetSGID(g) }},
		{"DGID.hi", 64, func(b []byte) uint64 { g := GRH(b).DGID(); return be64(g[:8]) }, func(b []byte, v uint64) { g := GRH(b).DGID(); put64(g[:8], v); GRH(b).SetDGID(g) }},
		{"DGID.lo", 64, func(b []byte) uint64 { g := GRH(b).DGID(); return be64(g[8:]) }, func(b []byte, v uint64) { g := GRH(b).DGID(); put64(g[8:], v); GRH(b).SetDGID(g) }},
	})
	checkFields(t, "BTH", BTHLen, []field{
		{"OpCode", 8, func(b []byte) uint64 { return uint64(BTH(b).OpCode()) }, func(b []byte, v uint64) { BTH(b).SetOpCode(Opcode(v)) }},
		{"SE", 1, func(b []byte) uint64 { return b2u(BTH(b).SE()) }, func(b []byte, v uint64) { BTH(b).SetSE(v == 1) }},
		{"M", 1, func(b []byte) uint64 { return b2u(BTH(b).MigReq()) }, func(b []byte, v uint64) { BTH(b).SetMigReq(v == 1) }},
		{"PadCnt", 2, func(b []byte) uint64 { return uint64(BTH(b).PadCnt()) }, func(b []byte, v uint64) { BTH(b).SetPadCnt(int(v)) }},
		{"TVer", 4, func(b []byte) uint64 { return uint64(BTH(b).TVer()) }, func(b []byte, v uint64) { BTH(b).SetTVer(uint8(v)) }},
		{"PKey", 16, func(b []byte) uint64 { return uint64(BTH(b).PKey()) }, func(b []byte, v uint64) { BTH(b).SetPKey(uint16(v)) }},
		{"FECN", 1, func(b []byte) uint64 { return b2u(BTH(b).FECN()) }, func(b []byte, v uint64) { BTH(b).SetFECN(v == 1) }},
		{"BECN", 1, func(b []byte) uint64 { return b2u(BTH(b).BECN()) }, func(b []byte, v uint64) { BTH(b).SetBECN(v == 1) }},
		{"Resv6a", 6, func(b []byte) uint64 { return uint64(BTH(b).Resv6a()) }, func(b []byte, v uint64) { BTH(b).SetResv6a(uint8(v)) }},
		{"DestQP", 24, func(b []byte) uint64 { return uint64(BTH(b).DestQP()) }, func(b []byte, v uint64) { BTH(b).SetDestQP(uint32(v)) }},
		{"A", 1, func(b []byte) uint64 { return b2u(BTH(b).AckReq()) }, func(b []byte, v uint64) { BTH(b).SetAckReq(v == 1) }},
		{"Resv7", 7, func(b []byte) uint64 { return uint64(BTH(b).Resv7()) }, func(b []byte, v uint64) { BTH(b).SetResv7(uint8(v)) }},
		{"PSN", 24, func(b []byte) uint64 { return uint64(BTH(b).PSN()) }, func(b []byte, v uint64) { BTH(b).SetPSN(uint32(v)) }},
	})
	checkFields(t, "DETH", DETHLen, []field{
		{"QKey", 32, func(b []byte) uint64 { return uint64(DETH(b).QKey()) }, func(b []byte, v uint64) { DETH(b).SetQKey(uint32(v)) }},
		{"SrcQP", 24, func(b []byte) uint64 { return uint64(DETH(b).SrcQP()) }, func(b []byte, v uint64) { DETH(b).SetSrcQP(uint32(v)) }},
	})
	checkFields(t, "RETH", RETHLen, []field{
		{"VA", 64, func(b []byte) uint64 { return RETH(b).VA() }, func(b []byte, v uint64) { RETH(b).SetVA(v) }},
		{"RKey", 32, func(b []byte) uint64 { return uint64(RETH(b).RKey()) }, func(b []byte, v uint64) { RETH(b).SetRKey(uint32(v)) }},
		{"DMALen", 32, func(b []byte) uint64 { return uint64(RETH(b).DMALen()) }, func(b []byte, v uint64) { RETH(b).SetDMALen(uint32(v)) }},
	})
	checkFields(t, "AtomicETH", AtomicETHLen, []field{
		{"VA", 64, func(b []byte) uint64 { return AtomicETH(b).VA() }, func(b []byte, v uint64) { AtomicETH(b).SetVA(v) }},
		{"RKey", 32, func(b []byte) uint64 { return uint64(AtomicETH(b).RKey()) }, func(b []byte, v uint64) { AtomicETH(b).SetRKey(uint32(v)) }},
		{"SwapAdd", 64, func(b []byte) uint64 { return AtomicETH(b).SwapAddData() }, func(b []byte, v uint64) { AtomicETH(b).SetSwapAddData(v) }},
		{"Cmp", 64, func(b []byte) uint64 { return AtomicETH(b).CmpData() }, func(b []byte, v uint64) { AtomicETH(b).SetCmpData(v) }},
	})
	checkFields(t, "AETH", AETHLen, []field{
		{"Syndrome", 8, func(b []byte) uint64 { return uint64(AETH(b).Syndrome()) }, func(b []byte, v uint64) { AETH(b).SetSyndrome(Syndrome(v)) }},
		{"MSN", 24, func(b []byte) uint64 { return uint64(AETH(b).MSN()) }, func(b []byte, v uint64) { AETH(b).SetMSN(uint32(v)) }},
	})
	checkFields(t, "RDETH", RDETHLen, []field{
		{"EEContext", 24, func(b []byte) uint64 { return uint64(RDETH(b).EEContext()) }, func(b []byte, v uint64) { RDETH(b).SetEEContext(uint32(v)) }},
	})
	checkFields(t, "XRCETH", XRCETHLen, []field{
		{"XRCSRQ", 24, func(b []byte) uint64 { return uint64(XRCETH(b).XRCSRQ()) }, func(b []byte, v uint64) { XRCETH(b).SetXRCSRQ(uint32(v)) }},
	})
}

func be64(b []byte) uint64 {
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

func put64(b []byte, v uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

// TestHeaderLayoutKnownAnswers pins bit positions to bytes written by
// hand from the figures of IBA 1.4 ch. 5 and 9.
func TestHeaderLayoutKnownAnswers(t *testing.T) {
	l := make(LRH, LRHLen)
	l.SetVL(0xA)
	l.SetSL(0x5)
	l.SetLNH(LNHGlobal)
	l.SetDLID(0x1234)
	l.SetPktLen(0x7FF)
	l.SetSLID(0xBEEF)
	if want := []byte{0xA0, 0x53, 0x12, 0x34, 0x07, 0xFF, 0xBE, 0xEF}; !slices.Equal(l, want) {
		t.Errorf("LRH %x, want %x", []byte(l), want)
	}
	b := make(BTH, BTHLen)
	b.SetOpCode(0x64)
	b.SetSE(true)
	b.SetPadCnt(3)
	b.SetPKey(0x8001)
	b.SetFECN(true)
	b.SetDestQP(0xABCDEF)
	b.SetAckReq(true)
	b.SetPSN(0x123456)
	if want := []byte{0x64, 0xB0, 0x80, 0x01, 0x80, 0xAB, 0xCD, 0xEF, 0x80, 0x12, 0x34, 0x56}; !slices.Equal(b, want) {
		t.Errorf("BTH %x, want %x", []byte(b), want)
	}
	g := make(GRH, GRHLen)
	g.SetIPVer(6)
	g.SetTClass(0xAB)
	g.SetFlowLabel(0xCDEF1)
	if want := []byte{0x6A, 0xBC, 0xDE, 0xF1}; !slices.Equal(g[:4], want) {
		t.Errorf("GRH word 0 %x, want %x", []byte(g[:4]), want)
	}
	if s := NAKSyndrome(NAKRemoteAccessError); s != 0x62 || s.Kind() != SyndromeNAK || s.Value() != 2 {
		t.Errorf("NAK remote access syndrome %#x", uint8(s))
	}
	if s := RNRNAKSyndrome(14); s != 0x2E || s.Kind() != SyndromeRNRNAK {
		t.Errorf("RNR NAK syndrome %#x", uint8(s))
	}
	if s := ACKSyndrome(CreditCountInvalid); s != 0x1F || s.Kind() != SyndromeACK {
		t.Errorf("ACK syndrome %#x", uint8(s))
	}
}

// TestOpcodeTable checks the table against IBA 1.4 table 38: how many
// opcodes each transport defines, the header sequences of a row of each
// kind, and the invariants every row must keep.
func TestOpcodeTable(t *testing.T) {
	count := map[Transport]int{}
	names := map[string]bool{}
	for _, o := range Opcodes() {
		i := o.Info()
		count[i.Transport]++
		if names[i.Name] {
			t.Errorf("duplicate name %s", i.Name)
		}
		names[i.Name] = true
		if o.String() != i.Name || o.Transport() != i.Transport {
			t.Errorf("%#x: name %s transport %s", uint8(o), o, o.Transport())
		}
		n := BTHLen
		for k, h := range i.Headers {
			if k > 0 && h <= i.Headers[k-1] {
				t.Errorf("%s: headers %v out of the spec's order", i.Name, i.Headers)
			}
			if i.Offset(h) != n {
				t.Errorf("%s: %s at %d, want %d", i.Name, h, i.Offset(h), n)
			}
			n += h.Len()
		}
		if i.HeaderLen != n {
			t.Errorf("%s: HeaderLen %d, want %d", i.Name, i.HeaderLen, n)
		}
		if i.Response != (i.Operation == OpReadResponse || i.Operation == OpAcknowledge || i.Operation == OpAtomicAcknowledge) {
			t.Errorf("%s: Response %v", i.Name, i.Response)
		}
	}
	want := map[Transport]int{RC: 23, UC: 12, RD: 22, UD: 2, CNP: 1, XRC: 23}
	for tr, n := range want {
		if count[tr] != n {
			t.Errorf("%s: %d opcodes, IBA 1.4 defines %d", tr, count[tr], n)
		}
	}
	rows := []struct {
		op      Opcode
		name    string
		headers []Header
		payload bool
		pos     Position
	}{
		{0x00, "RC_SEND_FIRST", nil, true, First},
		{0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", []Header{HdrRETH, HdrImmDt}, true, Only},
		{0x0C, "RC_RDMA_READ_REQUEST", []Header{HdrRETH}, false, Only},
		{0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", nil, true, Middle},
		{0x12, "RC_ATOMIC_ACKNOWLEDGE", []Header{HdrAETH, HdrAtomicAckETH}, false, Only},
		{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", []Header{HdrIETH}, true, Only},
		{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", []Header{HdrImmDt}, true, Last},
		{0x45, "RD_SEND_ONLY_WITH_IMMEDIATE", []Header{HdrRDETH, HdrDETH, HdrImmDt}, true, Only},
		{0x4C, "RD_RDMA_READ_REQUEST", []Header{HdrRDETH, HdrDETH, HdrRETH}, false, Only},
		{0x51, "RD_ACKNOWLEDGE", []Header{HdrRDETH, HdrAETH}, false, Only},
		{0x53, "RD_COMPARE_SWAP", []Header{HdrRDETH, HdrDETH, HdrAtomicETH}, false, Only},
		{0x55, "RD_RESYNC", []Header{HdrRDETH, HdrDETH}, false, Only},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", []Header{HdrDETH, HdrImmDt}, true, Only},
		{0x81, "CNP", []Header{HdrCNPReserved}, false, Only},
		{0xA6, "XRC_RDMA_WRITE_FIRST", []Header{HdrXRCETH, HdrRETH}, true, First},
		{0xAD, "XRC_RDMA_READ_RESPONSE_FIRST", []Header{HdrAETH}, true, First},
		{0xB4, "XRC_FETCH_ADD", []Header{HdrXRCETH, HdrAtomicETH}, false, Only},
		{0xB7, "XRC_SEND_ONLY_WITH_INVALIDATE", []Header{HdrXRCETH, HdrIETH}, true, Only},
	}
	for _, r := range rows {
		i := r.op.Info()
		if !i.Valid || i.Name != r.name || !slices.Equal(i.Headers, r.headers) || i.Payload != r.payload || i.Position != r.pos {
			t.Errorf("%#x: %+v, want %s %v payload=%v pos=%v", uint8(r.op), *i, r.name, r.headers, r.payload, r.pos)
		}
	}
	for _, o := range []Opcode{0x15, 0x18, 0x1F, 0x2C, 0x56, 0x60, 0x66, 0x80, 0x82, 0xB5, 0xC0, 0xFF} {
		if o.Valid() {
			t.Errorf("%#x is reserved or vendor-specific in IBA 1.4, the table says %s", uint8(o), o)
		}
	}
}

// TestIsIPv4Mapped: a GID is the IPv4-mapped GID of exactly one address,
// and a GID that is not IPv4-mapped is none's.
func TestIsIPv4Mapped(t *testing.T) {
	a := [4]byte{192, 0, 2, 7}
	g := IPv4MappedGID(a)
	if !g.IsIPv4Mapped(a) {
		t.Fatalf("%x is not the GID of %v", g, a)
	}
	for i := range 16 {
		h := g
		h[i] ^= 0x40
		if h.IsIPv4Mapped(a) {
			t.Errorf("%x (byte %d changed) still the GID of %v", h, i, a)
		}
	}
	if b := [4]byte{192, 0, 2, 8}; g.IsIPv4Mapped(b) {
		t.Errorf("%x is the GID of %v too", g, b)
	}
}

// TestHeadersLen: Len, the length without a build, is the length Encode
// gives, for every encapsulation, with and without a VLAN tag or a GRH,
// for headers of every size and payloads that need a pad.
func TestHeadersLen(t *testing.T) {
	buf := make([]byte, 9000)
	ops := []Opcode{RCAcknowledge, RCSendOnly, RCRDMAWriteOnly, UDSendOnlyWithImmediate, RCAtomicAcknowledge}
	for _, encap := range []Encap{EncapIB, EncapRoCEv1, EncapRoCEv2IPv4, EncapRoCEv2IPv6} {
		for _, extra := range []bool{false, true} {
			for _, op := range ops {
				for _, n := range []int{0, 1, 3, 8, 1024} {
					h := Headers{Encap: encap, Opcode: op, VLAN: extra && encap.Ethernet(), GRH: extra && encap == EncapIB}
					if !op.Info().Payload && n > 0 {
						continue
					}
					var p Packet
					if err := h.Encode(buf, n, &p); err != nil {
						t.Fatalf("%v %v extra %v %d bytes: %v", encap, op, extra, n, err)
					}
					if got := h.Len(n); got != p.Len() {
						t.Errorf("%v %v extra %v %d bytes: Len %d, Encode %d", encap, op, extra, n, got, p.Len())
					}
				}
			}
		}
	}
}
