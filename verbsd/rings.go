package verbsd

import (
	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// The data plane: work requests come out of the clients' rings into the
// devices, completions go from the devices into the clients' rings.
// Everything read from a ring is the client's word and checked as such:
// an entry is copied out of shared memory before it is looked at, and
// anything wrong with it completes in error and takes its QP to Error.

// qpRings is a QP with its send and receive rings.
type qpRings struct {
	s      *session
	handle uint32
	qp     *vhca.QP
	mem    *mapping
	sq, rq *abi.Ring // rq nil when the QP receives from an SRQ
	cap    vhca.QPCap
}

// qpLayout places a QP's rings in its shared memory: the send ring of
// sqBytes at sqOff, the receive ring of rqBytes (0: the QP receives from
// an SRQ, and rqOff is 0) at rqOff, in total bytes. Each ring starts a
// few cache lines into its page, as many as the QP's number says, modulo
// a page's lines. Every round looks at the next entry of every send
// ring, and an idle ring's next entry sits at the same offset in its
// page as every other idle ring's: from page-aligned rings, those of
// many idle QPs all fall in one set of the L1 cache, and evict each
// other every round.
func qpLayout(qpn uint32, sqBytes, rqBytes int) (sqOff, rqOff, total int) {
	colour := int(qpn) % (pageSize / 64) * 64
	sqOff = colour
	total = sqOff + sqBytes
	if rqBytes > 0 {
		rqOff = (total+pageSize-1)&^(pageSize-1) + colour
		total = rqOff + rqBytes
	}
	return sqOff, rqOff, total
}

// srqRing is a shared receive queue with its ring.
type srqRing struct {
	s      *session
	handle uint32
	srq    *vhca.SRQ
	mem    *mapping
	ring   *abi.Ring
	maxSGE int
}

// cqRing is a CQ with its ring and completion channel.
type cqRing struct {
	s       *session
	handle  uint32
	cq      *vhca.CQ
	mem     *mapping
	ring    *abi.Ring
	ch      *compChannel
	armSeen uint32
	dead    bool
	// The engine's round when the CQ last had work (an arm, a
	// completion), and its ring's producer index then (hotFirst); the
	// round of its last look (lookCQs).
	seen, produced, looked uint32
}

// Entry and Publish make the client's ring the CQ's vhca.CQRing: the
// device writes its completions there itself while the ring has room.
// A ring the client corrupted takes none: they go to the device's CQ,
// where fillCQ finds it dead.
func (c *cqRing) Entry() *vhca.WC {
	if c.dead {
		return nil
	}
	if free, err := c.ring.Free(1); err != nil || free == 0 {
		return nil
	}
	return abi.CQE(c.ring.Slot(0)).Entry()
}

func (c *cqRing) Publish() { c.ring.Release(1) }

// compChannel is a completion channel: the client's eventfd.
type compChannel struct {
	handle uint32
	fd     int
	users  int
}

func (r *qpRings) sleep() bool {
	if !r.sq.Sleep() {
		return false
	}
	return r.rq == nil || r.rq.Sleep()
}

func (r *qpRings) wake() {
	r.sq.Wake()
	if r.rq != nil {
		r.rq.Wake()
	}
}

// pollSQ moves the send WQEs the client published into the QP, and
// carries at once a request whose turn on the device would be the next.
func (e *engine) pollSQ(r *qpRings) int {
	if !r.sq.Ready() {
		return 0 // most rounds, for most QPs
	}
	n := r.sq.Available(r.sq.Entries())
	dev := r.s.h.dev
	done, consumed := 0, 0
	for ; done < n; done++ {
		wr := &e.wr[0]
		ok := e.decodeSend(r, abi.SendWQE(r.sq.Peek(done)), wr)
		if st := r.qp.State(); ok && st != vhca.QPStateError && st != vhca.QPStateSQE {
			_, err := dev.PostSend(r.qp, e.wr[:])
			if err == nil {
				continue
			}
			if err == vhca.ErrQueueFull {
				break // the QP's send queue is full: the rest waits in the ring
			}
			ok = false
		}
		// A completion comes at once, an error or a flush: the entries
		// up to this one are consumed first, as before any completion
		// of theirs (abi: send completions count consumed entries).
		r.sq.Consume(done + 1 - consumed)
		consumed = done + 1
		if ok {
			_, err := dev.PostSend(r.qp, e.wr[:]) // flushed: the QP, or its SQ, is in error
			ok = err == nil
		}
		if !ok {
			dev.RefuseSend(r.qp, wr.WRID, wr.Opcode)
		}
	}
	if done > 0 {
		if done > consumed {
			r.sq.Consume(done - consumed)
		}
		// The requests go at once if their turns are the next, rather
		// than wait for the round's transmit, and what they completed
		// is published, as transmit does after each. Not before
		// Consume: a client that sees its send completed may post
		// into the entry at once.
		k := 0
		for ; k < done && dev.SendNow(e.now, r.qp); k++ {
		}
		if k > 0 {
			e.publishCQs(r.s.h)
		}
	}
	return done
}

// decodeSend turns a send WQE, in the ring, into a work request,
// checking what the engine cannot: the counts against the entry and the
// QP's capabilities, and the address handle against the client's own.
//
// The client may write the entry while it is read. Each field is read
// from it once, into wr, and what is checked is that copy: the engine's
// own, which the client cannot change. The inline data is the exception:
// wr points at it in the ring, and PostSend copies it, once, into the
// device's WQE; nothing reads it there before, and its bytes are the
// payload, which nothing checks. So no copy of the whole entry is made
// first, of which a small message would use a few fields.
func (e *engine) decodeSend(r *qpRings, w abi.SendWQE, wr *vhca.SendWR) bool {
	// Field by field: a whole-struct copy of a literal built a moment
	// before waits on the stores that built it (vhca.CQ.next).
	f := w.Fields()
	wr.WRID, wr.Opcode, wr.Flags, wr.Imm = f.WRID, vhca.WROpcode(f.Opcode), vhca.SendFlags(f.Flags), f.Imm
	wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap = f.RemoteAddr, f.RKey, f.CompareAdd, f.Swap
	wr.RemoteQPN, wr.RemoteQKey = f.RemoteQPN, f.RemoteQKey
	wr.SGL, wr.InlineData, wr.AH = nil, nil, nil
	room := len(w) - abi.SendWQEHeader
	if wr.Flags&vhca.SendInline != 0 {
		n := int(f.InlineLen)
		if n > room || n > r.cap.MaxInlineData {
			return false
		}
		wr.InlineData = w.Inline()[:n]
	} else {
		n := int(f.NumSGE)
		if n > r.cap.MaxSendSGE || n*abi.SGESize > room {
			return false
		}
		e.sgl = e.sgl[:0]
		for i := range n {
			s := w.SGE(i)
			e.sgl = append(e.sgl, vhca.SGE{Addr: s.Addr(), Length: s.Length(), LKey: s.LKey()})
		}
		wr.SGL = e.sgl
	}
	if r.qp.Type == vhca.QPTypeUD {
		ah := r.s.ahs[f.AH]
		if ah == nil {
			return false
		}
		wr.AH = ah
	}
	return true
}

// pollRQ moves the receive WQEs the client published into the QP. For
// the device's FetchRecv (fetch), it stops at a WQE it would refuse:
// refusing one ends the QP, which FetchRecv must not do.
func (e *engine) pollRQ(r *qpRings, fetch bool) int {
	if r.rq == nil || !r.rq.Ready() {
		return 0
	}
	n := r.rq.Available(r.rq.Entries())
	dev := r.s.h.dev
	done := 0
	for ; done < n; done++ {
		w := abi.RecvWQE(e.wqe[:r.rq.EntrySize()])
		copy(w, r.rq.Peek(done))
		if !e.decodeRecv(w, r.cap.MaxRecvSGE) {
			if fetch {
				break
			}
			dev.RefuseRecv(r.qp, w.WRID())
			continue
		}
		if _, err := dev.PostRecv(r.qp, e.rwr[:]); err != nil {
			if err == vhca.ErrQueueFull || fetch {
				break
			}
			dev.RefuseRecv(r.qp, w.WRID())
		}
	}
	if done > 0 {
		r.rq.Consume(done)
	}
	return done
}

func (e *engine) decodeRecv(w abi.RecvWQE, maxSGE int) bool {
	n := w.NumSGE()
	if n < 0 || n > maxSGE || abi.RecvWQEHeader+n*abi.SGESize > len(w) {
		return false
	}
	e.rsgl = e.rsgl[:0]
	for i := range n {
		s := w.SGE(i)
		e.rsgl = append(e.rsgl, vhca.SGE{Addr: s.Addr(), Length: s.Length(), LKey: s.LKey()})
	}
	e.rwr[0] = vhca.RecvWR{WRID: w.WRID(), SGL: e.rsgl}
	return true
}

// pollSRQ moves the receive WQEs the client published into the SRQ.
func (e *engine) pollSRQ(r *srqRing) int {
	if !r.ring.Ready() {
		return 0
	}
	dev := r.s.h.dev
	n := r.ring.Available(r.ring.Entries())
	done := 0
	for ; done < n; done++ {
		w := abi.RecvWQE(e.wqe[:r.ring.EntrySize()])
		copy(w, r.ring.Peek(done))
		if !e.decodeRecv(w, r.maxSGE) {
			dev.RefuseSRQRecv(r.srq)
			continue
		}
		if _, err := dev.PostSRQRecv(r.srq, e.rwr[:]); err != nil {
			if err == vhca.ErrQueueFull {
				break
			}
			dev.RefuseSRQRecv(r.srq)
		}
	}
	if done > 0 {
		r.ring.Consume(done)
	}
	return done
}

// fillCQ moves the CQ's completions into its ring while the ring has
// room, and takes note of a new arm request.
func (e *engine) fillCQ(c *cqRing) int {
	if c.dead {
		return 0
	}
	work := 0
	if a := c.ring.ArmRequest(); a != c.armSeen {
		c.armSeen = a
		c.cq.ReqNotify(a&1 != 0)
		// A completion may have come after the client last polled and
		// before this arm was seen (it is in the ring, or still in the
		// device's CQ): an event now is at worst spurious, which the
		// verbs allow; none is lost.
		if c.ring.Unconsumed() > 0 || c.cq.Len() > 0 {
			c.fire()
		}
		work++
	}
	if c.cq.Len() == 0 {
		return work
	}
	free, err := c.ring.Free(c.cq.Len())
	if err != nil {
		c.dead = true
		c.s.sendEvent(abi.Event{Type: uint32(vhca.EventCQErr), Handle: c.handle})
		return work
	}
	// Straight from the device's CQ into the ring, no copy between.
	n := min(free, c.cq.Len())
	for i := range n {
		abi.CQE(c.ring.Slot(i)).PutWC(c.cq.At(i))
	}
	if n > 0 {
		c.cq.Drop(n)
		c.ring.Release(n)
	}
	return work + n
}

// fire raises a completion event: counted in the ring, then signalled on
// the channel's eventfd.
func (c *cqRing) fire() {
	if c.ch == nil {
		return
	}
	c.ring.RaiseEvent()
	var one = [8]byte{1}
	unix.Write(c.ch.fd, one[:])
}
