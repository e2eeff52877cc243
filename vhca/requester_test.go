package vhca

import (
	"bytes"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestRCReadAtomicDepthAndFence: with max_rd_atomic 1 the requester has
// one READ or atomic outstanding at a time: the second READ's request
// leaves only after the first READ's last response arrived; a fenced SEND
// waits for the READ before it, an unfenced one does not.
func TestRCReadAtomicDepthAndFence(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 1<<16)
	c := defaultConn()
	c.MaxRdAtomic = 1
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	var lastResp []Time // when each READ's last response reached A
	s.delivered = func(to int, p *wire.Packet) {
		if to == 0 && (p.Opcode == wire.RCRDMAReadResponseLast || p.Opcode == wire.RCRDMAReadResponseOnly || p.Opcode == wire.RCAtomicAcknowledge) {
			lastResp = append(lastResp, s.now)
		}
	}
	for i := range b.mem {
		b.mem[i] = byte(i * 3)
	}
	postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, 64)}, RecvWR{WRID: 2, SGL: b.sge(64, 64)})
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(0, 4096), RemoteAddr: b.addr(4096), RKey: b.mr.Key},
		SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(8192, 10)}, // not fenced: goes at once
		SendWR{WRID: 3, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: a.sge(8200, 8), RemoteAddr: b.addr(0x8000), RKey: b.mr.Key, CompareAdd: 1},
		SendWR{WRID: 4, Opcode: WRSend, Flags: SendSignaled | SendFence, SGL: a.sge(8192, 10)}, // waits for the atomic
	)
	s.must(1e9, "four WRs", func() bool { return a.scq.Len() >= 4 })
	want := []wcSummary{{1, WCSuccess}, {2, WCSuccess}, {3, WCSuccess}, {4, WCSuccess}}
	if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
		t.Fatalf("completions %+v", got)
	}
	if !bytes.Equal(a.mem[:4096], b.mem[4096:8192]) {
		t.Fatal("READ data")
	}
	reqs := s.sentBy(0)
	if len(reqs) != 4 || len(lastResp) != 2 {
		t.Fatalf("%d requests, %d READ/atomic answers", len(reqs), len(lastResp))
	}
	if reqs[0].Op != wire.RCRDMAReadRequest || reqs[1].Op != wire.RCSendOnly || reqs[1].At != reqs[0].At {
		t.Errorf("the unfenced SEND did not follow the READ at once: %+v", reqs[:2])
	}
	if reqs[2].Op != wire.RCFetchAdd || reqs[2].At < lastResp[0] {
		t.Errorf("the atomic left at %d, before the READ's last response (%d): max_rd_atomic 1 exceeded", reqs[2].At, lastResp[0])
	}
	if reqs[3].Op != wire.RCSendOnly || reqs[3].At < lastResp[1] {
		t.Errorf("the fenced SEND left at %d, before the atomic's answer (%d)", reqs[3].At, lastResp[1])
	}
}

// TestLocalProtectionError: a send WR whose SGE names a key that is not
// a region of the QP's PD completes with LOC_PROT_ERR. RC: the QP goes to
// Error and the WRs after it are flushed. UC: the send queue goes to SQE
// (the WRs after it flushed), receiving goes on, and SQE->RTS resumes.
func TestLocalProtectionError(t *testing.T) {
	t.Run("RC", func(t *testing.T) {
		da, db, a, b := twoDevices(t, QPTypeRC, 4096, 4096)
		connectWith(t, a, b, defaultConn())
		s := newXSim(t, da, db)
		postSend(t, a,
			SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(0), RKey: b.mr.Key},
			SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000, Length: 100, LKey: a.mr.Key ^ 1}}, RemoteAddr: b.addr(0), RKey: b.mr.Key},
			SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(0), RKey: b.mr.Key})
		s.must(1e9, "completions", func() bool { return a.scq.Len() >= 3 })
		got := summarize(drain(a.scq))
		if len(got) != 3 || got[1] != (wcSummary{2, WCLocProtErr}) || got[2] != (wcSummary{3, WCWRFlushErr}) || got[0].WRID != 1 {
			t.Fatalf("completions %+v", got)
		}
		if a.qp.State() != QPStateError {
			t.Fatalf("state %s", a.qp.State())
		}
		if n := len(s.sentBy(0)); n != 1 {
			t.Errorf("%d packets sent, want the first WRITE's only", n)
		}
	})
	t.Run("UC", func(t *testing.T) {
		da, db, a, b := twoDevices(t, QPTypeUC, 4096, 4096)
		connectWith(t, a, b, defaultConn())
		s := newXSim(t, da, db)
		postRecv(t, a, RecvWR{WRID: 70, SGL: a.sge(2048, 64)})
		postSend(t, a,
			SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(0), RKey: b.mr.Key},
			SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000, Length: 100, LKey: a.mr.Key ^ 1}}, RemoteAddr: b.addr(0), RKey: b.mr.Key},
			SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(0), RKey: b.mr.Key})
		s.must(1e9, "completions", func() bool { return a.scq.Len() >= 3 })
		want := []wcSummary{{1, WCSuccess}, {2, WCLocProtErr}, {3, WCWRFlushErr}}
		if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
			t.Fatalf("completions %+v, want %+v", got, want)
		}
		if a.qp.State() != QPStateSQE {
			t.Fatalf("state %s, want SQE", a.qp.State())
		}
		// The receive side of a QP in SQE works.
		postSend(t, b, SendWR{WRID: 9, Opcode: WRSend, SGL: b.sge(0, 20)})
		s.must(1e9, "SEND to the QP in SQE", func() bool { return a.rcq.Len() > 0 })
		if rc := drain(a.rcq); len(rc) != 1 || rc[0].WRID != 70 || rc[0].Status != WCSuccess {
			t.Fatalf("receive in SQE: %+v", rc)
		}
		if err := da.ModifyQP(a.qp, &QPAttr{State: QPStateRTS}, QPAttrState); err != nil {
			t.Fatal(err)
		}
		postSend(t, a, SendWR{WRID: 4, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 100), RemoteAddr: b.addr(512), RKey: b.mr.Key})
		s.must(1e9, "WRITE after SQE->RTS", func() bool { return a.scq.Len() > 0 })
		s.run(1e6, nil)
		if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{4, WCSuccess}}) {
			t.Fatalf("completions %+v", got)
		}
		if !bytes.Equal(b.mem[512:612], a.mem[:100]) {
			t.Fatal("WRITE after SQE->RTS did not arrive")
		}
	})
}

// TestUDReceiveTooSmall: a datagram larger than its receive WQE (the 40
// bytes of GRH area included) completes that WQE with LOC_LEN_ERR and
// writes nothing past it; the next datagram uses the next WQE.
func TestUDReceiveTooSmall(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeUD, 4096, 4096)
	udEndpoint(t, a, 7)
	udEndpoint(t, b, 7)
	ah := udAH(t, a, b)
	s := newXSim(t, da, db)
	for i := range b.mem {
		b.mem[i] = 0xEE
	}
	postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, 40+99)}, RecvWR{WRID: 2, SGL: b.sge(1024, 40+100)})
	postSend(t, a,
		SendWR{WRID: 1, Opcode: WRSend, SGL: a.sge(0, 100), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 7},
		SendWR{WRID: 2, Opcode: WRSend, SGL: a.sge(0, 100), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 7})
	s.must(1e9, "datagrams", func() bool { return b.rcq.Len() >= 2 })
	rc := drain(b.rcq)
	if len(rc) != 2 || rc[0].WRID != 1 || rc[0].Status != WCLocLenErr || rc[1].WRID != 2 || rc[1].Status != WCSuccess || rc[1].ByteLen != 140 {
		t.Fatalf("completions %+v", rc)
	}
	for i := 139; i < 1024; i++ {
		if b.mem[i] != 0xEE {
			t.Fatalf("byte %d written", i)
		}
	}
}

// TestDeregMRDuringRead: the source region of a multi-packet READ is
// deregistered while its responses are being sent: the response stream
// stops with a remote access error NAK, the READ completes with
// REM_ACCESS_ERR, and the released memory is not read... nor written.
func TestDeregMRDuringRead(t *testing.T) {
	da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, 4096)
	mem := &trackedMemory{buf: make([]byte, 16<<10)}
	for i := range mem.buf {
		mem.buf[i] = byte(i*7 + 1)
	}
	mr, err := db.RegMR(b.pd, mem, 0x400000, AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	c := defaultConn()
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	s.filter = func(from int, p *wire.Packet) []Time {
		if from == 1 && p.Info.Operation == wire.OpReadResponse && p.BTH().PSN() == c.PSNA+3 {
			if err := db.DeregMR(mr); err != nil {
				t.Error(err)
			}
		}
		return deliverOnce
	}
	postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(0, 16<<10), RemoteAddr: 0x400000, RKey: mr.Key})
	s.must(1e9, "READ", func() bool { return a.scq.Len() > 0 })
	s.run(1e7, nil)
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{1, WCRemAccessErr}}) {
		t.Fatalf("completion %+v", got)
	}
	resps := s.sentBy(1, wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast)
	if len(resps) != 4 {
		t.Errorf("%d READ responses sent, want the 4 before the deregistration", len(resps))
	}
	naks := s.naksBy(1)
	if len(naks) != 1 || naks[0].Syn.Value() != wire.NAKRemoteAccessError || naks[0].PSN != c.PSNA+4 {
		t.Fatalf("NAKs %+v, want one remote access error at PSN %d", naks, c.PSNA+4)
	}
	if mem.released != 1 || !bytes.Equal(mem.buf, mem.atRel) {
		t.Fatalf("released %d times; memory changed after release: %v", mem.released, !bytes.Equal(mem.buf, mem.atRel))
	}
	if b.qp.State() != QPStateError || a.qp.State() != QPStateError {
		t.Errorf("states %s %s", a.qp.State(), b.qp.State())
	}
}
