package vhca

import "github.com/softib/softib/vhca/wire"

// A request between two QPs of one device goes without a frame when the
// link turns around every frame to the port's own address (LoopsOwn:
// verbsd's engine does, as an HCA loops back in hardware). Building the
// frame, viewing it again and reading its headers back is most of a small
// message's work in the engine, and all of it on the message's path.
//
// requestOwn takes the common case only: an RC SEND or RDMA WRITE, with
// or without immediate data, of one packet, to a QP of this device that
// takes it in sequence. It first checks, without changing anything, that
// the frame would have been built and accepted and its payload placed;
// then it does what the frame would have done: the transmit and receive
// counters (Transmit, accept), the responder's work (onRequest,
// execute), whose completion the owner publishes at once (Completed),
// the requester's bookkeeping (nextRequest), and the ACK, which goes
// without a frame too (ownack.go): at once if the responder's turn is
// the next, else queued for it. Nothing looks at the device in between,
// so what can be seen keeps the frame's order. Anything else, and any
// check that fails, leaves the request to the frame: its NAKs, errors
// and counters come from the one place that makes them.

// requestOwn carries qp's next request to its responder on this device
// without a frame, if it is such a request, and reports whether it did.
func (d *Device) requestOwn(now Time, qp *QP) bool {
	r := &qp.req
	h := &qp.hdr
	pt := qp.port
	if !d.LoopsOwn || qp.Type != QPTypeRC || qp.state != QPStateRTS || qp.sqNext == qp.sqTail ||
		r.rnrWait != 0 || r.offset != 0 || r.resending && psnDiff(r.psn, r.resendUntil) < 0 || qp.rate.kbps != 0 ||
		!h.Encap.Ethernet() || h.VLAN || h.DstMAC != pt.MAC || psnDiff(r.psn, r.unacked) >= maxUnackedPSNs {
		return false
	}
	w := qp.sqe(qp.sqNext)
	op := w.wr.Opcode
	write := op == WRRDMAWrite || op == WRRDMAWriteWithImm
	imm := op == WRSendWithImm || op == WRRDMAWriteWithImm
	if op != WRSend && op != WRSendWithImm && !write || w.npsn != 0 || w.length > uint32(qp.mtu) ||
		w.wr.Flags&SendFence != 0 && r.rdOut > 0 {
		// Not one packet, sent before (a retry goes as a frame), or
		// fenced behind a READ or atomic (it waits, as a frame).
		return false
	}
	// The receive path's checks (accept, deliver, onRequest).
	t := d.lookupQP(h.DestQP)
	if t == nil || t.port != pt || t.Type != QPTypeRC || !ownPathMatches(t, h) ||
		!pkeyMatch(h.PKey, pt.PKeys[t.attr.PKeyIndex]) || t.resp.dying ||
		t.state != QPStateRTR && t.state != QPStateRTS && t.state != QPStateSQD && t.state != QPStateSQE {
		return false
	}
	tr := &t.resp
	if tr.epsn != r.psn || tr.inMessage || w.length > uint32(t.mtu) {
		return false
	}
	// The payload: inline, the WQE's own copy of it; else gathered as
	// nextRequest would (its L_Keys checked).
	n := w.length
	var payload []byte
	if w.wr.Flags&SendInline != 0 {
		payload = w.inline[:n]
	} else {
		if d.stage == nil {
			d.stage = make([]byte, MTU4096.Bytes())
		}
		payload = d.stage[:n]
		if n > 0 && !d.gather(qp, w, 0, payload) {
			return false
		}
	}
	// The responder's checks (execute), up to placing the payload.
	if write && d.checkRKey(t, w.wr.RKey, w.wr.RemoteAddr, uint64(n), AccessRemoteWrite) != noNAK {
		return false
	}
	if (!write || imm) && !tr.haveWQE && !d.takeRecv(t) {
		// No receive: the RNR NAK is the frame's. (A receive taken is
		// the responder's either way: the frame finds it there.)
		return false
	}
	if !write && tr.recvOff+uint64(n) > tr.wqe.length {
		return false
	}
	if !write && !d.walkSGL(t.PD, tr.wqe.sgl, tr.recvOff, payload, AccessLocalWrite, func(mem, data []byte) { copy(mem, data) }) {
		// What was copied, the frame copies again before it fails.
		return false
	}

	// Sent and received: the packet's fields, as nextRequest sets them
	// for a last packet of RC (which asks for an ACK), and the counters
	// of Transmit and accept.
	psn := r.psn
	h.PSN, h.AckReq, h.SE = psn, true, w.wr.Flags&SendSolicited != 0
	h.Opcode = sendOpcode(op, true, true)
	h.VA, h.RKey, h.DMALen = w.wr.RemoteAddr, w.wr.RKey, n
	h.Imm, h.InvRKey = w.wr.Imm, w.wr.Imm
	size := uint64(h.Len(int(n)))
	pt.Counters.XmitPackets++
	pt.Counters.XmitBytes += size
	pt.Counters.RcvPackets++
	pt.Counters.RcvBytes += size
	// Executed, and its completion published at once (Completed): the
	// receiver waits for it, and for nothing of the requester's, which
	// follows. No one sees the device between the two, so the order of
	// their effects is the frame's in all that can be seen.
	tr.nakSent = false
	if write {
		tr.va, tr.rkey, tr.remaining, tr.dmaLen = w.wr.RemoteAddr, w.wr.RKey, n, n
		if n > 0 {
			mem, _ := d.lookupMR(tr.rkey).span(tr.va, uint64(n)) // checkRKey said so
			copy(mem, payload)
		}
		tr.va += uint64(n)
		tr.remaining = 0
		tr.inMessage, tr.op = false, wire.OpRDMAWrite
		if imm {
			d.finishRecv(t, WCRecvRDMAWithImm, tr.dmaLen, WCWithImm, w.wr.Imm, h.SE)
		} else {
			tr.msn = psnAdd(tr.msn, 1)
		}
	} else {
		tr.recvOff += uint64(n)
		tr.inMessage, tr.op = false, wire.OpSend
		var flags WCFlags
		var v uint32
		if imm {
			flags, v = WCWithImm, w.wr.Imm
		}
		d.finishRecv(t, WCRecv, uint32(tr.recvOff), flags, v, h.SE)
	}
	tr.epsn = psnAdd(psn, 1)
	if d.Completed != nil {
		d.Completed()
	}
	// The requester's bookkeeping (nextRequest's), and its next turn
	// if it has more to send (Transmit's), before the ACK's.
	w.psn, w.npsn = psn, 1
	r.psn = psnAdd(psn, 1)
	r.noAck = 0
	qp.sqNext++
	if r.timer == 0 {
		r.timer = deadline(now, ackTimeout(qp.attr.Timeout))
		d.watch(qp)
	}
	d.scheduleWork(qp)
	// The ACK comes back as the request did if the responder's path
	// leads to this port too (ackComesBack).
	own := t.hdr.Encap.Ethernet() && t.hdr.DstMAC == h.DstMAC
	if own && d.Completed != nil && d.ready.n == 0 {
		// No QP is on the ring: the responder's turn, with this ACK
		// alone to send, would be the next (a QP with a response
		// queued or a request to send is on the ring). It is taken
		// now, without a turn, the completion already published.
		d.ackOwn(now, t, psn)
		return true
	}
	d.queueACK(t, psn, own)
	return true
}

// SendNow takes qp's turn on the transmit ring at once, when qp is the
// only QP there (its turn is the next Transmit would take) and the turn
// goes without a frame: requestOwn carries its next request, and its
// ACK too when Completed is set (the responder's turn being the next
// after it). It reports whether it did; else qp keeps its place.
//
// The owner calls it as it posts a client's send, once the client's ring
// is done with the WQE: the request then does not wait for the rest of
// the owner's round to reach Transmit. What it does is the turn's own,
// so what can be seen is what Transmit would make.
func (d *Device) SendNow(now Time, qp *QP) bool {
	if d.ready.n != 1 || d.ready.buf[d.ready.head] != qp || len(qp.resp.queue) != 0 || qp.rate.kbps != 0 {
		// Another QP's turn is first, or qp's turn starts with a
		// response, or waits on its rate limit (Transmit's order).
		return false
	}
	d.ready.pop()
	qp.ready = false
	if d.requestOwn(now, qp) {
		return true
	}
	d.schedule(qp)
	return false
}
