package vhca

// qpRing is the FIFO of QPs that may have a packet to send: Transmit takes
// them in turn. A ring, so that taking turns allocates nothing; of a
// power-of-two size, so that its indices wrap by a mask.
type qpRing struct {
	buf     []*QP
	head, n int
}

func (r *qpRing) push(qp *QP) {
	if r.n == len(r.buf) {
		grown := make([]*QP, max(16, 2*len(r.buf)))
		for i := range r.n {
			grown[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = qp
	r.n++
}

func (r *qpRing) pop() *QP {
	qp := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return qp
}

// remove takes qp out wherever it stands (rare: a QP destroyed, reset or
// in error).
func (r *qpRing) remove(qp *QP) {
	for i := range r.n {
		m := len(r.buf) - 1
		if r.buf[(r.head+i)&m] != qp {
			continue
		}
		for k := i; k < r.n-1; k++ {
			r.buf[(r.head+k)&m] = r.buf[(r.head+k+1)&m]
		}
		r.n--
		r.buf[(r.head+r.n)&m] = nil
		return
	}
}

// schedule puts qp on the transmit ring if it is not there.
func (d *Device) schedule(qp *QP) {
	if !qp.ready {
		qp.ready = true
		d.ready.push(qp)
	}
}

// scheduleWork is schedule for a QP whose turn would now do nothing if
// it has no request left to send, no response queued and no rate limit
// (whose turn may arm a timer): such a turn is skipped. A turn taken
// after each message costs more than the message's ACK.
func (d *Device) scheduleWork(qp *QP) {
	if qp.sqNext != qp.sqTail || len(qp.resp.queue) > 0 || qp.rate.kbps != 0 {
		d.schedule(qp)
	}
}

// unschedule takes qp off the transmit ring.
func (d *Device) unschedule(qp *QP) {
	if qp.ready {
		qp.ready = false
		d.ready.remove(qp)
	}
}
