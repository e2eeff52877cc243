package client_test

import (
	"fmt"
	"log"

	"github.com/softib/softib/client"
	"github.com/softib/softib/vhca"
)

// An RC ping-pong between two devices of one verbsd (run `verbsd -device
// vhca0,addr=10.0.0.1,pipe=vhca1 -device vhca1,addr=10.0.0.2`). Two
// programs would exchange their client.Endpoint over TCP, as softib
// pingpong does; here one program plays both sides.
func Example_rcPingPong() {
	type side struct {
		ctx *client.Context
		cq  *client.CQ
		qp  *client.QP
		mr  *client.MR
		ep  client.Endpoint
	}
	open := func(dev string, psn uint32) *side {
		ctx, err := client.Open(dev, nil)
		if err != nil {
			log.Fatal(err)
		}
		pd, _ := ctx.AllocPD()
		buf, _ := ctx.Alloc(4096) // registrable memory: a memfd verbsd maps too
		mr, err := pd.RegMR(buf.B, vhca.AccessLocalWrite)
		if err != nil {
			log.Fatal(err)
		}
		cq, _ := ctx.CreateCQ(16, nil)
		qp, err := pd.CreateQP(client.QPInitAttr{Type: vhca.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: client.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		gid, _ := ctx.QueryGID(1, 1) // index 1: the RoCEv2 GID of the first address
		return &side{ctx, cq, qp, mr, client.Endpoint{QPN: qp.Num, PSN: psn, GID: gid.GID}}
	}
	a, b := open("vhca0", 100), open("vhca1", 200)
	for _, s := range [][2]*side{{a, b}, {b, a}} {
		l, r := s[0], s[1]
		if err := l.qp.Connect(client.Path{GIDIndex: 1, MTU: vhca.MTU1024, LocalPSN: l.ep.PSN, Remote: r.ep}); err != nil {
			log.Fatal(err)
		}
	}
	wait := func(cq *client.CQ) client.WC {
		var wc [1]client.WC
		for {
			if n, _ := cq.Poll(wc[:]); n == 1 {
				return wc[0]
			}
			client.Relax()
		}
	}
	for i := range 3 {
		b.qp.PostRecv([]client.RecvWR{{WRID: 1, SGL: []client.SGE{b.mr.SGE()}}})
		copy(a.mr.Buf, fmt.Sprintf("ping %d", i))
		a.qp.PostSend([]client.SendWR{{Opcode: vhca.WRSend, Flags: vhca.SendSignaled,
			SGL: []client.SGE{{Addr: a.mr.Addr, Length: 6, LKey: a.mr.LKey}}}})
		wait(a.cq)
		got := wait(b.cq)
		fmt.Printf("%s (%d bytes)\n", b.mr.Buf[:got.ByteLen], got.ByteLen)
	}
	a.ctx.Close()
	b.ctx.Close()
	// Output:
	// ping 0 (6 bytes)
	// ping 1 (6 bytes)
	// ping 2 (6 bytes)
}

// A UD datagram: an address handle names the destination, each receive
// buffer begins with 40 bytes for the GRH.
func Example_udExchange() {
	ctx, err := client.Open("vhca0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	buf, _ := ctx.Alloc(4096)
	mr, _ := pd.RegMR(buf.B, vhca.AccessLocalWrite)
	cq, _ := ctx.CreateCQ(16, nil)
	newQP := func() *client.QP {
		qp, err := pd.CreateQP(client.QPInitAttr{Type: vhca.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: client.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		if err := qp.Connect(client.Path{GIDIndex: 1, QKey: 0x11111111}); err != nil {
			log.Fatal(err)
		}
		return qp
	}
	tx, rx := newQP(), newQP() // loopback: both on vhca0
	gid, _ := ctx.QueryGID(1, 1)
	ah, _ := pd.CreateAH(client.AV{Port: 1, IsGlobal: true, GRH: vhca.GlobalRoute{DGID: gid.GID, SGIDIndex: 1, HopLimit: 64}})
	rx.PostRecv([]client.RecvWR{{WRID: 7, SGL: []client.SGE{{Addr: mr.Addr + 2048, Length: 2048, LKey: mr.LKey}}}})
	copy(mr.Buf, "hello")
	tx.PostSend([]client.SendWR{{Opcode: vhca.WRSend, AH: ah, RemoteQPN: rx.Num, RemoteQKey: 0x11111111,
		SGL: []client.SGE{{Addr: mr.Addr, Length: 5, LKey: mr.LKey}}}})
	var wc [1]client.WC
	for {
		if n, _ := cq.Poll(wc[:]); n == 1 && wc[0].WRID == 7 {
			break
		}
		client.Relax()
	}
	fmt.Printf("%q from the sending QP: %v\n", mr.Buf[2048+40:2048+40+5], wc[0].SrcQP == tx.Num)
	// Output: "hello" from the sending QP: true
}
