package verbsd

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// Limits bound what one client may hold.
type Limits struct {
	QPs, CQs, MRs, SRQs, AHs, PDs int
	MappedBytes                   uint64 // memory registered, summed over MRs
}

// DefaultLimits are generous for a program and small for a runaway.
func DefaultLimits() Limits {
	return Limits{QPs: 4096, CQs: 4096, MRs: 65536, SRQs: 1024, AHs: 65536, PDs: 1024, MappedBytes: 64 << 30}
}

// session is one client connection and everything it made. Its maps are
// the engine goroutine's: only functions run by engine.do touch them.
type session struct {
	srv  *Server
	conn *abi.Conn
	pid  int32
	uid  uint32
	h    *hca // the device the client opened, nil before OpenDevice

	sendMu sync.Mutex // replies (session goroutine) and events (engine)
	evq    chan abi.Event

	next   uint32
	pds    map[uint32]*vhca.PD
	mrs    map[uint32]*mrObj
	cqs    map[uint32]*cqRing
	qps    map[uint32]*qpRings
	srqs   map[uint32]*srqRing
	ahs    map[uint32]*vhca.AH
	chans  map[uint32]*compChannel
	mapped uint64
	gone   bool
}

type mrObj struct {
	mr    *vhca.MR
	bytes uint64
}

func newSession(srv *Server, c *abi.Conn) *session {
	return &session{
		srv: srv, conn: c, evq: make(chan abi.Event, 256),
		pds: map[uint32]*vhca.PD{}, mrs: map[uint32]*mrObj{}, cqs: map[uint32]*cqRing{},
		qps: map[uint32]*qpRings{}, srqs: map[uint32]*srqRing{}, ahs: map[uint32]*vhca.AH{},
		chans: map[uint32]*compChannel{},
	}
}

func (s *session) handle() uint32 {
	s.next++
	return s.next
}

// verbError is a refusal: the errno the reply carries and what was wrong.
type verbError struct {
	errno unix.Errno
	msg   string
}

func (e *verbError) Error() string { return e.msg }

func refuse(errno unix.Errno, format string, args ...any) error {
	return &verbError{errno, fmt.Sprintf(format, args...)}
}

// errnoOf maps an error of the engine to the errno libibverbs would give.
func errnoOf(err error) (unix.Errno, string) {
	var ve *verbError
	var le *vhca.LimitError
	switch {
	case errors.As(err, &ve):
		return ve.errno, ve.msg
	case errors.As(err, &le), errors.Is(err, vhca.ErrQueueFull), errors.Is(err, vhca.ErrKeysExhausted):
		return unix.ENOMEM, err.Error()
	case errors.Is(err, vhca.ErrBusy):
		return unix.EBUSY, err.Error()
	case errors.Is(err, vhca.ErrNotSupported):
		return unix.EOPNOTSUPP, err.Error()
	case errors.Is(err, errStopped):
		return unix.ESHUTDOWN, err.Error()
	case errors.Is(err, errResolving):
		return unix.EHOSTUNREACH, "no reply from the destination to ARP or neighbour discovery"
	}
	return unix.EINVAL, err.Error()
}

// sendEvent queues an asynchronous event to the client. It never blocks
// the engine: a client that does not read its socket loses events, not
// the daemon.
func (s *session) sendEvent(ev abi.Event) {
	select {
	case s.evq <- ev:
	default:
		slog.Warn("event dropped: client not reading", "pid", s.pid, "type", ev.Type)
	}
}

// reply is what a verb returns: a body, descriptors to pass (closed after
// sending), or an error.
type reply struct {
	body any
	fds  []int
	err  error
	// after runs once the reply is sent (closing what was passed).
	after func()
}

// destroyAll releases everything the client made, in the order that
// leaves no object in use: QPs, SRQs, AHs, MRs, CQs, channels, PDs. It
// runs on the engine goroutine when the client goes away.
func (s *session) destroyAll(e *engine) {
	s.gone = true
	if s.h == nil {
		return
	}
	dev := s.h.dev
	for k, r := range s.qps {
		// A QP still in multicast groups is not destroyed on request;
		// one whose client is gone leaves them first, as the kernel's
		// clean-up of a process does.
		dev.DetachAllMcast(r.qp)
		s.dropQP(e, r)
		delete(s.qps, k)
	}
	for k, r := range s.srqs {
		s.dropSRQ(e, r)
		delete(s.srqs, k)
	}
	for k, ah := range s.ahs {
		dev.DestroyAH(ah)
		delete(s.ahs, k)
	}
	for k, m := range s.mrs {
		dev.DeregMR(m.mr)
		s.mapped -= m.bytes
		delete(s.mrs, k)
	}
	for k, c := range s.cqs {
		s.dropCQ(e, c)
		delete(s.cqs, k)
	}
	for k, ch := range s.chans {
		unix.Close(ch.fd)
		delete(s.chans, k)
	}
	for k, pd := range s.pds {
		dev.DeallocPD(pd)
		delete(s.pds, k)
	}
}

func (s *session) dropQP(e *engine, r *qpRings) error {
	if err := s.h.dev.DestroyQP(r.qp); err != nil {
		return err
	}
	delete(e.qpOf, r.qp)
	s.h.dropQP(r)
	r.mem.Release()
	return nil
}

func (s *session) dropSRQ(e *engine, r *srqRing) error {
	if err := s.h.dev.DestroySRQ(r.srq); err != nil {
		return err
	}
	delete(e.srqOf, r.srq)
	s.h.srqs = remove(s.h.srqs, r)
	r.mem.Release()
	return nil
}

func (s *session) dropCQ(e *engine, c *cqRing) error {
	if err := s.h.dev.DestroyCQ(c.cq); err != nil {
		return err
	}
	delete(e.cqOf, c.cq)
	s.h.dropCQ(c)
	if c.ch != nil {
		c.ch.users--
	}
	c.mem.Release()
	return nil
}

func remove[T comparable](list []T, x T) []T {
	for i, y := range list {
		if y == x {
			last := len(list) - 1
			list[i] = list[last]
			var zero T
			list[last] = zero
			return list[:last]
		}
	}
	return list
}
