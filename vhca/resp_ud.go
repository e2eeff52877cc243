package vhca

import "github.com/softib/softib/vhca/wire"

// onUCRequest is the UC responder (IBA 1.4 §9.8.3): no acknowledgements
// and no retries. After a PSN gap the message in progress is abandoned
// (its receive WQE is kept for the next one, never completed with part of
// a message) and the responder resynchronises on the next first or only
// packet ahead of it; packets behind the expected PSN are dropped. Any
// error drops the message silently.
func (d *Device) onUCRequest(qp *QP, p *wire.Packet) {
	r := &qp.resp
	psn := p.BTH().PSN()
	pos := p.Info.Position
	switch diff := psnDiff(psn, r.epsn); {
	case diff < 0:
		// Behind the expected PSN: a duplicate or a straggler overtaken
		// by later packets. Dropped, so that UC never delivers a message
		// twice or out of order.
		qp.port.Counters.RcvPSNDrops++
		return
	case diff > 0:
		qp.port.Counters.RcvPSNDrops++
		r.inMessage, r.recvOff, r.remaining = false, 0, 0
		if pos != wire.First && pos != wire.Only {
			r.epsn = psnAdd(psn, psnsOf(qp, p))
			return
		}
		r.epsn = psn
	}
	if nak, _ := d.execute(qp, p); nak != noNAK {
		// Drop the message: what follows of it fails the opcode
		// sequence check until the next first or only packet.
		qp.port.Counters.RcvBadOpcode++
		r.inMessage, r.recvOff, r.remaining = false, 0, 0
		r.epsn = psnAdd(psn, psnsOf(qp, p))
	}
}

// onUDRequest is the UD responder (IBA 1.4 §9.8.4): the Q_Key must match
// (a mismatch is dropped and counted), the message takes one receive WQE
// whose first 40 bytes receive the GRH (or IP header), and the completion
// names the source QP.
func (d *Device) onUDRequest(qp *QP, p *wire.Packet) {
	deth := p.DETH()
	if deth.QKey() != qp.attr.QKey {
		qp.port.Counters.RcvQKeyDrops++
		return
	}
	if !d.takeRecv(qp) {
		qp.port.Counters.RcvNoQP++ // no receive WQE: UD drops silently
		return
	}
	r := &qp.resp
	r.haveWQE = false
	data := p.Payload()
	wc := WC{Opcode: WCRecv, ByteLen: uint32(grhAreaLen + len(data)), SrcQP: deth.SrcQP(),
		PKeyIndex: qp.attr.PKeyIndex, QPNum: qp.Num}
	if r.wqe.length < uint64(grhAreaLen+len(data)) {
		wc.Status = WCLocLenErr
		d.completeRecv(qp, &r.wqe, &wc)
		return
	}
	grh := d.scratch[:grhAreaLen]
	clear(grh)
	if g := p.GRH(); g != nil {
		copy(grh[:], g)
		wc.Flags |= WCWithGRH
	} else if ip := p.IPv6(); ip != nil {
		copy(grh[:], ip)
		wc.Flags |= WCWithGRH
	} else if ip := p.IPv4(); ip != nil {
		// As rxe: the IPv4 header in the last 20 bytes of the area.
		copy(grh[grhAreaLen-wire.IPv4Len:], ip[:wire.IPv4Len])
		wc.Flags |= WCWithGRH
	}
	if l := p.LRH(); l != nil {
		wc.SLID, wc.SL = l.SLID(), l.SL()
	}
	ok := true
	if wc.Flags&WCWithGRH != 0 {
		ok = d.walkSGL(qp.PD, r.wqe.sgl, 0, grh, AccessLocalWrite, func(mem, data []byte) { copy(mem, data) })
	}
	if ok {
		ok = d.walkSGL(qp.PD, r.wqe.sgl, grhAreaLen, data, AccessLocalWrite, func(mem, data []byte) { copy(mem, data) })
	}
	if !ok {
		wc.Status = WCLocProtErr
	}
	if p.Info.Immediate() {
		wc.Flags |= WCWithImm
		wc.Imm = p.ImmDt().Value()
	}
	d.pushRecv(qp, &r.wqe, &wc, p.BTH().SE())
}

// grhAreaLen is the room at the start of every UD receive buffer for the
// GRH of the datagram, whether or not it came with one (ibv_post_recv(3)
// on UD QPs).
const grhAreaLen = 40
