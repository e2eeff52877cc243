package vhca

import (
	"bytes"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// rnrNAKs are the RNR NAKs in a log.
func rnrNAKs(ps []xpkt) []xpkt {
	var out []xpkt
	for _, p := range ps {
		if p.Op == wire.RCAcknowledge && p.HasAETH && p.Syn.Kind() == wire.SyndromeRNRNAK {
			out = append(out, p)
		}
	}
	return out
}

// TestRCRNRWaitThenReceive: a SEND to a QP with no receive posted is RNR
// NAKed with the responder's RNR timer code; the requester waits exactly
// that long (table 45) before it tries again, and once a receive is posted
// the SEND completes on both sides.
func TestRCRNRWaitThenReceive(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.MinRNRA, c.MinRNRB = 1, 4 // B's responder asks for 40 µs; A's code must not be used
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	var nakArrivals []Time // when each RNR NAK reached A
	s.delivered = func(to int, p *wire.Packet) {
		if to == 0 && p.Opcode == wire.RCAcknowledge && p.AETH().Syndrome().Kind() == wire.SyndromeRNRNAK {
			nakArrivals = append(nakArrivals, s.now)
		}
	}
	for i := range 700 {
		a.mem[i] = byte(i*5 + 1)
	}
	postSend(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 700)})
	s.run(130_000, nil)
	if a.scq.Len() != 0 || b.rcq.Len() != 0 {
		t.Fatalf("completions without a receive posted: %+v %+v", drain(a.scq), drain(b.rcq))
	}
	naks := rnrNAKs(s.sentBy(1))
	if len(naks) < 2 {
		t.Fatalf("%d RNR NAKs in 130 µs, want at least 2", len(naks))
	}
	postAt := s.now
	postRecv(t, b, RecvWR{WRID: 9, SGL: b.sge(0, 4096)})
	s.must(1e9, "SEND after the receive was posted", func() bool { return a.scq.Len() > 0 && b.rcq.Len() > 0 })

	sc, rc := drain(a.scq), drain(b.rcq)
	if len(sc) != 1 || sc[0].WRID != 1 || sc[0].Status != WCSuccess || sc[0].Opcode != WCSend {
		t.Fatalf("send completions %+v", sc)
	}
	if len(rc) != 1 || rc[0].WRID != 9 || rc[0].Status != WCSuccess || rc[0].ByteLen != 700 {
		t.Fatalf("receive completions %+v", rc)
	}
	for i := range 700 {
		if b.mem[i] != byte(i*5+1) {
			t.Fatalf("byte %d: %d", i, b.mem[i])
		}
	}

	reqs := s.sentBy(0, wire.RCSendOnly)
	naks = rnrNAKs(s.sentBy(1))
	if len(naks) != len(nakArrivals) || len(reqs) != len(naks)+1 {
		t.Fatalf("%d requests, %d RNR NAKs sent, %d arrived: want one request more than NAKs", len(reqs), len(naks), len(nakArrivals))
	}
	wait := rnrTimerNS[4]
	for i, n := range naks {
		if n.Syn.Value() != 4 {
			t.Errorf("RNR NAK %d carries timer code %d, want the responder's MinRNRTimer 4", i, n.Syn.Value())
		}
		if n.PSN != c.PSNA {
			t.Errorf("RNR NAK %d for PSN %d, want %d", i, n.PSN, c.PSNA)
		}
		if reqs[i].PSN != c.PSNA {
			t.Errorf("request %d has PSN %d, want %d", i, reqs[i].PSN, c.PSNA)
		}
		// The retry leaves no earlier than the RNR timer after the NAK
		// arrived, and within one simulator step of it.
		if got := reqs[i+1].At - nakArrivals[i]; got < wait || got > wait+s.step {
			t.Errorf("RNR wait %d: %d ns between the NAK's arrival and the retry, want %d (+%d)", i, got, wait, s.step)
		}
	}
	if last := reqs[len(reqs)-1]; last.At < postAt {
		t.Errorf("the successful request left at %d, before the receive was posted at %d", last.At, postAt)
	}
	if got := db.Ports[0].Counters.RNRNAKsSent; got != uint64(len(naks)) {
		t.Errorf("responder RNRNAKsSent %d, want %d", got, len(naks))
	}
	if got := da.Ports[0].Counters.RNRNAKsRcvd; got != uint64(len(naks)) {
		t.Errorf("requester RNRNAKsRcvd %d, want %d", got, len(naks))
	}
	if a.qp.State() != QPStateRTS || b.qp.State() != QPStateRTS {
		t.Errorf("states %s %s, want RTS", a.qp.State(), b.qp.State())
	}
}

// TestRCRNRRetryExceeded: with rnr_retry 2 and no receive ever posted, the
// SEND completes with RNR_RETRY_EXC_ERR after exactly three RNR NAKs (the
// first try and two retries), the requester QP is in Error and every WR
// posted afterwards is flushed, in order.
func TestRCRNRRetryExceeded(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.RNRRetry, c.MinRNRB = 2, 2
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	var nakArrivals []Time
	s.delivered = func(to int, p *wire.Packet) {
		if to == 0 && p.Opcode == wire.RCAcknowledge && p.AETH().Syndrome().Kind() == wire.SyndromeRNRNAK {
			nakArrivals = append(nakArrivals, s.now)
		}
	}
	postSend(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 100)})
	s.must(1e9, "RNR retry exhaustion", func() bool { return a.scq.Len() > 0 })
	doneAt := s.now
	sc := drain(a.scq)
	if len(sc) != 1 || sc[0].WRID != 1 || sc[0].Status != WCRNRRetryExcErr {
		t.Fatalf("completions %+v, want WR 1 RNR_RETRY_EXC_ERR", sc)
	}
	naks := rnrNAKs(s.sentBy(1))
	reqs := s.sentBy(0)
	if len(naks) != 3 || len(reqs) != 3 {
		t.Fatalf("%d RNR NAKs and %d requests, want 3 and 3", len(naks), len(reqs))
	}
	if got := da.Ports[0].Counters.RNRNAKsRcvd; got != 3 {
		t.Errorf("RNRNAKsRcvd %d, want 3", got)
	}
	for i := range 2 {
		if got := reqs[i+1].At - nakArrivals[i]; got < rnrTimerNS[2] || got > rnrTimerNS[2]+s.step {
			t.Errorf("RNR wait %d: %d ns, want %d", i, got, rnrTimerNS[2])
		}
	}
	// The third NAK ends it at once: no wait after it.
	if doneAt != nakArrivals[2] {
		t.Errorf("error completion at %d, the third RNR NAK arrived at %d", doneAt, nakArrivals[2])
	}
	if a.qp.State() != QPStateError {
		t.Fatalf("requester in %s, want ERR", a.qp.State())
	}
	postSend(t, a,
		SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 10)},
		SendWR{WRID: 3, Opcode: WRRDMAWrite, SGL: a.sge(0, 10), RemoteAddr: b.addr(0), RKey: b.mr.Key},
		SendWR{WRID: 4, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 10)})
	before := len(s.sent)
	s.run(10_000_000, nil)
	want := []wcSummary{{2, WCWRFlushErr}, {3, WCWRFlushErr}, {4, WCWRFlushErr}}
	if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
		t.Errorf("after the error: completions %+v, want %+v", got, want)
	}
	if len(s.sent) != before {
		t.Errorf("%d frames sent by a QP in Error", len(s.sent)-before)
	}
	if b.qp.State() != QPStateRTS {
		t.Errorf("responder in %s, want RTS (RNR is not an error for it)", b.qp.State())
	}
}

// TestRCRNRPipelined: a multi-packet SEND and a WRITE with immediate, each
// followed by other WRs already on the wire, meet an empty receive queue;
// the responder NAKs the first packet RNR and drops what follows (one
// sequence NAK at most), the requester goes back after the RNR wait, and
// once receives are posted everything completes in order with the right
// data.
func TestRCRNRPipelined(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.MinRNRB = 3
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	for i := range 1 << 15 {
		a.mem[i] = byte(i*13 + 5)
	}
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 5000)},
		SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(5000, 3000), RemoteAddr: b.addr(0x8000), RKey: b.mr.Key},
		SendWR{WRID: 3, Opcode: WRRDMAWriteWithImm, Imm: 33, Flags: SendSignaled, SGL: a.sge(8000, 2500), RemoteAddr: b.addr(0xA000), RKey: b.mr.Key},
		SendWR{WRID: 4, Opcode: WRSendWithImm, Imm: 44, Flags: SendSignaled, SGL: a.sge(10500, 100)})
	s.run(200_000, nil)
	if a.scq.Len() != 0 {
		t.Fatalf("completions before any receive: %+v", drain(a.scq))
	}
	postRecv(t, b, RecvWR{WRID: 10, SGL: b.sge(0, 8192)})
	s.run(200_000, nil) // the SEND and the WRITE go; the WRITE with immediate is RNR NAKed
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCSuccess}, {2, WCSuccess}}) {
		t.Fatalf("completions with one receive posted: %+v", got)
	}
	postRecv(t, b, RecvWR{WRID: 11, SGL: b.sge(0x4000, 64)}, RecvWR{WRID: 12, SGL: b.sge(0x5000, 4096)})
	s.must(1e9, "the rest", func() bool { return a.scq.Len() >= 2 && b.rcq.Len() >= 3 })
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{3, WCSuccess}, {4, WCSuccess}}) {
		t.Fatalf("completions: %+v", got)
	}
	rc := drain(b.rcq)
	if len(rc) != 3 || rc[0].WRID != 10 || rc[0].ByteLen != 5000 || rc[1].WRID != 11 || rc[1].Opcode != WCRecvRDMAWithImm || rc[1].Imm != 33 || rc[1].ByteLen != 2500 ||
		rc[2].WRID != 12 || rc[2].Imm != 44 || rc[2].ByteLen != 100 {
		t.Fatalf("receive completions %+v", rc)
	}
	for _, wc := range rc {
		if wc.Status != WCSuccess {
			t.Fatalf("receive completion %+v", wc)
		}
	}
	if !bytes.Equal(b.mem[:5000], a.mem[:5000]) || !bytes.Equal(b.mem[0x8000:0x8000+3000], a.mem[5000:8000]) ||
		!bytes.Equal(b.mem[0xA000:0xA000+2500], a.mem[8000:10500]) || !bytes.Equal(b.mem[0x5000:0x5000+100], a.mem[10500:10600]) {
		t.Fatal("data")
	}
	naks := rnrNAKs(s.sentBy(1))
	if len(naks) < 2 || uint64(len(naks)) != da.Ports[0].Counters.RNRNAKsRcvd {
		t.Fatalf("%d RNR NAKs sent, %d received", len(naks), da.Ports[0].Counters.RNRNAKsRcvd)
	}
	for _, n := range naks {
		if n.Syn.Value() != 3 {
			t.Errorf("RNR NAK timer code %d, want 3", n.Syn.Value())
		}
	}
	if a.qp.State() != QPStateRTS || b.qp.State() != QPStateRTS {
		t.Fatalf("states %s %s", a.qp.State(), b.qp.State())
	}
}
