package vhca

import (
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestRCRetryExceededVanishedPeer: the peer stops receiving. With retry_cnt
// 3 and timeout T the requester times out retry_cnt+1 times, 4.096 µs ×
// 2^T each on the virtual clock, retransmitting from the oldest
// unacknowledged PSN after each of the first three; the fourth completes
// the oldest WR with RETRY_EXC_ERR, the QP goes to Error and every other
// WR, those outstanding and those posted later, is flushed in order.
func TestRCRetryExceededVanishedPeer(t *testing.T) {
	const T = 12 // 16.78 ms
	timeout := Time(4096) << T
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.Timeout, c.RetryCnt = T, 3
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	dead := false
	s.filter = func(from int, p *wire.Packet) []Time {
		if dead && from == 0 {
			return nil
		}
		return deliverOnce
	}
	// The link works: a first WRITE completes.
	postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s.must(1e9, "first WRITE", func() bool { return a.scq.Len() > 0 })
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCSuccess}}) {
		t.Fatalf("first WRITE: %+v", got)
	}
	s.run(1_000_000, nil) // quiet

	dead = true
	firstPSN := c.PSNA + 1
	mark := len(s.sent)
	postSend(t, a,
		SendWR{WRID: 10, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 2000), RemoteAddr: b.addr(0), RKey: b.mr.Key},
		SendWR{WRID: 11, Opcode: WRSend, SGL: a.sge(0, 10)},
		SendWR{WRID: 12, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 10), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s.must(10*timeout, "retry exhaustion", func() bool { return a.scq.Len() > 0 })
	doneAt := s.now

	// Each (re)transmission of the oldest PSN starts a burst of the four
	// packets of the three WRs.
	var firsts []Time
	for _, p := range s.sent[mark:] {
		if p.From != 0 {
			t.Fatalf("the dead peer sent %v", p.Op)
		}
		if p.PSN == firstPSN {
			firsts = append(firsts, p.At)
		}
	}
	if got := len(s.sent) - mark; got != 4*4 {
		t.Errorf("%d packets sent, want 4 tries of 4", got)
	}
	if len(firsts) != 4 {
		t.Fatalf("the oldest PSN was sent %d times, want 4 (retry_cnt 3)", len(firsts))
	}
	for i := 1; i < 4; i++ {
		if got := firsts[i] - firsts[i-1]; got < timeout || got > timeout+s.step {
			t.Errorf("retry %d left %d ns after the previous try, want the timeout %d", i, got, timeout)
		}
	}
	if got := doneAt - firsts[3]; got < timeout || got > timeout+s.step {
		t.Errorf("RETRY_EXC_ERR %d ns after the last try, want %d", got, timeout)
	}
	if got := doneAt - firsts[0]; got < 4*timeout || got > 4*timeout+s.step {
		t.Errorf("RETRY_EXC_ERR %d ns after the first try, want (retry_cnt+1)*timeout = %d", got, 4*timeout)
	}
	if got := da.Ports[0].Counters.Timeouts; got != 4 {
		t.Errorf("Timeouts %d, want 4", got)
	}
	if a.qp.State() != QPStateError {
		t.Fatalf("requester in %s, want ERR", a.qp.State())
	}
	postSend(t, a, SendWR{WRID: 13, Opcode: WRSend, SGL: a.sge(0, 10)})
	s.run(10*timeout, nil)
	want := []wcSummary{{10, WCRetryExcErr}, {11, WCWRFlushErr}, {12, WCWRFlushErr}, {13, WCWRFlushErr}}
	if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
		t.Errorf("completions %+v, want %+v", got, want)
	}
	if got := len(s.sent) - mark; got != 16 {
		t.Errorf("%d packets sent in all, want 16: nothing after the error", got)
	}
}
