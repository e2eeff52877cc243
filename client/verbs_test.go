package client

import (
	"context"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/softib/softib/vhca"
)

// The verbs not exercised by the transfer tests: queries, SRQ (post,
// limit event, query), QueryQP, AH and UD with an SRQ, and destroying
// everything in an order the verbs allow.
func TestSRQQueryQPAndUD(t *testing.T) {
	o := startVerbsd(t)
	a := newSide(t, o, "vhca0", vhca.QPTypeUD, 1<<16)
	b := newSide(t, o, "vhca1", vhca.QPTypeUD, 1<<16)

	dev, err := a.ctx.QueryDevice()
	if err != nil || dev.PhysPortCnt != 1 || dev.MaxQP == 0 {
		t.Fatalf("QueryDevice: %+v, %v", dev, err)
	}
	if k, err := a.ctx.QueryPKey(1, 0); err != nil || k != 0xFFFF {
		t.Fatalf("QueryPKey: %#x, %v", k, err)
	}
	if _, err := a.ctx.QueryGID(1, 99); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("GID index 99: %v", err)
	}

	// b receives through an SRQ armed at a limit of 4.
	srq, err := b.pd.CreateSRQ(SRQAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := b.pd.CreateQP(QPInitAttr{Type: vhca.QPTypeUD, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv([]RecvWR{{}}); err == nil {
		t.Fatal("PostRecv on a QP of an SRQ accepted")
	}
	for i := range 4 {
		if _, err := srq.PostRecv([]RecvWR{{WRID: uint64(100 + i), SGL: []SGE{{Addr: b.mr.Addr + uint64(i)*1024, Length: 1024, LKey: b.mr.LKey}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(4); err != nil {
		t.Fatal(err)
	}
	if attr, err := srq.Query(); err != nil || attr.Limit != 4 || attr.MaxWR < 8 {
		t.Fatalf("QuerySRQ: %+v, %v", attr, err)
	}
	if err := qp.Connect(Path{GIDIndex: 1, QKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.Connect(Path{GIDIndex: 1, QKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
	attr, err := qp.Query()
	if err != nil || attr.State != vhca.QPStateRTS || attr.QKey != 0x11111111 {
		t.Fatalf("QueryQP: %+v, %v", attr, err)
	}
	g, _ := b.ctx.QueryGID(1, 1)
	ah, err := a.pd.CreateAH(AV{Port: 1, IsGlobal: true, GRH: vhca.GlobalRoute{DGID: g.GID, SGIDIndex: 1, HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	copy(a.buf.B, "datagram")
	wr := SendWR{WRID: 1, Opcode: vhca.WRSend, Flags: vhca.SendSignaled, AH: ah, RemoteQPN: qp.Num, RemoteQKey: 0x11111111,
		SGL: []SGE{{Addr: a.mr.Addr, Length: 8, LKey: a.mr.LKey}}}
	if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess {
		t.Fatalf("UD send: %+v", wc)
	}
	wc := waitWC(t, b.cq)
	if wc.Status != vhca.WCSuccess || wc.WRID != 100 || wc.ByteLen != 40+8 || wc.SrcQP != a.qp.Num || wc.Flags&vhca.WCWithGRH == 0 {
		t.Fatalf("UD receive: %+v", wc)
	}
	if string(b.buf.B[40:48]) != "datagram" {
		t.Fatalf("received %q after the GRH", b.buf.B[40:48])
	}
	// Taking the SRQ below 4 WRs crosses its limit: one event.
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := b.ctx.AsyncEvent(c)
	if err != nil || ev.Type != vhca.EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("async event %+v, %v", ev, err)
	}
	// Destroying in use fails; in order it succeeds.
	if err := srq.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroying an SRQ in use: %v", err)
	}
	for _, step := range []func() error{qp.Destroy, srq.Destroy, ah.Destroy} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// PostSend and Poll allocate nothing.
func TestFastPathAllocatesNothing(t *testing.T) {
	o := startVerbsd(t)
	a := newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
	b := newSide(t, o, "vhca1", vhca.QPTypeRC, 1<<16)
	connect(t, a, b)
	wrs := []SendWR{{WRID: 1, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
		SGL: []SGE{{Addr: a.mr.Addr, Length: 64, LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}}
	var wc [4]WC
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		for n := 0; n == 0; {
			var err error
			if n, err = a.cq.Poll(wc[:]); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				runtime.Gosched() // AllocsPerRun runs with GOMAXPROCS 1: let verbsd's engine run
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per PostSend+Poll", allocs)
	}
}
