package verbsd

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
)

// engineSide is one client's QP as a test drives the engine without a
// client: the engine's rings of the QP and its CQ, and the client's ends
// of them.
type engineSide struct {
	r          *qpRings
	c          *cqRing
	sq, rq, cq *abi.Ring // the client's ends
}

// newEnginePair is an engine serving one vHCA, 64 KiB of memory
// registered at 0x10000, and two RC QPs of capabilities cap connected
// to each other through the vHCA's own address, each with a CQ of 256
// entries for both queues. Their rings are in Go memory.
func newEnginePair(tb testing.TB, cap vhca.QPCap) (e *engine, h *hca, mr *vhca.MR, sides [2]engineSide) {
	tb.Helper()
	h, err := newHCA(DeviceConfig{Name: "pair0", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	if err != nil {
		tb.Fatal(err)
	}
	if e, err = newEngine([]*hca{h}, time.Millisecond); err != nil {
		tb.Fatal(err)
	}
	s := &session{h: h}
	dev := h.dev
	pd, _ := dev.AllocPD()
	mem := make([]byte, 1<<16)
	if mr, err = dev.RegMR(pd, vhca.SliceMemory(mem), 0x10000, vhca.AccessLocalWrite); err != nil {
		tb.Fatal(err)
	}
	ring := func(kind abi.Kind, n, size int) (own, peer *abi.Ring) {
		m := make([]byte, abi.RingSize(n, size))
		if own, err = abi.NewRing(m, kind, n, size); err != nil {
			tb.Fatal(err)
		}
		if peer, err = abi.OpenRing(m, kind); err != nil {
			tb.Fatal(err)
		}
		return own, peer
	}
	for i := range sides {
		cq, _ := dev.CreateCQ(256)
		qp, err := dev.CreateQP(pd, vhca.QPInitAttr{Type: vhca.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
		if err != nil {
			tb.Fatal(err)
		}
		r := &qpRings{s: s, qp: qp, cap: cap}
		x := &sides[i]
		r.sq, x.sq = ring(abi.KindSQ, ringEntries(cap.MaxSendWR), abi.SendWQESize(cap.MaxSendSGE, cap.MaxInlineData))
		r.rq, x.rq = ring(abi.KindRQ, ringEntries(cap.MaxRecvWR), abi.RecvWQESize(cap.MaxRecvSGE))
		c := &cqRing{s: s, cq: cq}
		c.ring, x.cq = ring(abi.KindCQ, 256, abi.CQESize)
		cq.Ring = c
		x.r, x.c = r, c
		h.addQP(r, e.rounds)
		h.addCQ(c, e.rounds)
		e.qpOf[qp], e.cqOf[cq] = r, c
	}
	gid := dev.Ports[0].GIDs[1].GID
	for i, x := range sides {
		qp, peer := x.r.qp, sides[1-i].r.qp
		steps := []struct {
			a    vhca.QPAttr
			mask vhca.QPAttrMask
		}{
			{vhca.QPAttr{State: vhca.QPStateInit, Port: 1}, vhca.QPAttrState | vhca.QPAttrPort | vhca.QPAttrPKeyIndex | vhca.QPAttrAccessFlags},
			{vhca.QPAttr{State: vhca.QPStateRTR, PathMTU: vhca.MTU1024, DestQPN: peer.Num, MaxDestRdAtomic: 1, MinRNRTimer: 12,
				AV: vhca.AV{Port: 1, IsGlobal: true, DMAC: h.mac, GRH: vhca.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
				vhca.QPAttrState | vhca.QPAttrAV | vhca.QPAttrPathMTU | vhca.QPAttrDestQPN | vhca.QPAttrRQPSN | vhca.QPAttrMaxDestRdAtomic | vhca.QPAttrMinRNRTimer},
			{vhca.QPAttr{State: vhca.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				vhca.QPAttrState | vhca.QPAttrSQPSN | vhca.QPAttrTimeout | vhca.QPAttrRetryCnt | vhca.QPAttrRNRRetry | vhca.QPAttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if err := dev.ModifyQP(qp, &st.a, st.mask); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return e, h, mr, sides
}

// postRecv publishes, as a client would, a receive of 64 bytes at
// 0x10000 (key lkey) in x's receive ring.
func (x engineSide) postRecv(lkey uint32) {
	w := abi.RecvWQE(x.rq.Slot(0))
	w.SetWRID(7)
	w.SetNumSGE(1)
	w.SGE(0).Set(0x10000, 64, lkey)
	x.rq.Publish(1)
}

// postSend publishes, as a client would, a signaled SEND of data inline
// in x's send ring.
func (x engineSide) postSend(wrid uint64, data string) {
	w := abi.SendWQE(x.sq.Slot(0))
	w.SetWRID(wrid)
	w.SetOpcode(uint8(vhca.WRSend))
	w.SetFlags(uint16(vhca.SendSignaled | vhca.SendInline))
	w.SetInlineLen(len(data))
	copy(w.Inline(), data)
	x.sq.Publish(1)
}
