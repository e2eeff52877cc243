package client

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// WC is a work completion (ibv_wc).
type WC = vhca.WC

// CompChannel is a completion channel (ibv_comp_channel): an eventfd
// verbsd signals when an armed CQ of the channel gets a completion.
type CompChannel struct {
	ctx    *Context
	handle uint32
	f      *os.File
	mu     sync.Mutex
	cqs    []*CQ
	buf    [8]byte
}

// CreateCompChannel makes a completion channel.
func (ctx *Context) CreateCompChannel() (*CompChannel, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, &Error{Op: "CreateCompChannel", Errno: errnoOf(err), Msg: err.Error()}
	}
	var h abi.Handle
	if _, err := ctx.call(abi.OpCreateCompChannel, nil, &h, fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &CompChannel{ctx: ctx, handle: h.Handle, f: os.NewFile(uintptr(fd), "softib-comp-channel")}, nil
}

// Destroy destroys the channel, which no CQ may use any more.
func (ch *CompChannel) Destroy() error {
	if _, err := ch.ctx.call(abi.OpDestroyCompChannel, abi.Handle{Handle: ch.handle}, nil); err != nil {
		return err
	}
	return ch.f.Close()
}

// GetEvent waits until an armed CQ of the channel has a completion, and
// returns it (ibv_get_cq_event). Arm the CQ again (ReqNotify) to get the
// next event. It ends early with the context's error.
func (ch *CompChannel) GetEvent(c context.Context) (*CQ, error) {
	ch.f.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(c, func() { ch.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		ch.mu.Lock()
		for _, cq := range ch.cqs {
			if n := cq.ring.EventCount(); n != cq.eventsSeen {
				cq.eventsSeen++
				ch.mu.Unlock()
				return cq, nil
			}
		}
		ch.mu.Unlock()
		if err := c.Err(); err != nil {
			return nil, err
		}
		if ch.ctx.fatal.Load() {
			return nil, ErrDeviceFatal
		}
		if _, err := ch.f.Read(ch.buf[:]); err != nil && c.Err() != nil {
			return nil, c.Err()
		}
	}
}

// CQ is a completion queue (ibv_cq). Poll reads completions straight
// from shared memory: no system call, no allocation.
type CQ struct {
	ctx        *Context
	handle     uint32
	CQE        int // capacity
	mem        []byte
	ring       *abi.Ring
	ch         *CompChannel
	mu         sync.Mutex
	eventsSeen uint32
	// The QPs whose send CQ this is, by number, and the one the last
	// send completion was of (sendCompleted).
	sendQPs  map[uint32]*QP
	lastSend *QP
}

// CreateCQ makes a CQ of at least cqe entries, its events on ch (nil:
// none).
func (ctx *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	req := abi.CreateCQ{CQE: uint32(max(cqe, 0))}
	if ch != nil {
		req.Channel = ch.handle
	}
	var r abi.CreateCQReply
	fds, err := ctx.call(abi.OpCreateCQ, req, &r)
	if err != nil {
		return nil, err
	}
	cq := &CQ{ctx: ctx, handle: r.Handle, CQE: int(r.CQE), ch: ch}
	if err := cq.attach(fds, r.RingBytes); err != nil {
		ctx.call(abi.OpDestroyCQ, abi.Handle{Handle: r.Handle}, nil)
		return nil, err
	}
	ctx.objMu.Lock()
	ctx.cqs[cq.handle] = cq
	ctx.objMu.Unlock()
	if ch != nil {
		ch.mu.Lock()
		ch.cqs = append(ch.cqs, cq)
		ch.mu.Unlock()
	}
	return cq, nil
}

func (cq *CQ) attach(fds []int, n uint64) error {
	if len(fds) != 1 {
		closeFDs(fds)
		return invalid("CreateCQ", "verbsd sent %d descriptors", len(fds))
	}
	mem, err := mapShared(fds[0], n)
	if err != nil {
		return err
	}
	ring, err := abi.OpenRing(mem, abi.KindCQ)
	if err != nil {
		unix.Munmap(mem)
		return invalid("CreateCQ", "%v", err)
	}
	cq.mem, cq.ring = mem, ring
	return nil
}

func (cq *CQ) unmap() {
	if cq.mem != nil {
		unix.Munmap(cq.mem)
		cq.mem = nil
	}
}

// Destroy destroys the CQ, which no QP may use any more.
func (cq *CQ) Destroy() error {
	if _, err := cq.ctx.call(abi.OpDestroyCQ, abi.Handle{Handle: cq.handle}, nil); err != nil {
		return err
	}
	cq.ctx.objMu.Lock()
	delete(cq.ctx.cqs, cq.handle)
	cq.ctx.objMu.Unlock()
	if ch := cq.ch; ch != nil {
		ch.mu.Lock()
		for i, x := range ch.cqs {
			if x == cq {
				ch.cqs = append(ch.cqs[:i], ch.cqs[i+1:]...)
				break
			}
		}
		ch.mu.Unlock()
	}
	cq.mu.Lock()
	cq.unmap()
	cq.ring = nil
	cq.mu.Unlock()
	return nil
}

// Poll moves up to len(wc) completions, oldest first, into wc
// (ibv_poll_cq).
func (cq *CQ) Poll(wc []WC) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return 0, invalid("PollCQ", "CQ destroyed")
	}
	n := cq.ring.Available(len(wc))
	for i := range n {
		abi.CQE(cq.ring.Peek(i)).WC(&wc[i])
		if wc[i].Opcode&vhca.WCRecv == 0 {
			cq.sendCompleted(wc[i].QPNum)
		}
	}
	if n > 0 {
		cq.ring.Consume(n)
	}
	return n, nil
}

// sendCompleted counts a send completion of QP qpn. verbsd consumes a
// send WQE's SQ entry before it writes a completion of it (abi: send
// completions count consumed entries), so the QP's next PostSend knows
// that room is there without loading the SQ's consumer index: a trip
// between cores at every post of a program that posts as soon as its
// send completes. A completion of a QP destroyed is of no QP here.
func (cq *CQ) sendCompleted(qpn uint32) {
	qp := cq.lastSend
	if qp == nil || qp.Num != qpn {
		if qp = cq.sendQPs[qpn]; qp == nil {
			return
		}
		cq.lastSend = qp
	}
	// Every writer holds cq.mu: no read-modify-write needs a lock.
	qp.sendsDone.Store(qp.sendsDone.Load() + 1)
}

// addSendQP and dropSendQP keep the QPs whose send CQ this is.
func (cq *CQ) addSendQP(qp *QP) {
	cq.mu.Lock()
	if cq.sendQPs == nil {
		cq.sendQPs = map[uint32]*QP{}
	}
	cq.sendQPs[qp.Num] = qp
	cq.mu.Unlock()
}

func (cq *CQ) dropSendQP(qp *QP) {
	cq.mu.Lock()
	delete(cq.sendQPs, qp.Num)
	if cq.lastSend == qp {
		cq.lastSend = nil
	}
	cq.mu.Unlock()
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion (with
// solicitedOnly, the next solicited or error completion) signals the
// CQ's completion channel once. No system call.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ch == nil {
		return invalid("ReqNotifyCQ", "CQ has no completion channel")
	}
	if cq.ring == nil {
		return invalid("ReqNotifyCQ", "CQ destroyed")
	}
	cq.ring.Arm(solicitedOnly)
	if cq.ctx.fatal.Load() {
		return ErrDeviceFatal
	}
	return nil
}
