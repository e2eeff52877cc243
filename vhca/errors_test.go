package vhca

import (
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestRCRemoteErrors: requests the responder must refuse (IBA 1.4
// §9.7.5.2, R_Key checks, §9.9 responder errors). For each: the requester's
// WR completes with the status the NAK maps to, the WR after it is
// flushed, the WR before it succeeds; both QPs end in Error; the
// responder's posted receives are flushed; one NAK was sent and received;
// the responder's memory is untouched (and the requester's, for READs).
func TestRCRemoteErrors(t *testing.T) {
	const memB = 1 << 16
	type setup struct {
		a, b *endpoint
		// other regions of B
		noWrite, noRead, noAtomic, otherPD *MR
	}
	cases := []struct {
		name      string
		accessB   Access // B's QP access flags (0: all)
		wr        func(s *setup) SendWR
		want      WCStatus
		recvLen   uint32   // B's first receive buffer length
		wantRecv0 WCStatus // the first receive's status (flushed unless it takes part)
	}{
		{name: "write bad rkey", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: s.a.sge(0, 2000), RemoteAddr: s.b.addr(0), RKey: s.b.mr.Key ^ 1}
		}},
		{name: "write past the end", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: s.a.sge(0, 2000), RemoteAddr: s.b.addr(memB - 1000), RKey: s.b.mr.Key}
		}},
		{name: "write below the start", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: s.a.sge(0, 2000), RemoteAddr: s.b.addr(0) - 8, RKey: s.b.mr.Key}
		}},
		{name: "write without remote write on the MR", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: s.a.sge(0, 2000), RemoteAddr: s.noWrite.IOVA, RKey: s.noWrite.Key}
		}},
		{name: "write without remote write on the QP", accessB: AccessRemoteRead | AccessRemoteAtomic, want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: s.a.sge(0, 2000), RemoteAddr: s.b.addr(0), RKey: s.b.mr.Key}
		}},
		{name: "write to another PD", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: s.a.sge(0, 2000), RemoteAddr: s.otherPD.IOVA, RKey: s.otherPD.Key}
		}},
		{name: "read bad rkey", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: s.a.sge(0x8000, 3000), RemoteAddr: s.b.addr(0), RKey: s.b.mr.Key ^ 1}
		}},
		{name: "read past the end", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: s.a.sge(0x8000, 3000), RemoteAddr: s.b.addr(memB - 2999), RKey: s.b.mr.Key}
		}},
		{name: "read without remote read on the QP", accessB: AccessRemoteWrite | AccessRemoteAtomic, want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: s.a.sge(0x8000, 3000), RemoteAddr: s.b.addr(0), RKey: s.b.mr.Key}
		}},
		{name: "read without remote read on the MR", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: s.a.sge(0x8000, 3000), RemoteAddr: s.noRead.IOVA, RKey: s.noRead.Key}
		}},
		{name: "read from another PD", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: s.a.sge(0x8000, 3000), RemoteAddr: s.otherPD.IOVA, RKey: s.otherPD.Key}
		}},
		{name: "atomic misaligned", want: WCRemInvReqErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRAtomicFetchAdd, SGL: s.a.sge(0x8000, 8), RemoteAddr: s.b.addr(4), RKey: s.b.mr.Key, CompareAdd: 1}
		}},
		{name: "atomic without remote atomic on the MR", want: WCRemAccessErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRAtomicCmpSwap, SGL: s.a.sge(0x8000, 8), RemoteAddr: s.noAtomic.IOVA, RKey: s.noAtomic.Key, Swap: 1}
		}},
		{name: "send longer than the receive", want: WCRemInvReqErr, recvLen: 1000, wantRecv0: WCLocLenErr, wr: func(s *setup) SendWR {
			return SendWR{Opcode: WRSend, SGL: s.a.sge(0, 2000)}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			da, db, a, b := twoDevices(t, QPTypeRC, 1<<16, memB)
			st := &setup{a: a, b: b}
			var err error
			mk := func(pd *PD, acc Access, iova uint64) *MR {
				mr, err := db.RegMR(pd, SliceMemory(make([]byte, 4096)), iova, acc)
				if err != nil {
					t.Fatal(err)
				}
				return mr
			}
			st.noWrite = mk(b.pd, AccessLocalWrite|AccessRemoteRead|AccessRemoteAtomic, 0x100000)
			st.noRead = mk(b.pd, AccessLocalWrite|AccessRemoteWrite|AccessRemoteAtomic, 0x200000)
			st.noAtomic = mk(b.pd, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead, 0x300000)
			pd2, err := db.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			st.otherPD = mk(pd2, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic, 0x400000)
			c := defaultConn()
			c.AccessB = tc.accessB
			connectWith(t, a, b, c)
			s := newXSim(t, da, db)
			for i := range a.mem {
				a.mem[i] = byte(i%251 + 1)
			}
			rl := tc.recvLen
			if rl == 0 {
				rl = 4096
			}
			postRecv(t, b,
				RecvWR{WRID: 100, SGL: b.sge(0x8000, rl)},
				RecvWR{WRID: 101, SGL: b.sge(0x9000, 4096)},
				RecvWR{WRID: 102, SGL: b.sge(0xA000, 4096)})
			bad := tc.wr(st)
			bad.WRID, bad.Flags = 1, SendSignaled
			// A WR that succeeds before the bad one: a WRITE, or an
			// atomic where the QP refuses remote writes.
			pre := SendWR{WRID: 0, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 64), RemoteAddr: b.addr(0xF000), RKey: b.mr.Key}
			if tc.accessB != 0 && tc.accessB&AccessRemoteWrite == 0 {
				pre.Opcode, pre.SGL, pre.CompareAdd = WRAtomicFetchAdd, a.sge(0x7000, 8), 3
			}
			postSend(t, a, pre, bad,
				SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 64)})
			s.must(1e9, "error completions", func() bool {
				return a.scq.Len() >= 3 && b.rcq.Len() >= 3 && b.qp.State() == QPStateError
			})
			s.run(1e6, nil) // nothing more may happen
			want := []wcSummary{{0, WCSuccess}, {1, tc.want}, {2, WCWRFlushErr}}
			if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
				t.Errorf("requester completions %+v, want %+v", got, want)
			}
			recv0 := tc.wantRecv0
			if recv0 == 0 {
				recv0 = WCWRFlushErr
			}
			wantR := []wcSummary{{100, recv0}, {101, WCWRFlushErr}, {102, WCWRFlushErr}}
			if got := summarize(drain(b.rcq)); !equalSummaries(got, wantR) {
				t.Errorf("responder receive completions %+v, want %+v", got, wantR)
			}
			if a.qp.State() != QPStateError || b.qp.State() != QPStateError {
				t.Errorf("states %s %s, want ERR ERR", a.qp.State(), b.qp.State())
			}
			// The responder's affiliated asynchronous error: an invalid
			// request or an access violation (ibv_get_async_event(3)).
			wantEv := map[WCStatus]EventType{WCRemAccessErr: EventQPAccessErr, WCRemInvReqErr: EventQPReqErr}[tc.want]
			if ev := drainEvents(db); len(ev) != 1 || ev[0].Type != wantEv || ev[0].QP != b.qp {
				t.Errorf("responder events %+v, want one of type %d for its QP", ev, wantEv)
			}
			ca, cb := da.Ports[0].Counters, db.Ports[0].Counters
			if cb.NAKsSent != 1 || ca.NAKsRcvd != 1 {
				t.Errorf("NAKs sent %d received %d, want 1 and 1", cb.NAKsSent, ca.NAKsRcvd)
			}
			naks := 0
			for _, p := range s.sentBy(1, wire.RCAcknowledge) {
				if p.Syn.Kind() == wire.SyndromeNAK {
					naks++
					code := map[WCStatus]uint8{WCRemAccessErr: wire.NAKRemoteAccessError, WCRemInvReqErr: wire.NAKInvalidRequest}[tc.want]
					if p.Syn.Value() != code || p.PSN != c.PSNA+1 {
						t.Errorf("NAK %v for PSN %d, want code %d for PSN %d", p.Syn, p.PSN, code, c.PSNA+1)
					}
				}
			}
			if naks != 1 {
				t.Errorf("%d NAKs on the wire, want 1", naks)
			}
			// B's memory: only the first WRITE's 64 bytes at 0xF000, and,
			// for the SEND, at most the receive buffer.
			for i, v := range b.mem {
				if i >= 0xF000 && i < 0xF000+64 || tc.wantRecv0 == WCLocLenErr && i >= 0x8000 && i < 0x8000+int(rl) {
					continue
				}
				if v != 0 {
					t.Fatalf("responder memory written at %#x", i)
				}
			}
			for _, mr := range []*MR{st.noWrite, st.noRead, st.noAtomic, st.otherPD} {
				for i, v := range mr.buf {
					if v != 0 {
						t.Fatalf("region %#x written at %d", mr.IOVA, i)
					}
				}
			}
			for i := 0x8000; i < 0x8000+3000; i++ {
				if a.mem[i] != byte(i%251+1) {
					t.Fatalf("requester memory written at %#x", i)
				}
			}
		})
	}
}
