package vhca

import (
	"encoding/binary"

	"github.com/softib/softib/vhca/wire"
)

// The completer (IBA 1.4 §9.7.5.1, §9.9): it reads the responses to an RC
// QP's requests: ACKs and NAKs, READ responses and atomic ACKs (both
// implicit ACKs of everything before them), retires WQEs in order,
// completes them, and on a NAK or a timeout rewinds the requester
// (go-back-N), or ends the QP in error once the retries are spent.

// onResponse handles a response packet for qp.
func (d *Device) onResponse(now Time, qp *QP, p *wire.Packet) {
	r := &qp.req
	psn := p.BTH().PSN()
	if !responsePSNValid(qp, psn) {
		return
	}
	var syn wire.Syndrome
	if aeth := p.AETH(); aeth != nil {
		syn = aeth.Syndrome()
	}
	switch p.Info.Operation {
	case wire.OpReadResponse:
		d.onReadResponse(now, qp, p, psn)
	case wire.OpAtomicAcknowledge:
		if !d.ackBefore(now, qp, psn) {
			return
		}
		w := d.sqHeadWQE(qp)
		if w == nil || w.psn != psn || !(w.wr.Opcode == WRAtomicCmpSwap || w.wr.Opcode == WRAtomicFetchAdd) {
			return
		}
		orig := d.scratch[:8]
		binary.NativeEndian.PutUint64(orig, p.AtomicAckETH().OrigRemDt())
		if !d.walkSGL(qp.PD, w.sgl, 0, orig, AccessLocalWrite, func(mem, data []byte) { copy(mem, data) }) {
			d.completerError(qp, WCLocProtErr)
			return
		}
		d.progress(now, qp, psnAdd(psn, 1))
		d.retire(qp, WCSuccess)
		d.sqDrained(qp)
	case wire.OpAcknowledge:
		switch syn.Kind() {
		case wire.SyndromeACK:
			d.ackBefore(now, qp, psnAdd(psn, 1))
		case wire.SyndromeRNRNAK:
			qp.port.Counters.RNRNAKsRcvd++
			if !d.ackBefore(now, qp, psn) {
				return
			}
			if qp.attr.RNRRetry != 7 {
				if r.rnrLeft == 0 {
					d.completerError(qp, WCRNRRetryExcErr)
					return
				}
				r.rnrLeft--
			}
			d.rewind(qp, psn)
			r.rnrWait = now + rnrTimerNS[syn.Value()]
			d.watch(qp)
			r.timer = 0
		case wire.SyndromeNAK:
			qp.port.Counters.NAKsRcvd++
			if !d.ackBefore(now, qp, psn) {
				return
			}
			switch syn.Value() {
			case wire.NAKPSNSequenceError:
				if !d.spendRetry(qp) {
					return
				}
				d.rewind(qp, psn)
			case wire.NAKInvalidRequest:
				d.completerError(qp, WCRemInvReqErr)
			case wire.NAKRemoteAccessError:
				d.completerError(qp, WCRemAccessErr)
			case wire.NAKRemoteOperational:
				d.completerError(qp, WCRemOpErr)
			default:
				d.completerError(qp, WCBadRespErr)
			}
		}
	}
	d.schedule(qp)
}

// responsePSNValid reports whether a response's PSN is one the requester
// has sent and not seen acknowledged; anything else is a duplicate or a
// ghost, counted and dropped.
func responsePSNValid(qp *QP, psn uint32) bool {
	r := &qp.req
	if psnDiff(psn, r.unacked) < 0 || psnDiff(psn, r.psn) >= 0 {
		qp.port.Counters.RcvPSNDrops++
		return false
	}
	return true
}

// sqHeadWQE is the oldest uncompleted WQE that the requester has started.
func (d *Device) sqHeadWQE(qp *QP) *sendWQE {
	if qp.sqHead == qp.sqTail {
		return nil
	}
	w := qp.sqe(qp.sqHead)
	if w.npsn == 0 {
		return nil
	}
	return w
}

// ackBefore retires the WQEs whose packets all have PSNs before limit: an
// acknowledgement, explicit (an ACK of PSN p acknowledges up to p, limit
// p+1) or implicit in a READ response, an atomic ACK or a NAK (everything
// before its PSN). A READ or atomic WQE is retired only by its own
// responses: an acknowledgement beyond it says they were lost, and the
// requester goes back for them (IBA 1.4 §9.7.5.1, implied NAK). It
// reports whether the packet may be processed further.
func (d *Device) ackBefore(now Time, qp *QP, limit uint32) bool {
	for {
		w := d.sqHeadWQE(qp)
		if w == nil || psnDiff(limit, w.psn) <= 0 {
			break
		}
		if psnDiff(w.lastPSN(), limit) >= 0 {
			// Partly acknowledged: a SEND or WRITE moves on; a READ's or
			// atomic's progress is its responses'.
			if !isRdAtomic(w.wr.Opcode) {
				d.progress(now, qp, limit)
			}
			d.sqDrained(qp)
			return true
		}
		if isRdAtomic(w.wr.Opcode) {
			d.impliedNAK(qp, psnAdd(w.psn, w.readDone/uint32(qp.mtu)))
			return false
		}
		d.progress(now, qp, psnAdd(w.lastPSN(), 1))
		d.retire(qp, WCSuccess)
	}
	d.progress(now, qp, limit)
	d.sqDrained(qp)
	return true
}

// progress records that every PSN before next is acknowledged: the retry
// counters start again and the timer restarts for what is still out.
func (d *Device) progress(now Time, qp *QP, next uint32) {
	r := &qp.req
	if psnDiff(next, r.unacked) <= 0 {
		return
	}
	r.unacked = next
	r.retries, r.rnrLeft = qp.attr.RetryCnt, qp.attr.RNRRetry
	if r.retrying && psnDiff(next, r.retryPSN) > 0 {
		r.retrying = false
	}
	if r.unacked == r.psn {
		r.timer = 0
	} else {
		r.timer = deadline(now, ackTimeout(qp.attr.Timeout))
		d.watch(qp)
	}
}

// onReadResponse places a READ response's payload.
func (d *Device) onReadResponse(now Time, qp *QP, p *wire.Packet, psn uint32) {
	if !d.ackBefore(now, qp, psn) {
		return
	}
	w := d.sqHeadWQE(qp)
	if w == nil || w.wr.Opcode != WRRDMARead {
		return
	}
	want := psnAdd(w.psn, w.readDone/uint32(qp.mtu))
	if psn != want {
		// A response is missing: ask again from the first one lost.
		if psnDiff(psn, want) > 0 {
			d.impliedNAK(qp, want)
		}
		return
	}
	data := p.Payload()
	pos := p.Info.Position
	lastPkt := pos == wire.Last || pos == wire.Only
	if uint64(w.readDone)+uint64(len(data)) > uint64(w.length) || !lengthFits(qp, p) ||
		lastPkt && w.readDone+uint32(len(data)) != w.length {
		d.completerError(qp, WCBadRespErr)
		return
	}
	if !d.walkSGL(qp.PD, w.sgl, uint64(w.readDone), data, AccessLocalWrite, func(mem, data []byte) { copy(mem, data) }) {
		d.completerError(qp, WCLocProtErr)
		return
	}
	w.readDone += uint32(len(data))
	d.progress(now, qp, psnAdd(psn, psnsOf(qp, p)))
	if lastPkt {
		d.retire(qp, WCSuccess)
		d.sqDrained(qp)
	}
}

// rewind makes the requester send again from psn (go-back-N), which may
// fall in the middle of a message.
func (d *Device) rewind(qp *QP, psn uint32) {
	r := &qp.req
	qp.port.Counters.Retransmits++
	for i := qp.sqHead; i != qp.sqNext+1 && i != qp.sqTail; i++ {
		w := qp.sqe(i)
		if w.npsn == 0 {
			break
		}
		if psnDiff(psn, w.psn) >= 0 && psnDiff(psn, w.lastPSN()) <= 0 {
			if !r.resending || psnDiff(r.psn, r.resendUntil) > 0 {
				r.resending, r.resendUntil = true, r.psn
			}
			qp.sqNext = i
			r.offset = uint32(psnDiff(psn, w.psn)) * uint32(qp.mtu)
			if w.wr.Opcode == WRRDMARead {
				r.offset = w.readDone
			} else if isRdAtomic(w.wr.Opcode) {
				r.offset = 0
			}
			r.psn = psnAdd(w.psn, uint32(psnDiff(psn, w.psn)))
			if w.wr.Opcode == WRRDMARead {
				r.psn = psnAdd(w.psn, w.readDone/uint32(qp.mtu))
			}
			r.timer = 0
			d.schedule(qp)
			return
		}
	}
}

// spendRetry counts a retry against retry_cnt (IBA 1.2 §12.7.38: timeouts,
// sequence errors and the like) and ends the QP with RETRY_EXC_ERR once
// none is left. Progress refills the count (see progress). A retry_cnt of
// 7 retries forever, as Linux rxe does (rxe_comp.c); IBA and ConnectX
// give up after seven.
func (d *Device) spendRetry(qp *QP) bool {
	r := &qp.req
	if qp.attr.RetryCnt == 7 {
		return true
	}
	if r.retries == 0 {
		d.completerError(qp, WCRetryExcErr)
		return false
	}
	r.retries--
	return true
}

// impliedNAK goes back to psn when a response shows that earlier ones
// were lost. The responses still in flight behind the first sign of the
// loss show it too: while the retry has not made progress past psn, they
// are ignored, or every one of them would start the retry again.
func (d *Device) impliedNAK(qp *QP, psn uint32) {
	r := &qp.req
	if r.retrying && psnDiff(psn, r.retryPSN) >= 0 {
		return
	}
	if !d.spendRetry(qp) {
		return
	}
	r.retrying, r.retryPSN = true, psn
	d.rewind(qp, psn)
}

// completerError completes the WQE at the head with status and the QP
// goes to Error, flushing the rest (IBA 1.4 §10.3.1).
func (d *Device) completerError(qp *QP, status WCStatus) {
	if qp.sqHead != qp.sqTail {
		if qp.sqNext == qp.sqHead {
			qp.sqNext++
		}
		d.retire(qp, status)
	}
	// The error completion reports it; no asynchronous event (as rxe
	// and mlx5: events are for errors no completion can carry).
	d.setState(qp, QPStateError)
}

// onTimeout is the local ACK timeout: go back to the oldest unacknowledged
// PSN, or end with RETRY_EXC_ERR once retry_cnt retries are spent.
func (d *Device) onTimeout(now Time, qp *QP) {
	r := &qp.req
	r.timer = 0
	if r.unacked == r.psn {
		return
	}
	qp.port.Counters.Timeouts++
	if !d.spendRetry(qp) {
		return
	}
	r.retrying = false
	d.rewind(qp, r.unacked)
}

// sqDrained raises the SQ drained event once a QP in SQD has no WQE left
// in flight (IBA 1.4 §10.3.1, the SQD state).
func (d *Device) sqDrained(qp *QP) {
	if qp.state == QPStateSQD && qp.req.sqdEvent && !qp.inFlight() {
		qp.req.sqdEvent = false
		d.raise(Event{Type: EventSQDrained, QP: qp})
	}
}
