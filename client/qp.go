package client

import (
	"sync"
	"sync/atomic"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// Types the verbs share with the vHCA (libibverbs' values).
type (
	QPType     = vhca.QPType
	QPState    = vhca.QPState
	QPAttr     = vhca.QPAttr
	QPAttrMask = vhca.QPAttrMask
	QPCap      = vhca.QPCap
	AV         = vhca.AV
	SGE        = vhca.SGE
	RecvWR     = vhca.RecvWR
	Access     = vhca.Access
	MTU        = vhca.MTU
)

// QPInitAttr creates a QP (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	SigAll bool
}

// SendWR is a send work request (ibv_send_wr). PostSend copies it.
type SendWR struct {
	WRID       uint64
	Opcode     vhca.WROpcode
	Flags      vhca.SendFlags
	SGL        []SGE
	InlineData []byte // with SendInline: the data itself, in place of the SGL
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	AH         *AH // UD
	RemoteQPN  uint32
	RemoteQKey uint32
}

// QP is a queue pair (ibv_qp). PostSend and PostRecv write into rings
// shared with verbsd: no system call (unless verbsd sleeps and must be
// woken) and no allocation.
type QP struct {
	ctx    *Context
	pd     *PD
	handle uint32
	Num    uint32
	Type   QPType
	Cap    QPCap
	state  atomic.Uint32
	mem    []byte
	// Where in mem verbsd put the rings (it places each a few cache
	// lines into its page, as many as the QP's number says).
	sqOff, rqOff uint64

	sqMu sync.Mutex
	sq   *abi.Ring
	scq  *CQ
	// The send completions of this QP polled from scq: as many SQ
	// entries are consumed at least (CQ.sendCompleted).
	sendsDone atomic.Uint32
	rqMu      sync.Mutex
	rq        *abi.Ring
	srq       *SRQ
}

// CreateQP makes a QP.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	if a.SendCQ == nil || a.RecvCQ == nil {
		return nil, invalid("CreateQP", "a QP needs a send and a receive CQ")
	}
	req := abi.CreateQP{PD: pd.handle, Type: uint32(a.Type), SendCQ: a.SendCQ.handle, RecvCQ: a.RecvCQ.handle,
		Cap: abi.FromCap(&a.Cap)}
	if a.SRQ != nil {
		req.SRQ = a.SRQ.handle
	}
	if a.SigAll {
		req.SigAll = 1
	}
	var r abi.CreateQPReply
	fds, err := pd.ctx.call(abi.OpCreateQP, req, &r)
	if err != nil {
		return nil, err
	}
	qp := &QP{ctx: pd.ctx, pd: pd, handle: r.Handle, Num: r.QPN, Type: a.Type, Cap: r.Cap.VHCA(), srq: a.SRQ, scq: a.SendCQ}
	if err := qp.attach(fds, &r); err != nil {
		pd.ctx.call(abi.OpDestroyQP, abi.Handle{Handle: r.Handle}, nil)
		return nil, err
	}
	a.SendCQ.addSendQP(qp)
	pd.ctx.objMu.Lock()
	pd.ctx.qps[qp.handle] = qp
	pd.ctx.objMu.Unlock()
	return qp, nil
}

func (qp *QP) attach(fds []int, r *abi.CreateQPReply) error {
	if len(fds) != 1 {
		closeFDs(fds)
		return invalid("CreateQP", "verbsd sent %d descriptors", len(fds))
	}
	mem, err := mapShared(fds[0], r.MapBytes)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		unix.Munmap(mem)
		return invalid("CreateQP", "%v", err)
	}
	if r.SQOffset >= uint64(len(mem)) || r.RQOffset >= uint64(len(mem)) {
		return fail(ErrRingCorrupt)
	}
	if qp.sq, err = abi.OpenRing(mem[r.SQOffset:], abi.KindSQ); err != nil {
		return fail(err)
	}
	if qp.srq == nil {
		if qp.rq, err = abi.OpenRing(mem[r.RQOffset:], abi.KindRQ); err != nil {
			return fail(err)
		}
	}
	qp.mem, qp.sqOff, qp.rqOff = mem, r.SQOffset, r.RQOffset
	return nil
}

func (qp *QP) unmap() {
	if qp.mem != nil {
		unix.Munmap(qp.mem)
		qp.mem = nil
	}
}

// State is the QP's state as this program last set it (QueryQP asks
// verbsd, which also knows of the moves to Error the transport makes).
func (qp *QP) State() QPState { return QPState(qp.state.Load()) }

// Modify sets the attributes mask names (ibv_modify_qp).
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	m := abi.ModifyQP{Handle: qp.handle, Mask: uint32(mask), Attr: abi.FromQPAttr(attr)}
	if _, err := qp.ctx.call(abi.OpModifyQP, m, nil); err != nil {
		return err
	}
	if mask&vhca.QPAttrState != 0 {
		qp.state.Store(uint32(attr.State))
	}
	return nil
}

// Query returns the QP's attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, error) {
	var r abi.QueryQPReply
	if _, err := qp.ctx.call(abi.OpQueryQP, abi.Handle{Handle: qp.handle}, &r); err != nil {
		return QPAttr{}, err
	}
	return r.Attr.VHCA(), nil
}

// AttachMcast attaches a UD QP to the multicast group whose MGID is gid
// and MLID lid (ibv_attach_mcast): it receives the datagrams sent to the
// group (an AH to the MLID, RemoteQPN 0xFFFFFF), each checked against its
// Q_Key and taking one of its receive WRs. A QP may join several groups;
// joining one again is no error. Native InfiniBand ports only: a RoCE port
// refuses with EOPNOTSUPP.
func (qp *QP) AttachMcast(gid [16]byte, lid uint16) error {
	_, err := qp.ctx.call(abi.OpAttachMcast, abi.Mcast{QP: qp.handle, LID: lid, GID: gid}, nil)
	return err
}

// DetachMcast detaches the QP from a group it joined (ibv_detach_mcast).
// A QP must leave its groups before Destroy (EBUSY otherwise); closing
// the context detaches them all.
func (qp *QP) DetachMcast(gid [16]byte, lid uint16) error {
	_, err := qp.ctx.call(abi.OpDetachMcast, abi.Mcast{QP: qp.handle, LID: lid, GID: gid}, nil)
	return err
}

// Destroy destroys the QP; its outstanding WRs vanish.
func (qp *QP) Destroy() error {
	if _, err := qp.ctx.call(abi.OpDestroyQP, abi.Handle{Handle: qp.handle}, nil); err != nil {
		return err
	}
	qp.ctx.objMu.Lock()
	delete(qp.ctx.qps, qp.handle)
	qp.ctx.objMu.Unlock()
	qp.scq.dropSendQP(qp)
	qp.sqMu.Lock()
	qp.rqMu.Lock()
	qp.unmap()
	qp.sq, qp.rq = nil, nil
	qp.rqMu.Unlock()
	qp.sqMu.Unlock()
	return nil
}

// PostSend posts send work requests (ibv_post_send). It returns how many
// it posted; on an error the rest are not posted.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	if qp.sq == nil {
		return 0, invalid("PostSend", "QP destroyed")
	}
	if qp.ctx.fatal.Load() {
		return 0, ErrDeviceFatal
	}
	switch qp.State() {
	case vhca.QPStateReset, vhca.QPStateInit, vhca.QPStateRTR:
		return 0, invalid("PostSend", "QP in state %s (RTS needed)", qp.State())
	}
	qp.sq.Consumed(qp.sendsDone.Load())
	free, err := qp.sq.Free(len(wrs))
	if err != nil {
		return 0, ErrRingCorrupt
	}
	n := 0
	for i := range wrs {
		if n == free {
			err = ErrQueueFull
			break
		}
		if err = qp.checkSend(&wrs[i]); err != nil {
			break
		}
		encodeSend(abi.SendWQE(qp.sq.Slot(n)), &wrs[i])
		n++
	}
	if n > 0 && qp.sq.Publish(n) {
		qp.ctx.ringBell()
	}
	return n, err
}

func (qp *QP) checkSend(wr *SendWR) error {
	switch wr.Opcode {
	case vhca.WRSend, vhca.WRSendWithImm:
	case vhca.WRRDMAWrite, vhca.WRRDMAWriteWithImm:
		if qp.Type == vhca.QPTypeUD {
			return invalid("PostSend", "RDMA WRITE on a UD QP")
		}
	case vhca.WRRDMARead, vhca.WRAtomicCmpSwap, vhca.WRAtomicFetchAdd, vhca.WRSendWithInv:
		if qp.Type != vhca.QPTypeRC {
			return invalid("PostSend", "opcode %d needs an RC QP", wr.Opcode)
		}
	default:
		return invalid("PostSend", "opcode %d not supported", wr.Opcode)
	}
	if wr.Flags&vhca.SendInline != 0 {
		if len(wr.InlineData) > qp.Cap.MaxInlineData {
			return invalid("PostSend", "%d bytes inline, the QP takes %d", len(wr.InlineData), qp.Cap.MaxInlineData)
		}
	} else if len(wr.SGL) > qp.Cap.MaxSendSGE {
		return invalid("PostSend", "%d SGEs, the QP takes %d", len(wr.SGL), qp.Cap.MaxSendSGE)
	}
	if qp.Type == vhca.QPTypeUD && wr.AH == nil {
		return invalid("PostSend", "UD send without an address handle")
	}
	return nil
}

func encodeSend(w abi.SendWQE, wr *SendWR) {
	// Field by field through the entry's layout (never the whole
	// struct: its last word is the ring's sequence word).
	f := w.Fields()
	f.WRID, f.Opcode, f.Flags, f.Imm = wr.WRID, uint8(wr.Opcode), uint16(wr.Flags), wr.Imm
	f.RemoteAddr, f.RKey, f.CompareAdd, f.Swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	var ah uint32
	if wr.AH != nil {
		ah = wr.AH.handle
	}
	f.AH, f.RemoteQPN, f.RemoteQKey = ah, wr.RemoteQPN, wr.RemoteQKey
	if wr.Flags&vhca.SendInline != 0 {
		f.NumSGE, f.InlineLen = 0, uint32(len(wr.InlineData))
		copy(w.Inline(), wr.InlineData)
		return
	}
	f.InlineLen, f.NumSGE = 0, uint8(len(wr.SGL))
	for i, s := range wr.SGL {
		w.SGE(i).Set(s.Addr, s.Length, s.LKey)
	}
}

// PostRecv posts receive work requests (ibv_post_recv).
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	if qp.srq != nil {
		return 0, invalid("PostRecv", "QP receives from an SRQ")
	}
	if qp.rq == nil {
		return 0, invalid("PostRecv", "QP destroyed")
	}
	if qp.State() == vhca.QPStateReset {
		return 0, invalid("PostRecv", "QP in state RESET")
	}
	return postRecv(qp.ctx, qp.rq, wrs, qp.Cap.MaxRecvSGE)
}

func postRecv(ctx *Context, ring *abi.Ring, wrs []RecvWR, maxSGE int) (int, error) {
	if ctx.fatal.Load() {
		return 0, ErrDeviceFatal
	}
	free, err := ring.Free(len(wrs))
	if err != nil {
		return 0, ErrRingCorrupt
	}
	n := 0
	for i := range wrs {
		if n == free {
			err = ErrQueueFull
			break
		}
		if len(wrs[i].SGL) > maxSGE {
			err = invalid("PostRecv", "%d SGEs, the queue takes %d", len(wrs[i].SGL), maxSGE)
			break
		}
		w := abi.RecvWQE(ring.Slot(n))
		w.SetWRID(wrs[i].WRID)
		w.SetNumSGE(len(wrs[i].SGL))
		for k, s := range wrs[i].SGL {
			w.SGE(k).Set(s.Addr, s.Length, s.LKey)
		}
		n++
	}
	if n > 0 && ring.Publish(n) {
		ctx.ringBell()
	}
	return n, err
}
