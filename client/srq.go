package client

import (
	"sync"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// SRQAttr sizes an SRQ and arms its limit (ibv_srq_attr).
type SRQAttr = vhca.SRQAttr

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	ctx    *Context
	handle uint32
	Attr   SRQAttr
	mem    []byte
	mu     sync.Mutex
	ring   *abi.Ring
}

// CreateSRQ makes a shared receive queue.
func (pd *PD) CreateSRQ(a SRQAttr) (*SRQ, error) {
	var r abi.CreateSRQReply
	req := abi.CreateSRQ{PD: pd.handle, MaxWR: uint32(max(a.MaxWR, 0)), MaxSGE: uint32(max(a.MaxSGE, 0)), Limit: uint32(max(a.Limit, 0))}
	fds, err := pd.ctx.call(abi.OpCreateSRQ, req, &r)
	if err != nil {
		return nil, err
	}
	s := &SRQ{ctx: pd.ctx, handle: r.Handle, Attr: SRQAttr{MaxWR: int(r.MaxWR), MaxSGE: int(r.MaxSGE), Limit: a.Limit}}
	if len(fds) != 1 {
		closeFDs(fds)
		pd.ctx.call(abi.OpDestroySRQ, abi.Handle{Handle: r.Handle}, nil)
		return nil, invalid("CreateSRQ", "verbsd sent %d descriptors", len(fds))
	}
	mem, err := mapShared(fds[0], r.RingBytes)
	if err == nil {
		s.ring, err = abi.OpenRing(mem, abi.KindSRQ)
		if err != nil {
			unix.Munmap(mem)
		}
	}
	if err != nil {
		pd.ctx.call(abi.OpDestroySRQ, abi.Handle{Handle: r.Handle}, nil)
		return nil, invalid("CreateSRQ", "%v", err)
	}
	s.mem = mem
	pd.ctx.objMu.Lock()
	pd.ctx.srqs[s.handle] = s
	pd.ctx.objMu.Unlock()
	return s, nil
}

func (s *SRQ) unmap() {
	if s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

// PostRecv posts receive work requests to the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ring == nil {
		return 0, invalid("PostSRQRecv", "SRQ destroyed")
	}
	return postRecv(s.ctx, s.ring, wrs, s.Attr.MaxSGE)
}

// Modify arms the SRQ's limit (ibv_modify_srq with IBV_SRQ_LIMIT): when
// fewer WRs than limit remain, an EventSRQLimitReached comes, once.
func (s *SRQ) Modify(limit int) error {
	_, err := s.ctx.call(abi.OpModifySRQ, abi.ModifySRQ{Handle: s.handle, Limit: uint32(max(limit, 0))}, nil)
	return err
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() (SRQAttr, error) {
	var r abi.CreateSRQ
	if _, err := s.ctx.call(abi.OpQuerySRQ, abi.Handle{Handle: s.handle}, &r); err != nil {
		return SRQAttr{}, err
	}
	return SRQAttr{MaxWR: int(r.MaxWR), MaxSGE: int(r.MaxSGE), Limit: int(r.Limit)}, nil
}

// Destroy destroys the SRQ, which no QP may use any more.
func (s *SRQ) Destroy() error {
	if _, err := s.ctx.call(abi.OpDestroySRQ, abi.Handle{Handle: s.handle}, nil); err != nil {
		return err
	}
	s.ctx.objMu.Lock()
	delete(s.ctx.srqs, s.handle)
	s.ctx.objMu.Unlock()
	s.mu.Lock()
	s.unmap()
	s.ring = nil
	s.mu.Unlock()
	return nil
}
