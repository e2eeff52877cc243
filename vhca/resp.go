package vhca

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/softib/softib/vhca/wire"
)

// The responder (IBA 1.4 §9.7.4, §9.7.5.2): it checks request packets in
// the spec's order, places SENDs and RDMA WRITEs, answers READs and
// atomics, acknowledges, and NAKs what it must refuse.

type respKind uint8

const (
	respACK respKind = iota // ACK or NAK: an ACKNOWLEDGE packet with syn
	respRead
	respAtomic
)

// respItem is a response waiting to be sent; the queue keeps them in PSN
// order, which RC requires of responses.
type respItem struct {
	kind  respKind
	psn   uint32
	syn   wire.Syndrome
	res   rdResource // READ/atomic: a copy of the resource answered (its slot may be reused meanwhile)
	off   uint32     // READ: bytes of the resource already answered
	first bool       // READ: the next packet starts the response stream
	fatal bool       // a NAK after which the QP goes to Error
	own   bool       // an ACK taken without a frame (ownack.go)
}

// rdResource is what a responder keeps of a READ or atomic request, to
// answer a duplicate of it again (IBA 1.4 §9.7.5.2.1, responder
// resources): a READ is read again, an atomic's saved result is sent
// again and the atomic never executed twice.
type rdResource struct {
	valid   bool
	atomic  bool
	psn     uint32 // first PSN
	lastPSN uint32
	va      uint64
	rkey    uint32
	length  uint32
	orig    uint64 // atomic: the value before the operation
}

type responder struct {
	epsn      uint32 // expected PSN
	msn       uint32 // messages completed (24 bits)
	nakSent   bool   // a sequence NAK went out: silence until back in sequence
	inMessage bool   // a SEND or WRITE is between its first and last packet
	op        wire.Operation
	haveWQE   bool
	wqe       recvWQE
	recvOff   uint64 // bytes placed into wqe
	va        uint64 // WRITE in progress: next address ...
	rkey      uint32 // ... in the region of this key
	remaining uint32 // ... and bytes still to come
	dmaLen    uint32
	res       []rdResource
	resNext   int
	queue     []respItem
	dying     bool // a fatal NAK is queued: the QP goes to Error once it is sent
}

// onRequest handles a request packet for qp.
func (d *Device) onRequest(now Time, qp *QP, p *wire.Packet) {
	if qp.resp.dying {
		return
	}
	switch qp.Type {
	case QPTypeUD:
		d.onUDRequest(qp, p)
		return
	case QPTypeUC:
		d.onUCRequest(qp, p)
		return
	}
	r := &qp.resp
	psn := p.BTH().PSN()
	switch diff := psnDiff(psn, r.epsn); {
	case diff > 0:
		// Packets were lost: one NAK, then silence until the requester
		// is back in sequence (IBA 1.4 §9.7.5.2.2).
		qp.port.Counters.RcvPSNDrops++
		if !r.nakSent {
			r.nakSent = true
			d.queueResponse(qp, respItem{kind: respACK, psn: r.epsn, syn: wire.NAKSyndrome(wire.NAKPSNSequenceError)})
		}
		return
	case diff < 0:
		d.onDuplicate(qp, p, psn)
		return
	}
	r.nakSent = false
	if nak, status := d.execute(qp, p); nak != noNAK {
		if nak == rnrNAK {
			qp.port.Counters.RNRNAKsSent++
			d.queueResponse(qp, respItem{kind: respACK, psn: psn, syn: wire.RNRNAKSyndrome(qp.attr.MinRNRTimer)})
			return
		}
		d.responderError(qp, psn, wire.NAKSyndrome(uint8(nak)), status)
	}
}

type nakCode int8

const (
	noNAK                nakCode = -1
	rnrNAK               nakCode = -2
	nakInvalidRequest            = nakCode(wire.NAKInvalidRequest)
	nakRemoteAccess              = nakCode(wire.NAKRemoteAccessError)
	nakRemoteOperational         = nakCode(wire.NAKRemoteOperational)
)

// execute carries out an in-sequence RC or UC request packet. It returns
// the NAK to send (noNAK if none, rnrNAK for no receive WQE) and, for an
// error, the status of the receive WQE it ends.
func (d *Device) execute(qp *QP, p *wire.Packet) (nakCode, WCStatus) {
	r := &qp.resp
	info := p.Info
	psn := p.BTH().PSN()
	// Opcode sequence (IBA 1.4 §9.7.5.2, responder checks): a message in
	// progress continues with its own middle or last packet; otherwise a
	// new one starts.
	cont := info.Position == wire.Middle || info.Position == wire.Last
	if r.inMessage != cont || cont && info.Operation != r.op {
		return nakInvalidRequest, WCRemInvReqErr
	}
	n := len(p.Payload())
	if info.Payload && !lengthFits(qp, p) {
		return nakInvalidRequest, WCRemInvReqErr
	}
	last := info.Position == wire.Last || info.Position == wire.Only
	switch info.Operation {
	case wire.OpSend:
		if !r.haveWQE {
			if !d.takeRecv(qp) {
				return rnrNAK, 0
			}
		}
		if r.recvOff+uint64(n) > r.wqe.length {
			return nakInvalidRequest, WCLocLenErr
		}
		if !d.walkSGL(qp.PD, r.wqe.sgl, r.recvOff, p.Payload(), AccessLocalWrite, func(mem, data []byte) { copy(mem, data) }) {
			return nakRemoteOperational, WCLocProtErr
		}
		r.recvOff += uint64(n)
		r.inMessage, r.op = !last, wire.OpSend
		if last {
			var flags WCFlags
			var imm uint32
			if info.Immediate() {
				flags |= WCWithImm
				imm = p.ImmDt().Value()
			}
			if info.Invalidate() {
				flags |= WCWithInv
				imm = p.IETH().RKey()
			}
			d.finishRecv(qp, WCRecv, uint32(r.recvOff), flags, imm, p.BTH().SE())
		}
	case wire.OpRDMAWrite:
		if info.Position == wire.First || info.Position == wire.Only {
			reth := p.RETH()
			if nak := d.checkRKey(qp, reth.RKey(), reth.VA(), uint64(reth.DMALen()), AccessRemoteWrite); nak != noNAK {
				return nak, 0
			}
			r.va, r.rkey, r.remaining, r.dmaLen = reth.VA(), reth.RKey(), reth.DMALen(), reth.DMALen()
		}
		if uint32(n) > r.remaining || last && uint32(n) != r.remaining {
			return nakInvalidRequest, WCRemInvReqErr
		}
		if last && info.Immediate() && !r.haveWQE && !d.takeRecv(qp) {
			return rnrNAK, 0
		}
		if n > 0 {
			mr := d.lookupMR(r.rkey)
			if mr == nil || mr.PD != qp.PD {
				return nakRemoteAccess, 0
			}
			mem, ok := mr.span(r.va, uint64(n))
			if !ok {
				return nakRemoteAccess, 0
			}
			copy(mem, p.Payload())
		}
		r.va += uint64(n)
		r.remaining -= uint32(n)
		r.inMessage, r.op = !last, wire.OpRDMAWrite
		if last && info.Immediate() {
			d.finishRecv(qp, WCRecvRDMAWithImm, r.dmaLen, WCWithImm, p.ImmDt().Value(), p.BTH().SE())
		} else if last {
			r.msn = psnAdd(r.msn, 1)
		}
	case wire.OpRDMARead:
		reth := p.RETH()
		if qp.attr.MaxDestRdAtomic == 0 {
			return nakInvalidRequest, 0 // the QP answers no READ
		}
		if nak := d.checkRKey(qp, reth.RKey(), reth.VA(), uint64(reth.DMALen()), AccessRemoteRead); nak != noNAK {
			return nak, 0
		}
		npkts := packetsFor(reth.DMALen(), uint32(qp.mtu))
		res := d.newResource(qp, rdResource{psn: psn, lastPSN: psnAdd(psn, npkts-1),
			va: reth.VA(), rkey: reth.RKey(), length: reth.DMALen()})
		r.msn = psnAdd(r.msn, 1)
		r.epsn = psnAdd(psn, npkts)
		d.queueResponse(qp, respItem{kind: respRead, psn: psn, res: res, first: true})
		return noNAK, 0
	case wire.OpCompareSwap, wire.OpFetchAdd:
		a := p.AtomicETH()
		if qp.attr.MaxDestRdAtomic == 0 {
			return nakInvalidRequest, 0
		}
		if a.VA()%8 != 0 {
			return nakInvalidRequest, 0 // atomics need 8-byte alignment
		}
		if nak := d.checkRKey(qp, a.RKey(), a.VA(), 8, AccessRemoteAtomic); nak != noNAK {
			return nak, 0
		}
		mr := d.lookupMR(a.RKey())
		mem, _ := mr.span(a.VA(), 8)
		orig := atomic64(mem, info.Operation == wire.OpCompareSwap, a.CmpData(), a.SwapAddData())
		res := d.newResource(qp, rdResource{atomic: true, psn: psn, lastPSN: psn, orig: orig})
		r.msn = psnAdd(r.msn, 1)
		r.epsn = psnAdd(psn, 1)
		d.queueResponse(qp, respItem{kind: respAtomic, psn: psn, res: res})
		return noNAK, 0
	default:
		return nakInvalidRequest, WCRemInvReqErr
	}
	lastPSN := psnAdd(psn, psnsOf(qp, p)-1)
	r.epsn = psnAdd(lastPSN, 1)
	if qp.Type == QPTypeRC && p.BTH().AckReq() {
		d.queueACK(qp, lastPSN, d.ackComesBack(qp))
	}
	return noNAK, 0
}

// checkRKey is the responder's memory access check, in the spec's order
// (IBA 1.4 §9.7.5.2 and ch. 10, memory access validation): the key names a valid
// region, of the QP's PD, whose rights and the QP's allow the access,
// and the whole range lies inside it.
func (d *Device) checkRKey(qp *QP, rkey uint32, va, n uint64, access Access) nakCode {
	if n > uint64(d.Attr.MaxMsgSize) {
		return nakInvalidRequest
	}
	if n == 0 {
		// A zero-length RDMA operation touches no memory: its R_Key and
		// VA are not checked (IBA 1.4 C9-88, as rxe's check_rkey).
		return noNAK
	}
	mr := d.lookupMR(rkey)
	if mr == nil || mr.PD != qp.PD || mr.Access&access == 0 || qp.attr.AccessFlags&access == 0 {
		return nakRemoteAccess
	}
	if _, ok := mr.span(va, n); !ok {
		return nakRemoteAccess
	}
	return noNAK
}

// atomic64 performs a CmpSwap or FetchAdd on the 8 bytes of mem in host
// byte order, with a CPU atomic instruction when the address allows one
// (so that it is atomic against the host's CPUs too: IBV_ATOMIC_GLOB),
// and returns the original value.
func atomic64(mem []byte, cmpSwap bool, cmp, swapAdd uint64) uint64 {
	if uintptr(unsafe.Pointer(&mem[0]))%8 == 0 {
		ptr := (*uint64)(unsafe.Pointer(&mem[0]))
		if !cmpSwap {
			return atomic.AddUint64(ptr, swapAdd) - swapAdd
		}
		for {
			old := atomic.LoadUint64(ptr)
			if old != cmp {
				return old
			}
			if atomic.CompareAndSwapUint64(ptr, old, swapAdd) {
				return old
			}
		}
	}
	old := binary.NativeEndian.Uint64(mem)
	switch {
	case !cmpSwap:
		binary.NativeEndian.PutUint64(mem, old+swapAdd)
	case old == cmp:
		binary.NativeEndian.PutUint64(mem, swapAdd)
	}
	return old
}

// resize gives the responder n resource slots, keeping the most recent
// resources (a duplicate may still ask for them) and a valid next slot.
func (r *responder) resize(n int) {
	res := make([]rdResource, n)
	k := 0
	for i := range r.res {
		// Oldest first, from the slot that would be reused next.
		x := r.res[(r.resNext+i)%len(r.res)]
		if x.valid {
			res[k%n] = x
			k++
		}
	}
	r.res, r.resNext = res, k%n
}

// newResource saves a READ or atomic in the oldest resource slot. The
// request it replaces is complete at the requester (which has at most
// max_rd_atomic of them out, no more than this QP's max_dest_rd_atomic),
// so an answer to it still queued, one a late duplicate asked for, is
// dropped: the queue never holds more READ and atomic answers than there
// are resources.
func (d *Device) newResource(qp *QP, res rdResource) rdResource {
	r := &qp.resp
	if old := &r.res[r.resNext]; old.valid {
		k := 0
		for _, it := range r.queue {
			if it.kind == respACK || it.res.psn != old.psn {
				r.queue[k] = it
				k++
			}
		}
		r.queue = r.queue[:k]
	}
	res.valid = true
	r.res[r.resNext] = res
	r.resNext = (r.resNext + 1) % len(r.res)
	return res
}

// onDuplicate answers a request the responder has seen already (IBA 1.4
// §9.7.5.2.1): SEND and WRITE are acknowledged again, READs are read
// again, atomics answered with their saved result.
func (d *Device) onDuplicate(qp *QP, p *wire.Packet, psn uint32) {
	r := &qp.resp
	qp.port.Counters.RcvPSNDrops++
	switch p.Info.Operation {
	case wire.OpRDMARead:
		reth := p.RETH()
		for i := range r.res {
			res := &r.res[i]
			if !res.valid || res.atomic || psnDiff(psn, res.psn) < 0 || psnDiff(psn, res.lastPSN) > 0 {
				continue
			}
			// The retried READ asks for the rest of the original from
			// the PSN of the first response it lacks.
			off := reth.VA() - res.va
			if reth.VA() < res.va || off > uint64(res.length) || uint64(reth.DMALen()) != uint64(res.length)-off {
				return
			}
			for k := range r.queue {
				if r.queue[k].kind == respRead && r.queue[k].res.psn == res.psn {
					r.queue = append(r.queue[:k], r.queue[k+1:]...)
					break
				}
			}
			d.queueResponse(qp, respItem{kind: respRead, psn: psn, res: *res, off: uint32(off), first: true})
			return
		}
	case wire.OpCompareSwap, wire.OpFetchAdd:
		for _, it := range r.queue {
			if it.kind == respAtomic && it.psn == psn {
				return // its answer is already on its way
			}
		}
		for i := range r.res {
			if res := &r.res[i]; res.valid && res.atomic && res.psn == psn {
				d.queueResponse(qp, respItem{kind: respAtomic, psn: psn, res: *res})
				return
			}
		}
	default:
		d.queueResponse(qp, respItem{kind: respACK, psn: psnAdd(r.epsn, wire.MaxPSN), syn: wire.ACKSyndrome(wire.CreditCountInvalid)})
	}
}

// queueResponse adds a response; a plain ACK after a plain ACK replaces
// it (ACK coalescing: the later one acknowledges everything the earlier
// did).
func (d *Device) queueResponse(qp *QP, it respItem) {
	q := qp.resp.queue
	if it.kind == respACK && it.syn.Kind() == wire.SyndromeACK && len(q) > 0 {
		if last := &q[len(q)-1]; last.kind == respACK && last.syn.Kind() == wire.SyndromeACK {
			*last = it
			return
		}
	}
	qp.resp.queue = append(q, it)
	d.schedule(qp)
}

// queueACK is queueResponse of a plain ACK, written in place: the copy of
// a whole respItem built a moment before waits on the stores that built
// it (CQ.next), and this is once per message.
func (d *Device) queueACK(qp *QP, psn uint32, own bool) {
	syn := wire.ACKSyndrome(wire.CreditCountInvalid)
	q := qp.resp.queue
	if len(q) > 0 {
		if last := &q[len(q)-1]; last.kind == respACK && last.syn.Kind() == wire.SyndromeACK {
			last.psn, last.syn, last.own = psn, syn, own
			return
		}
	}
	q = append(q, respItem{})
	it := &q[len(q)-1]
	it.kind, it.psn, it.syn, it.own = respACK, psn, syn, own
	qp.resp.queue = q
	d.schedule(qp)
}

// takeRecv takes a receive WQE from the QP's RQ or SRQ into the responder.
func (d *Device) takeRecv(qp *QP) bool {
	var w *recvWQE
	if qp.SRQ != nil {
		w = qp.SRQ.take()
	} else {
		if qp.rq.len() == 0 && d.FetchRecv != nil {
			d.FetchRecv(qp)
		}
		w = qp.rq.take()
	}
	if w == nil {
		return false
	}
	qp.resp.wqe.copyFrom(w)
	qp.resp.haveWQE = true
	qp.resp.recvOff = 0
	return true
}

// finishRecv completes the receive WQE of the message that just ended
// (RC, UC, XRC): op, its length, and with flags, its immediate data or
// invalidated R_Key.
func (d *Device) finishRecv(qp *QP, op WCOpcode, n uint32, flags WCFlags, imm uint32, solicited bool) {
	r := &qp.resp
	r.msn = psnAdd(r.msn, 1)
	wc := qp.RecvCQ.next()
	wc.WRID, wc.Status, wc.Opcode, wc.VendorErr = r.wqe.wrid, WCSuccess, op, 0
	wc.ByteLen, wc.Imm, wc.QPNum, wc.SrcQP = n, imm, qp.Num, qp.attr.DestQPN
	wc.Flags, wc.PKeyIndex, wc.SLID, wc.SL, wc.DLIDPath = flags, qp.attr.PKeyIndex, 0, 0, 0
	qp.RecvCQ.add(wc, solicited)
	r.haveWQE = false
	r.recvOff = 0
}

// completeRecv writes a receive completion.
func (d *Device) completeRecv(qp *QP, w *recvWQE, wc *WC) { d.pushRecv(qp, w, wc, false) }

// pushRecv writes a receive completion; solicited is the message's SE bit,
// which wakes a CQ armed for solicited completions only.
func (d *Device) pushRecv(qp *QP, w *recvWQE, wc *WC, solicited bool) {
	wc.WRID = w.wrid
	wc.QPNum = qp.Num
	qp.RecvCQ.push(wc, solicited)
}

// responderError NAKs a request the responder refuses and ends the QP in
// error once the NAK is out (IBA 1.4 §9.9.2.2, responder class B and C
// errors); the receive WQE in use completes with status.
func (d *Device) responderError(qp *QP, psn uint32, syn wire.Syndrome, status WCStatus) {
	r := &qp.resp
	qp.port.Counters.NAKsSent++
	if r.haveWQE && status != 0 {
		d.completeRecv(qp, &r.wqe, &WC{Status: status, Opcode: WCRecv, SrcQP: qp.attr.DestQPN})
		r.haveWQE = false
	}
	r.dying = true
	d.queueResponse(qp, respItem{kind: respACK, psn: psn, syn: syn, fatal: true})
}

// nextResponse builds the next queued response of qp into buf.
func (d *Device) nextResponse(now Time, qp *QP, buf []byte) int {
	r := &qp.resp
	if len(r.queue) == 0 {
		return 0
	}
	for len(r.queue) > 0 && r.queue[0].own {
		psn := r.queue[0].psn
		r.queue = r.queue[:copy(r.queue, r.queue[1:])]
		// Taken off the queue first: a QP connected to itself may end
		// in Error here, which empties its queue.
		d.ackOwn(now, qp, psn)
	}
	if len(r.queue) == 0 {
		return 0
	}
	it := &r.queue[0]
	h := &qp.hdr
	h.PSN = it.psn
	h.SE, h.AckReq = false, false
	h.Syndrome, h.MSN = it.syn, r.msn
	var payload []byte
	done := true
	switch it.kind {
	case respACK:
		h.Opcode = wire.RCAcknowledge
	case respAtomic:
		h.Opcode = wire.RCAtomicAcknowledge
		h.Syndrome = wire.ACKSyndrome(wire.CreditCountInvalid)
		h.OrigRemDt = it.res.orig
	case respRead:
		res := &it.res
		mtu := uint32(qp.mtu)
		n := min(res.length-it.off, mtu)
		segment := false
		if n == mtu && d.seg && qp.port.InProcess && res.length-it.off > mtu {
			// A segment (segment.go): the region is contiguous.
			n = min(res.length-it.off, segmentCap(mtu))
			if it.off+n < res.length {
				n -= n % mtu
			}
			segment = true
		}
		ok := n == 0
		if mr := d.lookupMR(res.rkey); n > 0 && mr != nil && mr.PD == qp.PD {
			payload, ok = mr.span(res.va+uint64(it.off), uint64(n))
		}
		if !ok {
			// The region went away under the READ: NAK this response's
			// PSN, ahead of anything queued after it (the QP is going
			// to Error: nothing after it will be sent).
			psn := it.psn
			r.queue = r.queue[:0]
			d.responderError(qp, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError), 0)
			return d.nextResponse(now, qp, buf)
		}
		done = it.off+n == res.length
		switch {
		case it.first && done:
			h.Opcode = wire.RCRDMAReadResponseOnly
		case it.first:
			h.Opcode = wire.RCRDMAReadResponseFirst
		case done:
			h.Opcode = wire.RCRDMAReadResponseLast
		default:
			h.Opcode = wire.RCRDMAReadResponseMiddle
		}
		h.Syndrome = wire.ACKSyndrome(wire.CreditCountInvalid)
		it.first = false
		it.off += n
		it.psn = psnAdd(it.psn, packetsFor(n, mtu))
		if segment {
			p := &d.tx
			if err := h.EncodeSegment(buf, payload, p); err != nil {
				return 0
			}
			d.txSeg = payload
			if done {
				r.queue = r.queue[:copy(r.queue, r.queue[1:])]
			}
			return len(p.Frame)
		}
	}
	p := &d.tx
	if err := wire.Build(buf, h, payload, p); err != nil {
		return 0
	}
	if done {
		fatal, syn := it.fatal, it.syn
		r.queue = r.queue[:copy(r.queue, r.queue[1:])]
		if fatal {
			// The responder's affiliated asynchronous error (IBA 1.4
			// ch. 11; ibv_get_async_event(3)): an invalid request, an
			// access violation, or another catastrophic QP error.
			ev := EventQPFatal
			switch syn.Value() {
			case wire.NAKInvalidRequest:
				ev = EventQPReqErr
			case wire.NAKRemoteAccessError:
				ev = EventQPAccessErr
			}
			d.setState(qp, QPStateError)
			d.raise(Event{Type: ev, QP: qp})
		}
	}
	return p.Len()
}
