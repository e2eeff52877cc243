package vhca

// recvWQE is a receive WQE, copied out of the poster's request.
type recvWQE struct {
	wrid   uint64
	sgl    []SGE // capacity: the queue's max SGE
	length uint64
}

func (w *recvWQE) copyFrom(src *recvWQE) {
	w.wrid, w.length = src.wrid, src.length
	w.sgl = copySGL(w.sgl, src.sgl)
}

// copySGL copies src into dst's storage (whose capacity holds it) and
// returns it: element by element, where append would call memmove for
// what is most often one SGE, once or twice a message.
func copySGL(dst, src []SGE) []SGE {
	if cap(dst) < len(src) {
		return append(dst[:0], src...)
	}
	dst = dst[:len(src)]
	for i := range src {
		dst[i] = src[i]
	}
	return dst
}

// recvQueue is a ring of receive WQEs with their SGL storage allocated
// once, at creation: posting allocates nothing.
type recvQueue struct {
	wqes       []recvWQE // ringSize(max) slots
	max        int       // WQEs it holds at most
	head, tail uint32    // free-running; tail-head WQEs are queued
	maxSGE     int
}

func (q *recvQueue) init(n, maxSGE int) {
	q.max = n
	q.wqes = make([]recvWQE, ringSize(n))
	for i := range q.wqes {
		q.wqes[i].sgl = make([]SGE, 0, maxSGE)
	}
	q.maxSGE = maxSGE
}

func (q *recvQueue) len() int { return int(q.tail - q.head) }

func (q *recvQueue) post(wr *RecvWR) error {
	if q.len() == q.max {
		return ErrQueueFull
	}
	if len(wr.SGL) > q.maxSGE {
		return invalid("%d SGEs, the queue takes %d", len(wr.SGL), q.maxSGE)
	}
	w := &q.wqes[q.tail&uint32(len(q.wqes)-1)]
	w.wrid = wr.WRID
	w.sgl = copySGL(w.sgl, wr.SGL)
	w.length = 0
	for _, s := range wr.SGL {
		w.length += uint64(s.Length)
	}
	q.tail++
	return nil
}

// take removes the oldest WQE and returns it; the pointer is valid until
// the next post.
func (q *recvQueue) take() *recvWQE {
	if q.len() == 0 {
		return nil
	}
	w := &q.wqes[q.head&uint32(len(q.wqes)-1)]
	q.head++
	return w
}

func (q *recvQueue) reset() { q.head, q.tail = 0, 0 }
