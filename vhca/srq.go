package vhca

// SRQ is a shared receive queue: receive WQEs that any QP attached to it
// consumes (IBA 1.4 ch. 10, shared receive queues). When the number of
// WQEs left falls below the armed limit, it raises EventSRQLimitReached
// once and disarms.
type SRQ struct {
	dev    *Device
	Handle uint32
	PD     *PD
	rq     recvQueue
	limit  int // 0: disarmed
	users  int
}

// SRQAttr sizes an SRQ and arms its limit (ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  int
}

// CreateSRQ makes a shared receive queue.
func (d *Device) CreateSRQ(pd *PD, attr SRQAttr) (*SRQ, error) {
	if pd == nil || d.pds[pd.Handle] != pd {
		return nil, ErrNoSuchObject
	}
	if attr.MaxWR < 1 || attr.MaxWR > d.Attr.MaxSRQWR || attr.MaxSGE < 1 || attr.MaxSGE > d.Attr.MaxSRQSGE {
		return nil, invalid("SRQ of %d WRs, %d SGEs", attr.MaxWR, attr.MaxSGE)
	}
	if attr.Limit < 0 || attr.Limit > attr.MaxWR {
		return nil, invalid("SRQ limit %d", attr.Limit)
	}
	d.nextHandle++
	s := &SRQ{dev: d, Handle: d.nextHandle, PD: pd, limit: attr.Limit}
	s.rq.init(attr.MaxWR, attr.MaxSGE)
	pd.users++
	d.srqs[s.Handle] = s
	return s, nil
}

// ModifySRQ arms the limit again (IBV_SRQ_LIMIT).
func (d *Device) ModifySRQ(s *SRQ, limit int) error {
	if s == nil || d.srqs[s.Handle] != s {
		return ErrNoSuchObject
	}
	if limit < 0 || limit > s.rq.max {
		return invalid("SRQ limit %d", limit)
	}
	s.limit = limit
	return nil
}

// DestroySRQ destroys an SRQ no QP uses.
func (d *Device) DestroySRQ(s *SRQ) error {
	if s == nil || d.srqs[s.Handle] != s {
		return ErrNoSuchObject
	}
	if s.users > 0 {
		return ErrBusy
	}
	delete(d.srqs, s.Handle)
	s.PD.users--
	return nil
}

// PostSRQRecv adds receive WQEs.
func (d *Device) PostSRQRecv(s *SRQ, wrs []RecvWR) (int, error) {
	if s == nil || d.srqs[s.Handle] != s {
		return 0, ErrNoSuchObject
	}
	for i := range wrs {
		if err := s.rq.post(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// take hands the oldest WQE to a QP, raising the limit event when the
// queue runs low.
func (s *SRQ) take() *recvWQE {
	w := s.rq.take()
	if w != nil && s.limit > 0 && s.rq.len() < s.limit {
		s.limit = 0
		s.dev.raise(Event{Type: EventSRQLimitReached, SRQ: s})
	}
	return w
}

// Len is how many receive WQEs the SRQ holds.
func (s *SRQ) Len() int { return s.rq.len() }

// Attr is the SRQ's size and armed limit (ibv_query_srq).
func (s *SRQ) Attr() SRQAttr { return SRQAttr{MaxWR: s.rq.max, MaxSGE: s.rq.maxSGE, Limit: s.limit} }
