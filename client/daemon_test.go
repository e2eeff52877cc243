package client

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/verbsdtest"
	"github.com/softib/softib/vhca"
)

// startVerbsd runs a real verbsd in the test process: two vHCAs joined
// by a pipe, as `verbsd -device vhca0,...,pipe=vhca1` makes them.
func startVerbsd(t testing.TB, devs ...verbsd.DeviceConfig) *Options {
	t.Helper()
	_, sock := verbsdtest.Start(t, verbsd.Config{Devices: devs})
	return &Options{Socket: sock}
}

// side is one program's set of objects for a transfer test.
type side struct {
	ctx *Context
	pd  *PD
	cq  *CQ
	qp  *QP
	buf *Buffer
	mr  *MR
	gid Endpoint
}

func newSide(t testing.TB, o *Options, dev string, typ QPType, size int) *side {
	t.Helper()
	ctx, err := Open(dev, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	s := &side{ctx: ctx}
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = ctx.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	if s.buf, err = ctx.Alloc(size); err != nil {
		t.Fatal(err)
	}
	acc := vhca.AccessLocalWrite | vhca.AccessRemoteWrite | vhca.AccessRemoteRead | vhca.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(s.buf.B, acc); err != nil {
		t.Fatal(err)
	}
	s.qp, err = s.pd.CreateQP(QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := ctx.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.gid = Endpoint{QPN: s.qp.Num, PSN: uint32(0x1000 * len(dev)), GID: g.GID}
	return s
}

func connect(t testing.TB, a, b *side) {
	t.Helper()
	acc := vhca.AccessLocalWrite | vhca.AccessRemoteWrite | vhca.AccessRemoteRead | vhca.AccessRemoteAtomic
	if err := a.qp.Connect(Path{GIDIndex: 1, MTU: vhca.MTU4096, Access: acc, LocalPSN: a.gid.PSN, Remote: b.gid, QKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(Path{GIDIndex: 1, MTU: vhca.MTU4096, Access: acc, LocalPSN: b.gid.PSN, Remote: a.gid, QKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
}

// waitWC polls cq until it has one completion, or fails after a while.
func waitWC(t testing.TB, cq *CQ) WC {
	t.Helper()
	var wc [1]WC
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
	}
	t.Fatal("no completion within 10 s")
	return WC{}
}

func TestRCWriteSendReadAtomicThroughVerbsd(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{{"pipe", "vhca0", "vhca1"}, {"loopback", "vhca0", "vhca0"}} {
		t.Run(tc.name, func(t *testing.T) {
			o := startVerbsd(t)
			a := newSide(t, o, tc.a, vhca.QPTypeRC, 1<<20)
			b := newSide(t, o, tc.b, vhca.QPTypeRC, 1<<20)
			if tc.a == tc.b {
				b.gid.PSN = 0x5555
			}
			connect(t, a, b)
			for i := range a.buf.B {
				a.buf.B[i] = byte(i * 7)
			}
			// RDMA WRITE of 100 000 bytes (25 packets at 4096).
			n := 100000
			wr := SendWR{WRID: 1, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
				SGL: []SGE{{Addr: a.mr.Addr, Length: uint32(n), LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr + 16, RKey: b.mr.RKey}
			if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess || wc.WRID != 1 || wc.Opcode != vhca.WCRDMAWrite {
				t.Fatalf("write completion %+v", wc)
			}
			if !bytes.Equal(b.buf.B[16:16+n], a.buf.B[:n]) {
				t.Fatal("written data differs")
			}
			// SEND with immediate into a posted receive.
			if _, err := b.qp.PostRecv([]RecvWR{{WRID: 7, SGL: []SGE{{Addr: b.mr.Addr + 500000, Length: 4096, LKey: b.mr.LKey}}}}); err != nil {
				t.Fatal(err)
			}
			copy(a.buf.B[200000:], "hello, verbs")
			wr = SendWR{WRID: 2, Opcode: vhca.WRSendWithImm, Flags: vhca.SendSignaled, Imm: 0xABCD,
				SGL: []SGE{{Addr: a.mr.Addr + 200000, Length: 12, LKey: a.mr.LKey}}}
			if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess || wc.WRID != 2 {
				t.Fatalf("send completion %+v", wc)
			}
			wc := waitWC(t, b.cq)
			if wc.Status != vhca.WCSuccess || wc.WRID != 7 || wc.ByteLen != 12 || wc.Imm != 0xABCD || wc.Flags&vhca.WCWithImm == 0 {
				t.Fatalf("receive completion %+v", wc)
			}
			if string(b.buf.B[500000:500012]) != "hello, verbs" {
				t.Fatalf("received %q", b.buf.B[500000:500012])
			}
			// RDMA READ back what was written, and a fetch-and-add.
			wr = SendWR{WRID: 3, Opcode: vhca.WRRDMARead, Flags: vhca.SendSignaled,
				SGL: []SGE{{Addr: a.mr.Addr + 600000, Length: uint32(n), LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr + 16, RKey: b.mr.RKey}
			if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess || wc.WRID != 3 {
				t.Fatalf("read completion %+v", wc)
			}
			if !bytes.Equal(a.buf.B[600000:600000+n], a.buf.B[:n]) {
				t.Fatal("read data differs")
			}
			b.buf.B[800000] = 40
			wr = SendWR{WRID: 4, Opcode: vhca.WRAtomicFetchAdd, Flags: vhca.SendSignaled, CompareAdd: 2,
				SGL: []SGE{{Addr: a.mr.Addr + 900000, Length: 8, LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr + 800000, RKey: b.mr.RKey}
			if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess || wc.WRID != 4 {
				t.Fatalf("atomic completion %+v", wc)
			}
			if a.buf.B[900000] != 40 || b.buf.B[800000] != 42 {
				t.Fatalf("fetch-add: fetched %d, target now %d", a.buf.B[900000], b.buf.B[800000])
			}
		})
	}
}

func TestCompletionChannel(t *testing.T) {
	o := startVerbsd(t)
	a := newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
	ctx := a.ctx
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	b := newSide(t, o, "vhca1", vhca.QPTypeRC, 1<<16)
	qp, err := a.pd.CreateQP(QPInitAttr{Type: vhca.QPTypeRC, SendCQ: a.cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	a.qp = qp
	a.gid.QPN = qp.Num
	connect(t, a, b)
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := ch.GetEvent(c); err != context.DeadlineExceeded {
		t.Fatalf("event without a completion: %v", err)
	}
	cancel()
	qp.PostRecv([]RecvWR{{WRID: 9, SGL: []SGE{a.mr.SGE()}}})
	b.qp.PostSend([]SendWR{{WRID: 1, Opcode: vhca.WRSend, SGL: []SGE{{Addr: b.mr.Addr, Length: 100, LKey: b.mr.LKey}}}})
	c, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := ch.GetEvent(c)
	if err != nil || got != cq {
		t.Fatalf("GetEvent: %v, %v", got, err)
	}
	if wc := waitWC(t, cq); wc.WRID != 9 || wc.Status != vhca.WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
}
