package vhca

import (
	"bytes"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestRCPSNWrap: a SEND of 20 packets starting at PSN 2^24-5 crosses the
// 24-bit wrap; it completes, and the responder's expected PSN and the
// requester's next PSN have wrapped to 15. Then a READ and a WRITE across
// the wrap the other way, each with a packet lost once.
func TestRCPSNWrap(t *testing.T) {
	const start = 1<<24 - 5
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<17, 1<<17)
	c := defaultConn()
	c.PSNA, c.PSNB = start, 1<<24-1
	c.Timeout = 8
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	for i := range 1 << 16 {
		a.mem[i] = byte(i*7 + 3)
		b.mem[1<<16+i] = byte(i*5 + 1)
	}
	postRecv(t, b, RecvWR{WRID: 5, SGL: b.sge(0, 20<<10)})
	postSend(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 20<<10)})
	s.must(1e9, "SEND across the wrap", func() bool { return a.scq.Len() > 0 && b.rcq.Len() > 0 })
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCSuccess}}) {
		t.Fatalf("send completion %+v", got)
	}
	if rc := drain(b.rcq); len(rc) != 1 || rc[0].WRID != 5 || rc[0].Status != WCSuccess || rc[0].ByteLen != 20<<10 {
		t.Fatalf("receive completion %+v", rc)
	}
	if !bytes.Equal(b.mem[:20<<10], a.mem[:20<<10]) {
		t.Fatal("SEND data")
	}
	psns := []uint32{}
	for _, p := range s.sentBy(0) {
		psns = append(psns, p.PSN)
	}
	if len(psns) != 20 || psns[0] != start || psns[4] != wire.MaxPSN || psns[5] != 0 || psns[19] != 14 {
		t.Fatalf("request PSNs %v, want 2^24-5 .. 2^24-1, 0 .. 14", psns)
	}
	if b.qp.resp.epsn != 15 || a.qp.req.psn != 15 || a.qp.req.unacked != 15 {
		t.Fatalf("after the wrap: responder expects %d, requester next %d unacked %d; want 15", b.qp.resp.epsn, a.qp.req.psn, a.qp.req.unacked)
	}
	if da.Ports[0].Counters.Retransmits != 0 || db.Ports[0].Counters.RcvPSNDrops != 0 {
		t.Fatalf("a lossless run retransmitted: %+v", da.Ports[0].Counters)
	}

	// B -> A: an 8-packet READ from PSN 2^24-1 whose response at PSN 0
	// is lost once, then a 10-packet WRITE (PSNs 7..16) whose packet at
	// PSN 8 is lost once.
	lostResp, lostReq := false, false
	s.filter = func(from int, p *wire.Packet) []Time {
		psn := p.BTH().PSN()
		switch {
		case from == 0 && p.Info.Operation == wire.OpReadResponse && psn == 0 && !lostResp:
			lostResp = true
			return nil
		case from == 1 && !p.Info.Response && psn == 8 && !lostReq:
			lostReq = true
			return nil
		}
		return deliverOnce
	}
	postSend(t, b,
		SendWR{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: b.sge(0x8000, 8<<10), RemoteAddr: a.addr(0x100), RKey: a.mr.Key},
		SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: b.sge(1<<16, 10<<10), RemoteAddr: a.addr(1 << 16), RKey: a.mr.Key})
	s.must(1e9, "READ and WRITE across the wrap", func() bool { return b.scq.Len() >= 2 })
	if got := summarize(drain(b.scq)); !equalSummaries(got, []wcSummary{{3, WCSuccess}, {2, WCSuccess}}) {
		t.Fatalf("completions %+v", got)
	}
	if !lostResp || !lostReq {
		t.Fatal("the losses did not happen")
	}
	if !bytes.Equal(a.mem[1<<16:1<<16+10<<10], b.mem[1<<16:1<<16+10<<10]) || !bytes.Equal(b.mem[0x8000:0x8000+8<<10], a.mem[0x100:0x100+8<<10]) {
		t.Fatal("WRITE or READ data")
	}
	// The READ went again from PSN 0, the WRITE from PSN 8.
	var retried []uint32
	for _, p := range s.sentBy(1, wire.RCRDMAReadRequest) {
		retried = append(retried, p.PSN)
	}
	if len(retried) != 2 || retried[0] != wire.MaxPSN || retried[1] != 0 {
		t.Errorf("READ requests at PSNs %v, want [2^24-1 0]", retried)
	}
	if a.qp.resp.epsn != 17 || b.qp.req.psn != 17 || b.qp.req.unacked != 17 {
		t.Fatalf("responder expects %d, requester next %d unacked %d; want 17", a.qp.resp.epsn, b.qp.req.psn, b.qp.req.unacked)
	}
}
