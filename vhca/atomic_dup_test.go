package vhca

import (
	"encoding/binary"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestRCDuplicateAtomic: the link delivers the FetchAdd request twice at
// once, and a third copy long after its ACK (and after a second atomic).
// The responder executes it once and answers duplicates from its saved
// result (IBA 1.4 §9.7.5.2.1: an atomic is never executed twice): the copy
// that arrives while the first answer still waits to be sent shares that
// answer (the response queue holds one per PSN), the late copy gets its
// own. The requester completes it once, with the original value.
func TestRCDuplicateAtomic(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 4096, 4096)
	c := defaultConn()
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	const initial = 1000
	binary.NativeEndian.PutUint64(b.mem[64:], initial)
	var late []byte
	var origs []uint64 // the original values the FetchAdd's ACKs carry
	s.filter = func(from int, p *wire.Packet) []Time {
		if from == 1 && p.Opcode == wire.RCAtomicAcknowledge && p.BTH().PSN() == c.PSNA {
			origs = append(origs, p.AtomicAckETH().OrigRemDt())
		}
		if from == 0 && p.Opcode == wire.RCFetchAdd && late == nil {
			late = append([]byte(nil), p.Frame[:p.Len()]...)
			return []Time{0, 0}
		}
		return deliverOnce
	}
	postSend(t, a, SendWR{WRID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: a.sge(0, 8), RemoteAddr: b.addr(64), RKey: b.mr.Key, CompareAdd: 5})
	s.must(1e9, "FetchAdd", func() bool { return a.scq.Len() > 0 })
	s.run(100_000, nil)
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCSuccess}}) {
		t.Fatalf("completions %+v", got)
	}
	// A second atomic, then the stale duplicate of the first.
	postSend(t, a, SendWR{WRID: 2, Opcode: WRAtomicCmpSwap, Flags: SendSignaled, SGL: a.sge(8, 8), RemoteAddr: b.addr(64), RKey: b.mr.Key, CompareAdd: initial + 5, Swap: 77})
	s.must(1e9, "CmpSwap", func() bool { return a.scq.Len() > 0 })
	s.inject(1, late, 0)
	s.run(1_000_000, nil)
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{2, WCSuccess}}) {
		t.Fatalf("completions %+v", got)
	}

	if got := binary.NativeEndian.Uint64(b.mem[64:]); got != 77 {
		t.Errorf("remote value %d, want 77 (1000, +5 once, then swapped)", got)
	}
	if got := binary.NativeEndian.Uint64(a.mem[0:]); got != initial {
		t.Errorf("FetchAdd returned %d, want %d", got, initial)
	}
	if got := binary.NativeEndian.Uint64(a.mem[8:]); got != initial+5 {
		t.Errorf("CmpSwap returned %d, want %d", got, initial+5)
	}
	// Two answers to the three copies of the FetchAdd (the simultaneous
	// pair shares one), both with the value from before it.
	acks := s.sentBy(1, wire.RCAtomicAcknowledge)
	n := 0
	for _, ack := range acks {
		if ack.PSN == c.PSNA {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d atomic ACKs for the FetchAdd, want 2", n)
	}
	if len(origs) != 2 || origs[0] != initial || origs[1] != initial {
		t.Errorf("the FetchAdd's ACKs carry %v, want %d twice", origs, initial)
	}
	if len(acks) != 3 {
		t.Errorf("%d atomic ACKs in all, want 3", len(acks))
	}
	if b.qp.State() != QPStateRTS || a.qp.State() != QPStateRTS {
		t.Errorf("states %s %s", a.qp.State(), b.qp.State())
	}
	// Check the saved result the duplicates were answered with.
	for _, res := range b.qp.resp.res {
		if res.valid && res.psn == c.PSNA && res.orig != initial {
			t.Errorf("saved FetchAdd result %d, want %d", res.orig, initial)
		}
	}
}
