package vhca

import (
	"encoding/binary"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// Regression tests of engine bugs the targeted tests found: each failed
// before its fix.

// TestUCFlushReturnsAbandonedReceiveWQE: a UC message loses a middle
// packet; the responder abandons it but keeps its receive WQE for the next
// message (right: no partial completion). When the QP then goes to Error,
// every receive WQE must complete, flushed, in order (IBA 1.4 §10.3.1) -
// the kept one too, else its buffer is lost to the consumer for good.
func TestUCFlushReturnsAbandonedReceiveWQE(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeUC, 1<<16, 1<<16)
	c := defaultConn()
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	s.filter = func(from int, p *wire.Packet) []Time {
		if from == 0 && p.BTH().PSN() == c.PSNA+1 {
			return nil // the SEND's middle packet
		}
		return deliverOnce
	}
	postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, 8192)}, RecvWR{WRID: 2, SGL: b.sge(8192, 8192)})
	postSend(t, a, SendWR{WRID: 9, Opcode: WRSend, SGL: a.sge(0, 3000)})
	s.run(1e7, nil)
	if b.rcq.Len() != 0 {
		t.Fatalf("completions for a message that lost a packet: %+v", drain(b.rcq))
	}
	if err := db.ModifyQP(b.qp, &QPAttr{State: QPStateError}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	want := []wcSummary{{1, WCWRFlushErr}, {2, WCWRFlushErr}}
	if got := summarize(drain(b.rcq)); !equalSummaries(got, want) {
		t.Fatalf("flushed receives %+v, want %+v", got, want)
	}
}

// TestRCZeroLengthRDMAWithoutRKey: an RDMA WRITE or READ of zero bytes
// need not carry a valid R_Key or VA; the responder must not check them
// (IBA 1.4 C9-88, which rxe cites in check_rkey) and the WRs succeed.
func TestRCZeroLengthRDMAWithoutRKey(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 4096, 4096)
	connectWith(t, a, b, defaultConn())
	s := newXSim(t, da, db)
	postRecv(t, b, RecvWR{WRID: 50, SGL: b.sge(0, 64)})
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled},
		SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled},
		SendWR{WRID: 3, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, Imm: 7})
	s.must(1e9, "zero-length RDMA", func() bool { return a.scq.Len() >= 3 })
	want := []wcSummary{{1, WCSuccess}, {2, WCSuccess}, {3, WCSuccess}}
	if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
		t.Fatalf("completions %+v, want %+v", got, want)
	}
	if rc := drain(b.rcq); len(rc) != 1 || rc[0].Status != WCSuccess || rc[0].Imm != 7 || rc[0].ByteLen != 0 {
		t.Fatalf("receive completions %+v", rc)
	}
}

// TestSolicitedCompletionEvent: a receive CQ armed for solicited
// completions only raises its event for a message sent with the
// solicited event bit (IBV_SEND_SOLICITED), not for one without.
func TestSolicitedCompletionEvent(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 4096, 4096)
	connectWith(t, a, b, defaultConn())
	s := newXSim(t, da, db)
	postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, 64)}, RecvWR{WRID: 2, SGL: b.sge(64, 64)})
	b.rcq.ReqNotify(true)
	postSend(t, a, SendWR{WRID: 1, Opcode: WRSend, SGL: a.sge(0, 10)})
	s.must(1e9, "first SEND", func() bool { return b.rcq.Len() == 1 })
	if ev := eventsOf(drainEvents(db), EventCompletion); len(ev) != 0 {
		t.Fatalf("event for an unsolicited message: %+v", ev)
	}
	postSend(t, a, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSolicited, SGL: a.sge(0, 10)})
	s.must(1e9, "second SEND", func() bool { return b.rcq.Len() == 2 })
	if sent := s.sentBy(0, wire.RCSendOnly); len(sent) != 2 {
		t.Fatalf("%d SENDs on the wire", len(sent))
	}
	if ev := eventsOf(drainEvents(db), EventCompletion); len(ev) != 1 || ev[0].CQ != b.rcq {
		t.Fatalf("events %+v, want one EventCompletion for the receive CQ", ev)
	}
}

// TestSQDDrainedAfterAtomic: RTS->SQD with EnSQDAsyncNotify while an
// atomic is the only outstanding WR: EventSQDrained comes once its ACK
// has completed it.
func TestSQDDrainedAfterAtomic(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 4096, 4096)
	connectWith(t, a, b, defaultConn())
	s := newXSim(t, da, db)
	postSend(t, a, SendWR{WRID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: a.sge(0, 8), RemoteAddr: b.addr(0), RKey: b.mr.Key, CompareAdd: 3})
	s.run(1, func() bool { return len(s.sent) > 0 })
	if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateSQD, EnSQDAsyncNotify: true}, QPAttrState|QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	s.must(1e9, "atomic", func() bool { return a.scq.Len() > 0 })
	s.run(1e7, nil)
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCSuccess}}) {
		t.Fatalf("completions %+v", got)
	}
	if binary.NativeEndian.Uint64(b.mem) != 3 {
		t.Fatal("atomic not executed")
	}
	if ev := eventsOf(drainEvents(da), EventSQDrained); len(ev) != 1 {
		t.Fatalf("%d EventSQDrained, want 1", len(ev))
	}
}

// TestUDSolicitedCompletionEvent: as TestSolicitedCompletionEvent, for UD:
// a datagram sent with IBV_SEND_SOLICITED wakes a receive CQ armed for
// solicited completions; one without does not.
func TestUDSolicitedCompletionEvent(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeUD, 4096, 4096)
	udEndpoint(t, a, 5)
	udEndpoint(t, b, 5)
	ah := udAH(t, a, b)
	s := newXSim(t, da, db)
	postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, 256)}, RecvWR{WRID: 2, SGL: b.sge(256, 256)})
	b.rcq.ReqNotify(true)
	postSend(t, a, SendWR{WRID: 1, Opcode: WRSend, SGL: a.sge(0, 10), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 5})
	s.must(1e9, "first datagram", func() bool { return b.rcq.Len() == 1 })
	if ev := eventsOf(drainEvents(db), EventCompletion); len(ev) != 0 {
		t.Fatalf("event for an unsolicited datagram: %+v", ev)
	}
	postSend(t, a, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSolicited, SGL: a.sge(0, 10), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 5})
	s.must(1e9, "second datagram", func() bool { return b.rcq.Len() == 2 })
	if ev := eventsOf(drainEvents(db), EventCompletion); len(ev) != 1 || ev[0].CQ != b.rcq {
		t.Fatalf("events %+v, want one EventCompletion for the receive CQ", ev)
	}
}
