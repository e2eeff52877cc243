package vhca

// A work request that its poster got wrong beyond what PostSend and
// PostRecv can refuse synchronously — verbsd finds it malformed in a
// client's ring after the client's call has returned — completes in error
// and takes its QP to the Error state, which flushes the WRs behind it:
// the client learns of it through its CQ, like of any other local error
// (IBA 1.4 §10.8.3, local QP operation errors; §11.6.2 for the status).

// RefuseSend completes a send WR the caller could not post with
// LOC_QP_OP_ERR and moves qp to Error.
func (d *Device) RefuseSend(qp *QP, wrID uint64, op WROpcode) error {
	if !d.ownsQP(qp) {
		return ErrNoSuchObject
	}
	wc := WC{WRID: wrID, Status: WCLocQPOpErr, QPNum: qp.Num}
	if int(op) < len(wcOpcodeOfWR) {
		wc.Opcode = wcOpcodeOfWR[op]
	}
	// Earlier WRs complete first, in order, as flushed.
	d.flush(qp)
	qp.SendCQ.push(&wc, false)
	if qp.state != QPStateError {
		d.setState(qp, QPStateError)
	}
	return nil
}

// RefuseRecv does the same for a receive WR.
func (d *Device) RefuseRecv(qp *QP, wrID uint64) error {
	if !d.ownsQP(qp) {
		return ErrNoSuchObject
	}
	d.flush(qp)
	qp.RecvCQ.push(&WC{WRID: wrID, Status: WCLocQPOpErr, Opcode: WCRecv, QPNum: qp.Num}, false)
	if qp.state != QPStateError {
		d.setState(qp, QPStateError)
	}
	return nil
}

// RefuseSRQRecv raises the SRQ's error event for a receive WR posted to
// it that the caller could not take: an SRQ has no completion queue of
// its own to report it in (IBA 1.4 §11.6.3, IBV_EVENT_SRQ_ERR).
func (d *Device) RefuseSRQRecv(s *SRQ) error {
	if s == nil || d.srqs[s.Handle] != s {
		return ErrNoSuchObject
	}
	d.raise(Event{Type: EventSRQErr, SRQ: s})
	return nil
}
