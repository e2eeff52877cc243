package vhca

import "github.com/softib/softib/vhca/wire"

// sendWQE is a send WQE, copied out of the poster's request at PostSend.
type sendWQE struct {
	wr     SendWR // wr.SGL and wr.InlineData alias sgl and inline
	sgl    []SGE  // capacity: MaxSendSGE
	inline []byte // capacity: MaxInlineData
	length uint32

	// Set when the requester starts the WQE.
	psn  uint32 // first PSN
	npsn uint32 // PSNs it takes: its packets, or a READ's response packets
	// Completer progress.
	readDone uint32 // READ: response bytes placed
	orig     uint64 // atomic: the value the responder's memory held
	status   WCStatus
}

// ringSize is the number of slots of a work queue that holds n WQEs: a
// power of two, so that the free-running 32-bit indices, taken modulo
// it, stay consistent when they wrap at 2^32.
func ringSize(n int) int {
	size := 1
	for size < n {
		size <<= 1
	}
	return size
}

// sqe is the send queue slot of free-running index i.
func (qp *QP) sqe(i uint32) *sendWQE { return &qp.sq[i&uint32(len(qp.sq)-1)] }

// lastPSN is the PSN of the WQE's last packet (or last READ response).
func (w *sendWQE) lastPSN() uint32 { return (w.psn + w.npsn - 1) & wire.MaxPSN }

// QP is a queue pair.
type QP struct {
	dev    *Device
	Num    uint32
	Type   QPType
	PD     *PD
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	sigAll bool
	cap    QPCap
	state  QPState
	attr   QPAttr
	port   *Port
	mtu    int // path MTU in bytes

	sq                     []sendWQE
	sqHead, sqNext, sqTail uint32 // free-running: oldest uncompleted, next to start, next free
	rq                     recvQueue

	req  requester
	resp responder
	hdr  wire.Headers // the packet fields that come from the QP and its path
	rate rateBucket   // injection rate limit (ratelimit.go)

	ready bool // on the device's list of QPs with something to send
	timed bool // on the device's list of QPs with a timer armed

	mcastGroups int    // multicast groups the QP is attached to (mcast.go)
	mcastSeq    uint64 // the device's mcastSeq of the last multicast packet it was given
}

// CreateQP makes a QP in pd.
func (d *Device) CreateQP(pd *PD, a QPInitAttr) (*QP, error) {
	if pd == nil || d.pds[pd.Handle] != pd {
		return nil, ErrNoSuchObject
	}
	switch a.Type {
	case QPTypeRC, QPTypeUC, QPTypeUD:
	default:
		return nil, invalid("QP type %d", a.Type)
	}
	if a.SendCQ == nil || a.RecvCQ == nil || d.cqs[a.SendCQ.Handle] != a.SendCQ || d.cqs[a.RecvCQ.Handle] != a.RecvCQ {
		return nil, invalid("QP needs a send and a receive CQ of this device")
	}
	c := a.Cap
	if c.MaxSendWR < 1 || c.MaxSendWR > d.Attr.MaxQPWR || c.MaxSendSGE < 0 || c.MaxSendSGE > d.Attr.MaxSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > d.Attr.MaxInlineData {
		return nil, invalid("send queue %d WRs, %d SGEs, %d inline", c.MaxSendWR, c.MaxSendSGE, c.MaxInlineData)
	}
	if a.SRQ != nil && (d.srqs[a.SRQ.Handle] != a.SRQ || a.SRQ.PD != pd) {
		return nil, invalid("QP needs an SRQ of this device and PD")
	}
	if a.SRQ == nil && (c.MaxRecvWR < 1 || c.MaxRecvWR > d.Attr.MaxQPWR || c.MaxRecvSGE < 0 || c.MaxRecvSGE > d.Attr.MaxSGE) {
		return nil, invalid("receive queue %d WRs, %d SGEs", c.MaxRecvWR, c.MaxRecvSGE)
	}
	if len(d.qps) >= d.Attr.MaxQP {
		return nil, errLimit("QPs", d.Attr.MaxQP)
	}
	qp := &QP{dev: d, Num: d.allocQPN(), Type: a.Type, PD: pd, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ,
		SRQ: a.SRQ, sigAll: a.SigAll, cap: c, state: QPStateReset}
	qp.sq = make([]sendWQE, ringSize(c.MaxSendWR))
	for i := range qp.sq {
		qp.sq[i].sgl = make([]SGE, 0, c.MaxSendSGE)
		qp.sq[i].inline = make([]byte, 0, c.MaxInlineData)
	}
	if a.SRQ == nil {
		qp.rq.init(c.MaxRecvWR, c.MaxRecvSGE)
	} else {
		a.SRQ.users++
	}
	qp.resp.wqe.sgl = make([]SGE, 0, max(c.MaxRecvSGE, d.Attr.MaxSRQSGE))
	qp.attr.Cap = c
	pd.users++
	a.SendCQ.users++
	a.RecvCQ.users++
	d.qps[qp.Num] = qp
	return qp, nil
}

// allocQPN picks the next free QP number. QPNs 0 and 1 are the special
// QPs of the subnet management and general services interfaces, and
// 0xFFFFFF is the DestQP of multicast packets.
func (d *Device) allocQPN() uint32 {
	for {
		d.nextQPN = (d.nextQPN + 1) & wire.MaxQPN
		if d.nextQPN < 2 || d.nextQPN == mcastQPN {
			continue
		}
		if d.qps[d.nextQPN] == nil {
			return d.nextQPN
		}
	}
}

// DestroyQP destroys a QP; its outstanding WRs vanish without completions,
// as with ibv_destroy_qp. A QP still attached to a multicast group is
// refused (ErrBusy), as the kernel refuses it.
func (d *Device) DestroyQP(qp *QP) error {
	if !d.ownsQP(qp) {
		return ErrNoSuchObject
	}
	if qp.mcastGroups > 0 {
		return ErrBusy
	}
	d.unschedule(qp)
	if qp.timed {
		for i, q := range d.timed {
			if q == qp {
				d.timed = append(d.timed[:i], d.timed[i+1:]...)
				break
			}
		}
	}
	d.forgetQP(qp)
	qp.PD.users--
	qp.SendCQ.users--
	qp.RecvCQ.users--
	if qp.SRQ != nil {
		qp.SRQ.users--
	}
	return nil
}

// State is the QP's current state.
func (qp *QP) State() QPState { return qp.state }

// inFlight reports whether a WQE has been started and not completed. WQEs
// start in order, so it is enough to look at the oldest.
func (qp *QP) inFlight() bool {
	return qp.sqHead != qp.sqTail && qp.sqe(qp.sqHead).npsn != 0
}

// QueryQP returns the QP's attributes and its creation attributes.
func (d *Device) QueryQP(qp *QP) (QPAttr, QPInitAttr) {
	a := qp.attr
	a.State, a.CurState = qp.state, qp.state
	a.SQPSN, a.RQPSN = qp.req.psn, qp.resp.epsn // where they are now, as rxe reports them
	a.SQDraining = qp.state == QPStateSQD && qp.inFlight()
	return a, QPInitAttr{Type: qp.Type, SendCQ: qp.SendCQ, RecvCQ: qp.RecvCQ, SRQ: qp.SRQ, Cap: qp.cap, SigAll: qp.sigAll}
}

// ModifyQP sets the attributes mask names and moves the QP to attr.State
// when mask has QPAttrState. A transition the state machine refuses, or
// an attribute out of range, leaves the QP as it was.
func (d *Device) ModifyQP(qp *QP, attr *QPAttr, mask QPAttrMask) error {
	if !d.ownsQP(qp) {
		return ErrNoSuchObject
	}
	from, to := qp.state, qp.state
	if mask&QPAttrState != 0 {
		to = attr.State
	}
	if mask&QPAttrCurState != 0 && attr.CurState != from {
		return invalid("current state %s given, the QP is in %s", attr.CurState, from)
	}
	if err := CheckTransition(qp.Type, from, to, mask); err != nil {
		return err
	}
	if err := d.checkQPAttr(qp, attr, mask); err != nil {
		return err
	}
	a := &qp.attr
	if mask&QPAttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}
	if mask&QPAttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&QPAttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&QPAttrPort != 0 {
		a.Port = attr.Port
		qp.port = d.Port(attr.Port)
		if qp.Type == QPTypeUD {
			qp.mtu = qp.port.ActiveMTU.Bytes() // a UD QP's MTU is its port's
		}
	}
	if mask&QPAttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&QPAttrAV != 0 {
		a.AV = attr.AV
	}
	if mask&QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
		qp.mtu = attr.PathMTU.Bytes()
	}
	if mask&QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
	}
	if mask&QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN
		qp.resp.epsn = attr.RQPSN
	}
	if mask&QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&QPAttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN
		qp.req.psn, qp.req.unacked = attr.SQPSN, attr.SQPSN
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
		qp.resp.resize(max(1, int(attr.MaxDestRdAtomic)))
	}
	if mask&QPAttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN
	}
	if mask&QPAttrRateLimit != 0 {
		a.RateLimit = attr.RateLimit
		d.setRateLimit(qp, attr.RateLimit)
	}
	if qp.mtu == 0 && qp.port != nil {
		qp.mtu = qp.port.ActiveMTU.Bytes() // UD: the port's MTU
	}
	if to != from {
		d.setState(qp, to)
	}
	if mask&(QPAttrAV|QPAttrPort|QPAttrPKeyIndex|QPAttrDestQPN|QPAttrQKey) != 0 {
		qp.buildHeaderTemplate()
	}
	return nil
}

// checkQPAttr checks the values of the attributes mask names.
func (d *Device) checkQPAttr(qp *QP, a *QPAttr, mask QPAttrMask) error {
	port := qp.port
	if mask&QPAttrPort != 0 {
		if port = d.Port(a.Port); port == nil {
			return invalid("port %d", a.Port)
		}
	}
	// The P_Key and SGID indices must fit the port the QP ends up on,
	// whichever of them this modify changes.
	pkeyIndex := qp.attr.PKeyIndex
	if mask&QPAttrPKeyIndex != 0 {
		pkeyIndex = a.PKeyIndex
	}
	if mask&(QPAttrPKeyIndex|QPAttrPort) != 0 && (port == nil || int(pkeyIndex) >= len(port.PKeys)) {
		return invalid("P_Key index %d", pkeyIndex)
	}
	if mask&QPAttrPort != 0 && mask&QPAttrAV == 0 && qp.attr.AV.Port != 0 &&
		(qp.attr.AV.IsGlobal || port.LinkLayer == LinkLayerEthernet) && int(qp.attr.AV.GRH.SGIDIndex) >= len(port.GIDs) {
		return invalid("SGID index %d on port %d", qp.attr.AV.GRH.SGIDIndex, port.Num)
	}
	if mask&QPAttrPathMTU != 0 && (a.PathMTU.Bytes() == 0 || port != nil && a.PathMTU > port.MaxMTU) {
		return invalid("path MTU %d", a.PathMTU)
	}
	if mask&QPAttrAV != 0 {
		if port == nil || a.AV.Port != 0 && a.AV.Port != port.Num {
			return invalid("AV port %d", a.AV.Port)
		}
		if (a.AV.IsGlobal || port.LinkLayer == LinkLayerEthernet) && int(a.AV.GRH.SGIDIndex) >= len(port.GIDs) {
			return invalid("SGID index %d of %d", a.AV.GRH.SGIDIndex, len(port.GIDs))
		}
	}
	if mask&QPAttrTimeout != 0 && a.Timeout > 31 || mask&QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return invalid("timer code above 31")
	}
	if mask&QPAttrRetryCnt != 0 && a.RetryCnt > 7 || mask&QPAttrRNRRetry != 0 && a.RNRRetry > 7 {
		return invalid("retry count above 7")
	}
	if mask&QPAttrRQPSN != 0 && a.RQPSN > wire.MaxPSN || mask&QPAttrSQPSN != 0 && a.SQPSN > wire.MaxPSN {
		return invalid("PSN above 2^24-1")
	}
	if mask&QPAttrDestQPN != 0 && a.DestQPN > wire.MaxQPN {
		return invalid("destination QPN above 2^24-1")
	}
	if mask&QPAttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > d.Attr.MaxQPInitRdAtom {
		return invalid("max_rd_atomic %d above %d", a.MaxRdAtomic, d.Attr.MaxQPInitRdAtom)
	}
	if mask&QPAttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > d.Attr.MaxQPRdAtom {
		return invalid("max_dest_rd_atomic %d above %d", a.MaxDestRdAtomic, d.Attr.MaxQPRdAtom)
	}
	if mask&QPAttrAccessFlags != 0 && a.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind) != 0 {
		return invalid("access flags %#x", uint32(a.AccessFlags))
	}
	if mask&QPAttrCap != 0 {
		return invalid("resizing a QP's queues is not supported")
	}
	return nil
}

// setState moves the QP to s with the side effects the spec gives.
func (d *Device) setState(qp *QP, s QPState) {
	qp.state = s
	switch s {
	case QPStateReset:
		// ibv_modify_qp to RESET empties the queues without completions.
		qp.sqHead, qp.sqNext, qp.sqTail = 0, 0, 0
		qp.rq.reset()
		qp.req = requester{}
		qp.resp = responder{wqe: recvWQE{sgl: qp.resp.wqe.sgl[:0]}, res: qp.resp.res}
		clear(qp.resp.res)
		d.unschedule(qp)
	case QPStateError:
		d.flush(qp)
		if qp.SRQ != nil {
			// A QP on an SRQ takes no more of its WQEs: the consumer
			// learns it may destroy the QP (IBV_EVENT_QP_LAST_WQE_REACHED,
			// on which the kernel's SRQ drain waits).
			d.raise(Event{Type: EventQPLastWQEReached, QP: qp})
		}
	case QPStateRTS:
		qp.req.retries, qp.req.rnrLeft = qp.attr.RetryCnt, qp.attr.RNRRetry
		d.schedule(qp)
	case QPStateSQD:
		qp.req.sqdEvent = qp.attr.EnSQDAsyncNotify
		d.sqDrained(qp)
		d.schedule(qp)
	}
}

// flush completes every outstanding WR with WR_FLUSH_ERR (IBA 1.4 §10.3.1:
// in the Error state WRs are completed in error, in order).
func (d *Device) flush(qp *QP) {
	for ; qp.sqHead != qp.sqTail; qp.sqHead++ {
		w := qp.sqe(qp.sqHead)
		d.completeSend(qp, w, WCWRFlushErr)
	}
	qp.sqNext = qp.sqHead
	qp.req.timer, qp.req.rnrWait, qp.req.rateWait = 0, 0, 0
	if qp.resp.haveWQE {
		// The WQE the responder took for a message in progress, or kept
		// from a UC message it abandoned, is returned too.
		d.completeRecv(qp, &qp.resp.wqe, &WC{Status: WCWRFlushErr, Opcode: WCRecv})
		qp.resp.haveWQE = false
	}
	if qp.SRQ == nil {
		for w := qp.rq.take(); w != nil; w = qp.rq.take() {
			d.completeRecv(qp, w, &WC{Status: WCWRFlushErr, Opcode: WCRecv})
		}
	}
	qp.resp.queue = qp.resp.queue[:0]
	d.unschedule(qp)
}

// PostSend copies send WRs into the send queue. It returns how many it
// took; on an error the rest are not posted (ibv_post_send's bad_wr).
func (d *Device) PostSend(qp *QP, wrs []SendWR) (int, error) {
	if !d.ownsQP(qp) {
		return 0, ErrNoSuchObject
	}
	switch qp.state {
	case QPStateReset, QPStateInit, QPStateRTR:
		return 0, ErrQPState
	}
	for i := range wrs {
		if err := d.postSend(qp, &wrs[i]); err != nil {
			return i, err
		}
	}
	switch qp.state {
	case QPStateError:
		d.flush(qp)
		if qp.SRQ != nil {
			// A QP on an SRQ takes no more of its WQEs: the consumer
			// learns it may destroy the QP (IBV_EVENT_QP_LAST_WQE_REACHED,
			// on which the kernel's SRQ drain waits).
			d.raise(Event{Type: EventQPLastWQEReached, QP: qp})
		}
	case QPStateSQE:
		d.flushSend(qp) // the send queue is in error; the receive side goes on
	default:
		d.schedule(qp)
	}
	return len(wrs), nil
}

func (d *Device) postSend(qp *QP, wr *SendWR) error {
	if int(qp.sqTail-qp.sqHead) == qp.cap.MaxSendWR {
		return ErrQueueFull
	}
	if !opcodeAllowed(qp.Type, wr.Opcode) {
		return invalid("opcode %d on a %s QP", wr.Opcode, qp.Type)
	}
	if wr.Flags&SendInline != 0 {
		if len(wr.InlineData) > qp.cap.MaxInlineData {
			return invalid("%d bytes inline, the QP takes %d", len(wr.InlineData), qp.cap.MaxInlineData)
		}
	} else if len(wr.SGL) > qp.cap.MaxSendSGE {
		return invalid("%d SGEs, the QP takes %d", len(wr.SGL), qp.cap.MaxSendSGE)
	}
	var length uint64
	if wr.Flags&SendInline != 0 {
		length = uint64(len(wr.InlineData))
	} else {
		for _, s := range wr.SGL {
			length += uint64(s.Length)
		}
	}
	if length > uint64(d.Attr.MaxMsgSize) {
		return invalid("message of %d bytes", length)
	}
	switch wr.Opcode {
	case WRAtomicCmpSwap, WRAtomicFetchAdd:
		if length != 8 {
			return invalid("atomic of %d bytes, not 8", length)
		}
	}
	if qp.Type == QPTypeUD {
		if wr.AH == nil || wr.AH.PD != qp.PD {
			return invalid("UD send needs an address handle of the QP's PD")
		}
		if qp.mtu != 0 && length > uint64(qp.mtu) {
			return invalid("UD message of %d bytes above the %d-byte MTU", length, qp.mtu)
		}
	}
	w := qp.sqe(qp.sqTail)
	sgl, inline := w.sgl[:0], w.inline[:0]
	if wr.Flags&SendInline != 0 {
		inline = append(inline, wr.InlineData...)
	} else {
		sgl = append(sgl, wr.SGL...)
	}
	// Field by field, for the reason CQ.next gives.
	w.wr.WRID, w.wr.Opcode, w.wr.Flags, w.wr.Imm = wr.WRID, wr.Opcode, wr.Flags, wr.Imm
	w.wr.RemoteAddr, w.wr.RKey, w.wr.CompareAdd, w.wr.Swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.wr.AH, w.wr.RemoteQPN, w.wr.RemoteQKey = wr.AH, wr.RemoteQPN, wr.RemoteQKey
	w.sgl, w.inline = sgl, inline
	w.wr.SGL, w.wr.InlineData = sgl, inline
	w.length, w.psn, w.npsn, w.readDone, w.orig, w.status = uint32(length), 0, 0, 0, 0, 0
	qp.sqTail++
	return nil
}

func opcodeAllowed(t QPType, op WROpcode) bool {
	switch op {
	case WRSend, WRSendWithImm:
		return true
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return t != QPTypeUD
	case WRRDMARead, WRAtomicCmpSwap, WRAtomicFetchAdd, WRSendWithInv:
		return t == QPTypeRC
	}
	return false
}

// PostRecv copies receive WRs into the receive queue.
func (d *Device) PostRecv(qp *QP, wrs []RecvWR) (int, error) {
	if !d.ownsQP(qp) {
		return 0, ErrNoSuchObject
	}
	if qp.SRQ != nil {
		return 0, invalid("QP %d receives from an SRQ", qp.Num)
	}
	if qp.state == QPStateReset {
		return 0, ErrQPState
	}
	for i := range wrs {
		if err := qp.rq.post(&wrs[i]); err != nil {
			return i, err
		}
	}
	if qp.state == QPStateError {
		d.flush(qp)
	}
	return len(wrs), nil
}
