package vhca

import (
	"encoding/binary"

	"github.com/softib/softib/vhca/wire"
)

// A request between two QPs of one device goes without a frame when the
// link turns around every frame to the port's own address (LoopsOwn:
// verbsd's engine does, as an HCA loops back in hardware). Building the
// frame, viewing it again and reading its headers back is most of a small
// message's work in the engine, and all of it on the message's path.
//
// requestOwn takes the common case only: an RC SEND or RDMA WRITE, with
// or without immediate data, of one packet, to a QP of this device that
// takes it in sequence (and an RDMA READ of one response packet or an
// atomic, when its response's turn would come next: rdAtomicOwn). It
// first checks, without changing anything, that the frame would have
// been built and accepted and its payload placed; then it does what the
// frame would have done: the transmit and receive
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
	if isRdAtomic(op) {
		return d.rdAtomicOwn(now, qp, w)
	}
	write := op == WRRDMAWrite || op == WRRDMAWriteWithImm
	imm := op == WRSendWithImm || op == WRRDMAWriteWithImm
	if op != WRSend && op != WRSendWithImm && !write || w.npsn != 0 || w.length > uint32(qp.mtu) ||
		w.wr.Flags&SendFence != 0 && r.rdOut > 0 {
		// Not one packet, sent before (a retry goes as a frame), or
		// fenced behind a READ or atomic (it waits, as a frame).
		return false
	}
	t := d.ownResponder(qp)
	if t == nil {
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

// ownResponder is the QP of this device that takes qp's requests, if
// the receive path would deliver them to it (accept, deliver, onRequest's
// checks), or nil.
func (d *Device) ownResponder(qp *QP) *QP {
	h, pt := &qp.hdr, qp.port
	t := d.lookupQP(h.DestQP)
	if t == nil || t.port != pt || t.Type != QPTypeRC || !ownPathMatches(t, h) ||
		!pkeyMatch(h.PKey, pt.PKeys[t.attr.PKeyIndex]) || t.resp.dying ||
		t.state != QPStateRTR && t.state != QPStateRTS && t.state != QPStateSQD && t.state != QPStateSQE {
		return nil
	}
	return t
}

// rdAtomicOwn is requestOwn for an RDMA READ of one response packet or
// an atomic, when its response can be taken at once: no other QP waits
// for a turn, qp has nothing in flight, and the responder has no response
// queued. The requests qp has after it then go after the response, where
// frames would send them before it: an order the links allow as well (an
// unfenced READ's data may be read before or after the requests behind
// it land; a fence asks for this one). Then the request, its execution
// (execute), the response (nextResponse: a READ's payload read from the
// responder's memory at that moment, an atomic's original value) and
// its handling (onReadResponse, onResponse's atomic ACK) are one step,
// without frames. A response that would not come back to qp as the request came
// to its responder, and any check that fails, leave it to its frames;
// an atomic is executed only once every check has passed, its
// requester's SGL included.
func (d *Device) rdAtomicOwn(now Time, qp *QP, w *sendWQE) bool {
	r, h, pt := &qp.req, &qp.hdr, qp.port
	op, n := w.wr.Opcode, w.length
	read := op == WRRDMARead
	if d.ready.n != 0 || w.npsn != 0 || qp.sqHead != qp.sqNext ||
		r.unacked != r.psn || r.rdOut >= int(qp.attr.MaxRdAtomic) || w.wr.Flags&SendFence != 0 && r.rdOut > 0 ||
		read && n > uint32(qp.mtu) {
		return false
	}
	t := d.ownResponder(qp)
	if t == nil || t.attr.MaxDestRdAtomic == 0 {
		return false
	}
	tr, th := &t.resp, &t.hdr
	if tr.epsn != r.psn || tr.inMessage || len(tr.queue) != 0 {
		return false
	}
	if read && (n > uint32(t.mtu) || d.checkRKey(t, w.wr.RKey, w.wr.RemoteAddr, uint64(n), AccessRemoteRead) != noNAK) ||
		!read && (w.wr.RemoteAddr%8 != 0 || d.checkRKey(t, w.wr.RKey, w.wr.RemoteAddr, 8, AccessRemoteAtomic) != noNAK) {
		return false
	}
	// The response's way back, as ackOwn checks an ACK's.
	if !th.Encap.Ethernet() || th.VLAN || th.DstMAC != pt.MAC || d.lookupQP(th.DestQP) != qp ||
		!ownPathMatches(qp, th) || !pkeyMatch(th.PKey, pt.PKeys[qp.attr.PKeyIndex]) {
		return false
	}
	var orig uint64
	if read {
		// The payload, read now as nextResponse would read it, and
		// placed as onReadResponse places it (staged: the two regions
		// may overlap, and the frame carries a copy). What a failed
		// placement copied, the frame copies again before it fails.
		if d.stage == nil {
			d.stage = make([]byte, MTU4096.Bytes())
		}
		data := d.stage[:n]
		if n > 0 {
			mem, _ := d.lookupMR(w.wr.RKey).span(w.wr.RemoteAddr, uint64(n)) // checkRKey said so
			copy(data, mem)
			if !d.walkSGL(qp.PD, w.sgl, 0, data, AccessLocalWrite, func(mem, data []byte) { copy(mem, data) }) {
				return false
			}
		}
	} else {
		// The SGL checked before the atomic is done: it is done once.
		result := d.scratch[:8]
		if !d.walkSGL(qp.PD, w.sgl, 0, result, AccessLocalWrite, func(mem, data []byte) {}) {
			return false
		}
		cmp, swapAdd := w.wr.CompareAdd, w.wr.Swap // as nextRequest puts them in the AtomicETH
		if op == WRAtomicFetchAdd {
			cmp, swapAdd = 0, w.wr.CompareAdd
		}
		mem, _ := d.lookupMR(w.wr.RKey).span(w.wr.RemoteAddr, 8) // checkRKey said so
		orig = atomic64(mem, op == WRAtomicCmpSwap, cmp, swapAdd)
		binary.NativeEndian.PutUint64(result, orig)
		d.walkSGL(qp.PD, w.sgl, 0, result, AccessLocalWrite, func(mem, data []byte) { copy(mem, data) })
	}

	// The request sent and received, and executed (execute), and the
	// response sent and received.
	// The request's header first: a QP that sends to itself answers
	// with the same one (th is h).
	psn := r.psn
	h.PSN, h.AckReq, h.SE = psn, true, false
	h.VA, h.RKey = w.wr.RemoteAddr, w.wr.RKey
	if read {
		h.Opcode, h.DMALen = wire.RCRDMAReadRequest, n
	} else {
		h.Opcode = wire.RCCompareSwap
		if op == WRAtomicFetchAdd {
			h.Opcode = wire.RCFetchAdd
		}
	}
	size := uint64(h.Len(0))
	th.PSN = psn
	if read {
		th.Opcode = wire.RCRDMAReadResponseOnly
		size += uint64(th.Len(int(n)))
		d.newResource(t, rdResource{psn: psn, lastPSN: psn, va: w.wr.RemoteAddr, rkey: w.wr.RKey, length: n})
	} else {
		th.Opcode = wire.RCAtomicAcknowledge
		size += uint64(th.Len(0))
		d.newResource(t, rdResource{atomic: true, psn: psn, lastPSN: psn, orig: orig})
	}
	pt.Counters.XmitPackets += 2
	pt.Counters.XmitBytes += size
	pt.Counters.RcvPackets += 2
	pt.Counters.RcvBytes += size
	tr.nakSent = false
	tr.msn = psnAdd(tr.msn, 1)
	tr.epsn = psnAdd(psn, 1)
	// The requester's: nextRequest's bookkeeping, then the response's
	// (progress, and the WQE retired).
	r.rdOut++
	w.psn, w.npsn = psn, 1
	if read {
		w.readDone = n
	}
	r.psn = psnAdd(psn, 1)
	r.noAck = 0
	qp.sqNext++
	d.progress(now, qp, r.psn)
	d.retire(qp, WCSuccess)
	d.sqDrained(qp)
	d.scheduleWork(qp)
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
