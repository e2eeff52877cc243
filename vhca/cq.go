package vhca

// WC is a work completion (ibv_wc). Its fields are in the order, and at
// the offsets, of verbsd's CQ ring entries (verbsd/abi, TestCQELayout),
// so that a CQRing's entries can be written as WCs.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	SL        uint8
	DLIDPath  uint8
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // immediate data, or the invalidated R_Key with WCWithInv
	QPNum     uint32
	SrcQP     uint32
	Flags     WCFlags
	PKeyIndex uint16
	SLID      uint16
}

// CQ is a completion queue (IBA 1.4 ch. 10, completion queues). A CQ that
// overflows loses no completion silently: it goes to error, raises
// EventCQErr, and takes no more completions (IBA 1.4: CQ overrun is an
// affiliated asynchronous error).
type CQ struct {
	dev    *Device
	Handle uint32
	ring   []WC
	head   int // oldest entry
	count  int
	armed  cqArm
	Err    bool // overrun: the CQ is unusable
	spare  WC   // where next puts a completion that overflows
	listed bool // in the device's completedCQs
	users  int  // QPs and SRQs completing into it
	// Ring, if the owner sets it, takes the completions first (CQRing);
	// the owner finds its own in the CQs TakeCompleted returns.
	Ring   CQRing
	direct *WC // the entry of Ring that next returned
}

// CQRing is a ring of completions that a CQ's owner gives it (CQ.Ring)
// to write them into itself: verbsd's are the client's rings in shared
// memory, whose entries begin with a WC's fields in a WC's layout. A
// completion then costs no copy out of the CQ and no look at the CQ by
// the owner. The CQ keeps completions in its own ring only while the
// owner's is full, and then every one that follows, until the owner has
// taken them (At, Drop): they stay in order. The entry is written by
// vhca and never read back.
type CQRing interface {
	// Entry is the ring's next free entry, or nil if there is none.
	Entry() *WC
	// Publish makes the entry Entry returned visible to the ring's
	// consumer.
	Publish()
}

type cqArm uint8

const (
	cqUnarmed cqArm = iota
	cqArmedNext
	cqArmedSolicited
)

// CreateCQ makes a CQ of at least cqe entries.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	if cqe < 1 || cqe > d.Attr.MaxCQE {
		return nil, invalid("CQ of %d entries (1..%d)", cqe, d.Attr.MaxCQE)
	}
	if len(d.cqs) >= d.Attr.MaxCQ {
		return nil, errLimit("CQs", d.Attr.MaxCQ)
	}
	d.nextHandle++
	cq := &CQ{dev: d, Handle: d.nextHandle, ring: make([]WC, cqe)}
	d.cqs[cq.Handle] = cq
	return cq, nil
}

// DestroyCQ destroys a CQ no QP uses any more.
func (d *Device) DestroyCQ(cq *CQ) error {
	if cq == nil || d.cqs[cq.Handle] != cq {
		return ErrNoSuchObject
	}
	if cq.users > 0 {
		return ErrBusy
	}
	delete(d.cqs, cq.Handle)
	if cq.listed {
		// TakeCompleted returns no CQ that is gone.
		for i, c := range d.completedCQs {
			if c == cq {
				d.completedCQs = append(d.completedCQs[:i], d.completedCQs[i+1:]...)
				break
			}
		}
		cq.listed = false
	}
	return nil
}

// Cap is how many completions the CQ holds.
func (cq *CQ) Cap() int { return len(cq.ring) }

// Len is how many completions wait to be polled.
func (cq *CQ) Len() int { return cq.count }

// Poll moves up to len(out) completions, oldest first, into out.
func (cq *CQ) Poll(out []WC) int {
	n := 0
	for n < len(out) && cq.count > 0 {
		out[n] = cq.ring[cq.head]
		if cq.head++; cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.count--
		n++
	}
	return n
}

// At is the k-th oldest completion, k below Len, in place: a consumer
// that writes completions out in its own format (verbsd, into a ring)
// reads them there and then Drops them, with no copy between.
func (cq *CQ) At(k int) *WC {
	i := cq.head + k
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	return &cq.ring[i]
}

// Drop removes the n oldest completions, n at most Len.
func (cq *CQ) Drop(n int) {
	cq.head += n
	if cq.head >= len(cq.ring) {
		cq.head -= len(cq.ring)
	}
	cq.count -= n
}

// AnyCompleted reports whether TakeCompleted has a CQ to return.
func (d *Device) AnyCompleted() bool { return len(d.completedCQs) > 0 }

// TakeCompleted returns the CQs of the device that took a completion
// since the last call, each once: an owner that moves completions
// elsewhere (verbsd, into rings) looks at those, not at every CQ, of
// which a daemon of many clients has hundreds. The slice is the
// device's, valid until the next call.
func (d *Device) TakeCompleted() []*CQ {
	l := d.completedCQs
	if len(l) == 0 {
		return nil // most calls: inlined, and no swap
	}
	for _, cq := range l {
		cq.listed = false
	}
	// Two lists in turn: completions that come while the caller goes
	// through this one go in the other.
	d.completedCQs, d.completedNext = d.completedNext[:0], l
	return l
}

// ReqNotify arms the CQ: the next completion (the next solicited or error
// completion, if solicitedOnly) raises one EventCompletion.
func (cq *CQ) ReqNotify(solicitedOnly bool) {
	if solicitedOnly && cq.armed != cqArmedNext {
		cq.armed = cqArmedSolicited
	} else {
		cq.armed = cqArmedNext
	}
}

// next is where the next completion is to be written, every field of
// it, before add: the owner's ring's next entry (CQRing), else the CQ's
// own ring's, or, if the CQ has overflowed (or is full, and add will
// find it has), a spare entry add discards. Written in place, a
// completion is not built in one place and copied to another: such a
// copy's wide loads of the narrow stores that built it wait for them to
// leave the store buffer (no store-to-load forwarding).
func (cq *CQ) next() *WC {
	if cq.Err || cq.count == len(cq.ring) {
		return &cq.spare
	}
	if cq.count == 0 && cq.Ring != nil {
		if e := cq.Ring.Entry(); e != nil {
			cq.direct = e
			return e
		}
	}
	// Indices wrap by subtraction: a division costs more than the
	// rest of a completion.
	i := cq.head + cq.count
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	return &cq.ring[i]
}

// add publishes the completion written at next; solicited says the
// message asked for an event. It reports false if the CQ has overflowed
// (now or before).
func (cq *CQ) add(wc *WC, solicited bool) bool {
	if wc == &cq.spare {
		if !cq.Err {
			cq.Err = true
			cq.dev.raise(Event{Type: EventCQErr, CQ: cq})
		}
		return false
	}
	// Read before it is published: the owner's ring is not read back.
	failed := wc.Status != WCSuccess
	if wc == cq.direct {
		cq.direct = nil
		cq.Ring.Publish()
	} else {
		if !cq.listed {
			cq.listed = true
			cq.dev.completedCQs = append(cq.dev.completedCQs, cq)
		}
		cq.count++
	}
	if cq.armed == cqArmedNext || cq.armed == cqArmedSolicited && (solicited || failed) {
		cq.armed = cqUnarmed
		cq.dev.raise(Event{Type: EventCompletion, CQ: cq})
	}
	return true
}

// push adds a completion built elsewhere (the rarer ones: errors,
// flushes, UD); solicited says the message asked for an event. It
// reports false if the CQ has overflowed (now or before).
func (cq *CQ) push(wc *WC, solicited bool) bool {
	s := cq.next()
	*s = *wc
	return cq.add(s, solicited)
}
