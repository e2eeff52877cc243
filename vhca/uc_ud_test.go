package vhca

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// ucPlan is message i of the UC stream: SEND, SEND with immediate or
// WRITE with immediate, 4 bytes to 6 KiB (up to 6 packets at MTU 1024).
func ucPlan(seed uint64, i int) (WROpcode, uint32) {
	r := rand.New(rand.NewPCG(seed, uint64(i)+1000))
	ops := []WROpcode{WRSend, WRSendWithImm, WRRDMAWriteWithImm}
	return ops[r.IntN(len(ops))], uint32(4 + r.IntN(6*1024-3))
}

// ucFill is message i's content: its index in the first four bytes, then
// bytes that depend on the seed, the index and the position.
func ucFill(b []byte, seed uint64, i int) {
	fill(b, seed, i)
	binary.LittleEndian.PutUint32(b, uint32(i))
}

// TestUCStreamUnderLoss: a UC stream of multi-packet SENDs and WRITEs with
// immediate through a link that loses 10% of the packets, and in a second
// variant also reorders some. UC never retransmits (IBA 1.4 §9.8.3):
// messages go missing, but every receive completion carries exactly one
// whole message, with the right length and content, none is completed
// with a part of a message, none twice, and receive WQEs are consumed in
// order; the messages that arrive arrive in order, with reordering too: a
// packet behind the expected PSN is dropped, never delivered late.
func TestUCStreamUnderLoss(t *testing.T) {
	for _, v := range []struct {
		name   string
		faults linkFaults
	}{
		{"loss", linkFaults{Loss: 0.10, Latency: 2000}},
		{"loss+reorder", linkFaults{Loss: 0.10, Reorder: 0.05, Latency: 2000, Jitter: 20000}},
	} {
		for _, seed := range []uint64{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				runUCStream(t, seed, v.faults)
			})
		}
	}
}

func runUCStream(t *testing.T, seed uint64, faults linkFaults) {
	const n, slot = 400, 8 << 10
	da, db, a, b := twoDevices(t, QPTypeUC, n*slot, 2*n*slot)
	c := defaultConn()
	c.PSNA, c.PSNB = 1<<24-100, 5 // and across the PSN wrap
	connectWith(t, a, b, c)
	const writeBase = n * slot
	for k := range n {
		postRecv(t, b, RecvWR{WRID: uint64(k), SGL: b.sge(uint64(k*slot), slot)})
	}
	s := newSim(t, seed, faults, da, db)
	posted := 0
	last := -1 // index of the last message received
	got, nextWRID := 0, 0
	seen := map[int]bool{}
	check := func() bool {
		// A few messages at a time, so that the link is never idle
		// for long and reordering crosses message boundaries.
		for posted < n && a.qp.sqTail-a.qp.sqHead < 8 {
			i := posted
			op, size := ucPlan(seed, i)
			ucFill(a.mem[i*slot:i*slot+int(size)], seed, i)
			wr := SendWR{WRID: uint64(i), Opcode: op, SGL: a.sge(uint64(i*slot), size), Imm: uint32(i)}
			if op == WRRDMAWriteWithImm {
				wr.RemoteAddr, wr.RKey = b.addr(uint64(writeBase+i*slot)), b.mr.Key
			}
			postSend(t, a, wr)
			posted++
		}
		for _, wc := range drain(b.rcq) {
			if wc.Status != WCSuccess {
				t.Fatalf("receive completion %+v", wc)
			}
			if wc.WRID != uint64(nextWRID) {
				t.Fatalf("receive WR %d completed, want %d (in order)", wc.WRID, nextWRID)
			}
			nextWRID++
			var i int
			switch {
			case wc.Opcode == WCRecvRDMAWithImm || wc.Flags&WCWithImm != 0:
				i = int(wc.Imm)
			default:
				i = int(binary.LittleEndian.Uint32(b.mem[wc.WRID*slot:]))
			}
			if i < 0 || i >= posted {
				t.Fatalf("completion %+v names message %d, %d posted", wc, i, posted)
			}
			if seen[i] {
				t.Fatalf("message %d received twice", i)
			}
			seen[i] = true
			if i <= last {
				t.Fatalf("message %d received after message %d: out of order", i, last)
			}
			last = max(last, i)
			op, size := ucPlan(seed, i)
			wantOp := map[WROpcode]WCOpcode{WRSend: WCRecv, WRSendWithImm: WCRecv, WRRDMAWriteWithImm: WCRecvRDMAWithImm}[op]
			if wc.Opcode != wantOp || (op != WRSend) != (wc.Flags&WCWithImm != 0) || wc.SrcQP != a.qp.Num {
				t.Fatalf("message %d (%v): completion %+v", i, op, wc)
			}
			if wc.ByteLen != size {
				t.Fatalf("message %d: %d bytes completed, want %d (a partial message?)", i, wc.ByteLen, size)
			}
			at := int(wc.WRID) * slot
			if op == WRRDMAWriteWithImm {
				at = writeBase + i*slot
			}
			exp := make([]byte, size)
			ucFill(exp, seed, i)
			if crc32.ChecksumIEEE(b.mem[at:at+int(size)]) != crc32.ChecksumIEEE(exp) {
				t.Fatalf("message %d (%v, %d bytes): wrong content", i, op, size)
			}
			got++
		}
		return posted == n && a.qp.sqHead == a.qp.sqTail && len(s.flight) == 0
	}
	s.run(1e10, check)
	check()
	if posted != n || a.qp.sqHead != a.qp.sqTail {
		t.Fatalf("%d of %d messages posted, send queue %d/%d", posted, n, a.qp.sqHead, a.qp.sqTail)
	}
	// Every send completes (UC: when its last packet leaves);
	// unsignaled, so none in the CQ.
	if a.scq.Len() != 0 {
		t.Errorf("%d send completions for unsignaled WRs", a.scq.Len())
	}
	if got == n || got < n/4 {
		t.Fatalf("%d of %d messages received: want some but not all with 10%% loss", got, n)
	}
	if a.qp.State() != QPStateRTS || b.qp.State() != QPStateRTS {
		t.Fatalf("states %s %s", a.qp.State(), b.qp.State())
	}
	t.Logf("%d of %d messages received, %d PSN drops, %d bad-sequence drops", got, n,
		db.Ports[0].Counters.RcvPSNDrops, db.Ports[0].Counters.RcvBadOpcode)
}

// udEndpoint brings e's UD QP to RTS with Q_Key qkey.
func udEndpoint(t testing.TB, e *endpoint, qkey uint32) {
	t.Helper()
	if err := e.d.ModifyQP(e.qp, &QPAttr{State: QPStateInit, Port: 1, QKey: qkey}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	if err := e.d.ModifyQP(e.qp, &QPAttr{State: QPStateRTR}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := e.d.ModifyQP(e.qp, &QPAttr{State: QPStateRTS, SQPSN: 77}, QPAttrState|QPAttrSQPSN); err != nil {
		t.Fatal(err)
	}
}

func udAH(t testing.TB, from, to *endpoint) *AH {
	ah, err := from.d.CreateAH(from.pd, AV{Port: 1, IsGlobal: true, DMAC: to.d.Ports[0].MAC,
		GRH: GlobalRoute{DGID: to.d.Ports[0].GIDs[0].GID, HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

// TestUDDatagrams: UD datagrams through a lossy link arrive whole or not
// at all, each in one receive WQE whose first 40 bytes hold the network
// header (for RoCEv2/IPv4 the IPv4 header in bytes 20..39, the rest
// zeroed, as rxe does) with WCWithGRH set, and the completion names the
// sender's QP.
func TestUDDatagrams(t *testing.T) {
	const n, slot = 300, 2048
	da, db, a, b := twoDevices(t, QPTypeUD, n*slot, n*slot)
	const qkey = 0x1234
	udEndpoint(t, a, 0x5555)
	udEndpoint(t, b, qkey)
	ah := udAH(t, a, b)
	for k := range n {
		postRecv(t, b, RecvWR{WRID: uint64(k), SGL: b.sge(uint64(k*slot), slot)})
	}
	for i := range b.mem {
		b.mem[i] = 0xAA
	}
	s := newSim(t, 9, linkFaults{Loss: 0.2, Latency: 2000}, da, db)
	for i := range n {
		size := uint32(4 + (i*37)%1021) // up to the 1024-byte MTU
		ucFill(a.mem[i*slot:i*slot+int(size)], 9, i)
		postSend(t, a, SendWR{WRID: uint64(i), Opcode: WRSendWithImm, Imm: uint32(i), Flags: SendSignaled,
			SGL: a.sge(uint64(i*slot), size), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: qkey})
	}
	s.run(1e9, func() bool { return a.scq.Len() == n && len(s.flight) == 0 })
	for _, wc := range drain(a.scq) {
		if wc.Status != WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
	}
	rc := drain(b.rcq)
	if len(rc) == n || len(rc) < n/2 {
		t.Fatalf("%d of %d datagrams received with 20%% loss", len(rc), n)
	}
	last := -1
	for k, wc := range rc {
		i := int(wc.Imm)
		if wc.Status != WCSuccess || wc.WRID != uint64(k) || wc.Flags&WCWithImm == 0 || wc.Flags&WCWithGRH == 0 || wc.SrcQP != a.qp.Num || wc.QPNum != b.qp.Num {
			t.Fatalf("completion %d: %+v", k, wc)
		}
		if i <= last {
			t.Fatalf("datagram %d after %d", i, last)
		}
		last = i
		size := uint32(4 + (i*37)%1021)
		if wc.ByteLen != grhAreaLen+size {
			t.Fatalf("datagram %d: %d bytes, want 40+%d", i, wc.ByteLen, size)
		}
		buf := b.mem[k*slot : (k+1)*slot]
		exp := make([]byte, size)
		ucFill(exp, 9, i)
		if crc32.ChecksumIEEE(buf[grhAreaLen:grhAreaLen+size]) != crc32.ChecksumIEEE(exp) {
			t.Fatalf("datagram %d: wrong content", i)
		}
		for j := grhAreaLen + int(size); j < slot; j++ {
			if buf[j] != 0xAA {
				t.Fatalf("datagram %d: byte %d past its end written", i, j)
			}
		}
		for j := range 20 {
			if buf[j] != 0 {
				t.Fatalf("datagram %d: GRH area byte %d is %#x, want 0 before the IPv4 header", i, j, buf[j])
			}
		}
		ip := wire.IPv4(buf[20:40])
		if ip.Version() != 4 || ip.IHL() != 20 || ip.Protocol() != 17 || ip.Src() != [4]byte{192, 0, 2, 1} || ip.Dst() != [4]byte{192, 0, 2, 2} ||
			int(ip.TotalLen()) != wire.IPv4Len+8+12+8+4+int(size)+int((4-size%4)%4)+4 {
			t.Fatalf("datagram %d: GRH area bytes 20..39 are not its IPv4 header: % x", i, buf[20:40])
		}
	}
}

// TestUDQKey: a datagram whose Q_Key is not the receiving QP's is dropped
// and counted; a Q_Key with the high bit set in the WR means the sending
// QP's own Q_Key (the controlled Q_Key rule, IBA 1.4 §10.2.5).
func TestUDQKey(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeUD, 1<<16, 1<<16)
	udEndpoint(t, a, 0x1234)
	udEndpoint(t, b, 0x1234)
	ah := udAH(t, a, b)
	s := newXSim(t, da, db)
	var qkeys []uint32 // the Q_Keys on the wire
	s.filter = func(from int, p *wire.Packet) []Time {
		qkeys = append(qkeys, p.DETH().QKey())
		return deliverOnce
	}
	postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, 2048)}, RecvWR{WRID: 2, SGL: b.sge(2048, 2048)})
	send := func(wrid uint64, rqkey uint32) {
		postSend(t, a, SendWR{WRID: wrid, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 100), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: rqkey})
	}
	send(10, 0x4321)     // wrong: dropped
	send(11, 0x80000000) // controlled: the QP's own, 0x1234: delivered
	send(12, 0x1234)     // right
	s.must(1e8, "datagrams", func() bool { return a.scq.Len() == 3 && len(s.flight) == 0 })
	s.run(1e6, nil)
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{10, WCSuccess}, {11, WCSuccess}, {12, WCSuccess}}) {
		t.Fatalf("send completions %+v", got)
	}
	if fmt.Sprint(qkeys) != fmt.Sprint([]uint32{0x4321, 0x1234, 0x1234}) {
		t.Errorf("Q_Keys on the wire %#x, want [0x4321 0x1234 0x1234]", qkeys)
	}
	rc := drain(b.rcq)
	if len(rc) != 2 || rc[0].WRID != 1 || rc[1].WRID != 2 || rc[0].Status != WCSuccess || rc[1].Status != WCSuccess || rc[0].SrcQP != a.qp.Num {
		t.Fatalf("receive completions %+v, want two", rc)
	}
	if got := db.Ports[0].Counters.RcvQKeyDrops; got != 1 {
		t.Errorf("RcvQKeyDrops %d, want 1", got)
	}

	// The controlled rule takes the sender QP's Q_Key, not the WR's:
	// a receiver whose Q_Key has the high bit gets nothing from a WR
	// naming that very key but sent by a QP with another.
	if err := db.ModifyQP(b.qp, &QPAttr{QKey: 0x80001234}, QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	postRecv(t, b, RecvWR{WRID: 3, SGL: b.sge(0, 2048)})
	send(13, 0x80001234)
	s.must(1e8, "datagram", func() bool { return a.scq.Len() == 1 && len(s.flight) == 0 })
	s.run(1e6, nil)
	if b.rcq.Len() != 0 {
		t.Errorf("datagram with the controlled Q_Key delivered: %+v", drain(b.rcq))
	}
	if got := qkeys[len(qkeys)-1]; got != 0x1234 {
		t.Errorf("Q_Key on the wire %#x, want the sending QP's 0x1234", got)
	}
	if got := db.Ports[0].Counters.RcvQKeyDrops; got != 2 {
		t.Errorf("RcvQKeyDrops %d, want 2", got)
	}
}
