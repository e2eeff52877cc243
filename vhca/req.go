package vhca

import (
	"math/bits"

	"github.com/softib/softib/vhca/wire"
)

// The requester turns send WQEs into request packets (IBA 1.4 §9.7.1,
// §9.7.4): segmentation by path MTU, PSNs, AckReq, the READ/atomic limit
// and fences, and go-back-N when the completer asks for a retry.

// maxPacketsPerAck: the requester asks for an ACK at least this often
// within a long message, as rxe does, so that the completer can retire
// and the responder need not hold acknowledgements back.
const maxPacketsPerAck = 64

// maxUnackedPSNs bounds the PSNs a requester has out unacknowledged, as
// rxe does (RXE_MAX_UNACKED_PSNS): one loss then costs at most this many
// packets of go-back-N, and the window stays far inside the 2^23 PSNs IBA
// allows (§9.7.1).
const maxUnackedPSNs = 128

type requester struct {
	psn      uint32 // next PSN to send
	unacked  uint32 // oldest PSN not acknowledged
	offset   uint32 // bytes of the WQE at sqNext already sent
	rdOut    int    // READ and atomic WQEs started and not completed
	noAck    int    // packets since the last AckReq
	timer    Time   // retransmission deadline; 0: none
	retries  uint8  // timeouts and sequence NAKs left before RETRY_EXC_ERR
	rnrLeft  uint8  // RNR NAKs left before RNR_RETRY_EXC_ERR
	rnrWait  Time   // after an RNR NAK: nothing is sent before this; 0: none
	rateWait Time   // rate limited: the QP is off the ring until this (ratelimit.go); 0: none
	sqdEvent bool   // SQD: the drained event is still to raise
	retrying bool   // an implied NAK rewound to retryPSN, not yet passed
	retryPSN uint32
	// After a rewind, the PSNs up to resendUntil go again as packets,
	// never as segments (segment.go).
	resending   bool
	resendUntil uint32
}

func isRdAtomic(op WROpcode) bool {
	return op == WRRDMARead || op == WRAtomicCmpSwap || op == WRAtomicFetchAdd
}

// packetsFor is how many PSNs a message of n bytes takes. A path MTU is
// a power of two (IBA 1.4 §7.7.1), and a shift costs a fraction of a
// division, on every packet's path.
func packetsFor(n, mtu uint32) uint32 {
	if n == 0 {
		return 1
	}
	if mtu&(mtu-1) == 0 {
		return (n-1)>>bits.TrailingZeros32(mtu) + 1
	}
	return (n + mtu - 1) / mtu
}

// nextRequest builds the next request packet of qp into buf and returns
// its length, or 0 if the QP has nothing to send now.
func (d *Device) nextRequest(now Time, qp *QP, buf []byte) int {
	r := &qp.req
	if qp.state != QPStateRTS && qp.state != QPStateSQD || qp.sqNext == qp.sqTail {
		return 0
	}
	if r.rnrWait != 0 {
		if now < r.rnrWait {
			return 0
		}
		r.rnrWait = 0
	}
	if qp.Type == QPTypeRC && psnDiff(r.psn, r.unacked) >= maxUnackedPSNs {
		return 0 // progress schedules the QP again
	}
	w := qp.sqe(qp.sqNext)
	mtu := uint32(qp.mtu)
	if r.offset == 0 && !(qp.Type == QPTypeRC && w.npsn != 0 && w.psn == r.psn) {
		// Starting a WQE (not resuming one after a rewind).
		if qp.state == QPStateSQD {
			return 0
		}
		if w.wr.Flags&SendFence != 0 && r.rdOut > 0 {
			return 0 // a fenced WR waits for earlier READs and atomics
		}
		if isRdAtomic(w.wr.Opcode) {
			if r.rdOut >= int(qp.attr.MaxRdAtomic) {
				return 0
			}
			r.rdOut++
		}
		w.psn = r.psn
		w.npsn = packetsFor(w.length, mtu)
		if w.wr.Opcode == WRAtomicCmpSwap || w.wr.Opcode == WRAtomicFetchAdd {
			w.npsn = 1
		}
	}
	h := &qp.hdr
	h.PSN = r.psn
	h.SE, h.AckReq = false, false
	var payload uint32
	var seg []byte // the payload of a segment (segment.go)
	last := true
	switch w.wr.Opcode {
	case WRRDMARead:
		h.Opcode = wire.RCRDMAReadRequest
		h.VA = w.wr.RemoteAddr + uint64(r.offset)
		h.RKey = w.wr.RKey
		h.DMALen = w.length - r.offset
		r.psn = psnAdd(r.psn, packetsFor(h.DMALen, mtu))
		h.AckReq = true
	case WRAtomicCmpSwap, WRAtomicFetchAdd:
		h.Opcode = wire.RCCompareSwap
		if w.wr.Opcode == WRAtomicFetchAdd {
			h.Opcode = wire.RCFetchAdd
		}
		h.VA, h.RKey = w.wr.RemoteAddr, w.wr.RKey
		h.Compare, h.SwapAdd = w.wr.CompareAdd, w.wr.Swap
		if w.wr.Opcode == WRAtomicFetchAdd {
			h.SwapAdd, h.Compare = w.wr.CompareAdd, 0
		}
		r.psn = psnAdd(r.psn, 1)
		h.AckReq = true
	default:
		payload = min(w.length-r.offset, mtu)
		if payload == mtu && d.seg && qp.port.InProcess && qp.Type != QPTypeUD && !d.resending(qp) {
			if seg = d.segmentSource(qp, w, r.offset, mtu); seg != nil {
				payload = uint32(len(seg))
			}
		}
		first := r.offset == 0
		last = r.offset+payload == w.length
		h.Opcode = sendOpcode(w.wr.Opcode, first, last).WithTransport(transportOf(qp.Type))
		if first {
			h.VA, h.RKey, h.DMALen = w.wr.RemoteAddr, w.wr.RKey, w.length
		}
		if last {
			h.Imm, h.InvRKey = w.wr.Imm, w.wr.Imm
			h.SE = w.wr.Flags&SendSolicited != 0
			h.AckReq = qp.Type == QPTypeRC
		}
		// A segment counts as the packets it stands for. A rate limited
		// QP also asks before it pauses (ratelimit.go).
		if qp.Type == QPTypeRC && (r.noAck+int(packetsFor(payload, mtu)) >= maxPacketsPerAck || qp.rate.short(payload)) {
			h.AckReq = true
		}
		if qp.Type == QPTypeUD {
			d.setUDDestination(qp, w, h)
		}
		r.psn = psnAdd(r.psn, packetsFor(payload, mtu))
	}
	p := &d.tx
	if seg != nil {
		if err := h.EncodeSegment(buf, seg, p); err != nil {
			d.requestError(qp, w, WCLocLenErr)
			return 0
		}
		d.txSeg = seg
	} else {
		if err := h.Encode(buf, int(payload), p); err != nil {
			d.requestError(qp, w, WCLocLenErr)
			return 0
		}
		if payload > 0 && !d.gather(qp, w, r.offset, p.Payload()) {
			d.requestError(qp, w, WCLocProtErr)
			return 0
		}
		p.Seal()
	}
	if h.AckReq {
		r.noAck = 0
	} else {
		r.noAck += int(packetsFor(payload, mtu))
	}
	if last {
		qp.sqNext++
		r.offset = 0
	} else {
		r.offset += payload
	}
	if qp.Type == QPTypeRC {
		if r.timer == 0 {
			r.timer = deadline(now, ackTimeout(qp.attr.Timeout))
			d.watch(qp)
		}
	} else if last {
		// UC and UD have no acknowledgements: the WQE is done when its
		// last packet leaves.
		d.retire(qp, WCSuccess)
	}
	return len(p.Frame)
}

func deadline(now, d Time) Time {
	if d == 0 {
		return 0
	}
	return now + d
}

func transportOf(t QPType) wire.Transport {
	switch t {
	case QPTypeUC:
		return wire.UC
	case QPTypeUD:
		return wire.UD
	}
	return wire.RC
}

// sendOpcode is the RC opcode of a SEND or RDMA WRITE packet.
func sendOpcode(op WROpcode, first, last bool) wire.Opcode {
	write := op == WRRDMAWrite || op == WRRDMAWriteWithImm
	switch {
	case first && last:
		switch op {
		case WRSendWithImm:
			return wire.RCSendOnlyWithImmediate
		case WRSendWithInv:
			return wire.RCSendOnlyWithInvalidate
		case WRRDMAWrite:
			return wire.RCRDMAWriteOnly
		case WRRDMAWriteWithImm:
			return wire.RCRDMAWriteOnlyWithImm
		}
		return wire.RCSendOnly
	case first:
		if write {
			return wire.RCRDMAWriteFirst
		}
		return wire.RCSendFirst
	case last:
		switch op {
		case WRSendWithImm:
			return wire.RCSendLastWithImmediate
		case WRSendWithInv:
			return wire.RCSendLastWithInvalidate
		case WRRDMAWrite:
			return wire.RCRDMAWriteLast
		case WRRDMAWriteWithImm:
			return wire.RCRDMAWriteLastWithImm
		}
		return wire.RCSendLast
	}
	if write {
		return wire.RCRDMAWriteMiddle
	}
	return wire.RCSendMiddle
}

// gather copies the WQE's bytes [off, off+len(dst)) into dst, from its
// inline data or through its SGL's L_Keys (local access checked).
func (d *Device) gather(qp *QP, w *sendWQE, off uint32, dst []byte) bool {
	if w.wr.Flags&SendInline != 0 {
		copy(dst, w.inline[off:])
		return true
	}
	return d.walkSGL(qp.PD, w.sgl, uint64(off), dst, 0, func(mem, data []byte) { copy(data, mem) })
}

// walkSGL visits the bytes [off, off+len(data)) of an SGL: fn gets each
// piece of registered memory and the matching piece of data. It fails if
// an L_Key is unknown, of another PD, lacks access, or an SGE overruns
// its region.
func (d *Device) walkSGL(pd *PD, sgl []SGE, off uint64, data []byte, access Access, fn func(mem, data []byte)) bool {
	for _, s := range sgl {
		if len(data) == 0 {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		n := min(uint64(s.Length)-off, uint64(len(data)))
		mr := d.lookupMR(s.LKey)
		if mr == nil || mr.PD != pd || mr.Access&access != access {
			return false
		}
		mem, ok := mr.span(s.Addr+off, n)
		if !ok {
			return false
		}
		fn(mem, data[:n])
		data = data[n:]
		off = 0
	}
	return len(data) == 0
}

// requestError ends the QP's sending on a local error in the WQE at
// sqNext: the WQEs before it complete normally once acknowledged, this one
// completes in error, and the QP goes to Error (RC) or SQE (UC, UD).
func (d *Device) requestError(qp *QP, w *sendWQE, status WCStatus) {
	w.status = status
	if qp.Type != QPTypeRC {
		for qp.sqHead != qp.sqNext {
			d.retire(qp, WCSuccess)
		}
		qp.sqNext++
		d.retire(qp, status)
		d.setState(qp, QPStateSQE)
		d.flushSend(qp)
		return
	}
	// RC: earlier WQEs may still be unacknowledged; complete them as
	// flushed too: the spec lets the QP go to Error at once.
	for qp.sqHead != qp.sqNext {
		d.retire(qp, WCWRFlushErr)
	}
	qp.sqNext++
	d.retire(qp, status)
	d.setState(qp, QPStateError)
}

// flushSend completes every WQE left on the send queue as flushed (the
// SQE state: the receive side goes on).
func (d *Device) flushSend(qp *QP) {
	for qp.sqHead != qp.sqTail {
		if qp.sqNext == qp.sqHead {
			qp.sqNext++
		}
		d.retire(qp, WCWRFlushErr)
	}
	qp.req.offset = 0
}

// retire completes the WQE at sqHead with status.
func (d *Device) retire(qp *QP, status WCStatus) {
	w := qp.sqe(qp.sqHead)
	if isRdAtomic(w.wr.Opcode) && qp.req.rdOut > 0 && w.npsn != 0 {
		qp.req.rdOut--
	}
	qp.sqHead++
	d.completeSend(qp, w, status)
}

var wcOpcodeOfWR = [...]WCOpcode{
	WRRDMAWrite: WCRDMAWrite, WRRDMAWriteWithImm: WCRDMAWrite, WRSend: WCSend, WRSendWithImm: WCSend,
	WRRDMARead: WCRDMARead, WRAtomicCmpSwap: WCCompSwap, WRAtomicFetchAdd: WCFetchAdd,
	WRLocalInv: WCLocalInv, WRBindMW: WCBindMW, WRSendWithInv: WCSend,
}

// completeSend writes the completion of a send WQE if it is signaled or
// failed (an error always completes).
func (d *Device) completeSend(qp *QP, w *sendWQE, status WCStatus) {
	if status == WCSuccess && !qp.sigAll && w.wr.Flags&SendSignaled == 0 {
		return
	}
	var op WCOpcode
	if int(w.wr.Opcode) < len(wcOpcodeOfWR) {
		op = wcOpcodeOfWR[w.wr.Opcode]
	}
	var n uint32
	if status == WCSuccess {
		n = w.length
	}
	wc := qp.SendCQ.next()
	wc.WRID, wc.Status, wc.Opcode, wc.VendorErr = w.wr.WRID, status, op, 0
	wc.ByteLen, wc.Imm, wc.QPNum, wc.SrcQP = n, 0, qp.Num, 0
	wc.Flags, wc.PKeyIndex, wc.SLID, wc.SL, wc.DLIDPath = 0, 0, 0, 0, 0
	qp.SendCQ.add(wc, false)
}
