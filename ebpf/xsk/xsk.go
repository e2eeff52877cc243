// Package xsk is an AF_XDP socket: a UMEM and its fill, completion, RX
// and TX rings, mapped with the offsets the kernel gives, driven in
// batches without allocation.
//
// The socket is a vhca/link link: TxBuf, Send, Flush and Recv are its
// contract. Frames are received where the kernel (or the NIC, in
// zero-copy mode) wrote them, in the UMEM, and built for sending in the
// UMEM too; what moves on the fast path are 16-byte descriptors and
// 8-byte addresses through the rings, with one atomic store per ring
// per batch and at most one system call per batch, only when the
// kernel asks for it (XDP_RING_NEED_WAKEUP).
//
// The UMEM is split at Open: half its frames (at most a ring's worth)
// belong to the receive side and cycle fill ring → RX ring → fill ring
// (Recv gives each frame straight back); the others belong to the
// transmit side and cycle free list → TX ring → completion ring → free
// list. Neither side can starve the other.
//
// An XDP program must redirect frames into the socket (an XSKMAP entry
// at the socket's queue, holding FD) for Recv to see any; sending needs
// none.
//
// A Socket is driven by one goroutine at a time; Stats may be called
// from another while it runs, not while Close does.
package xsk

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/netnsrun"
)

// Config describes the socket.
type Config struct {
	Ifindex   int    // netdev index, in the namespace the socket is created in
	Queue     int    // RX queue id to bind
	Frames    int    // UMEM frames; 4096 if zero (power of two)
	FrameSize int    // bytes per frame; 4096 if zero (2048 or 4096)
	RingSize  int    // entries in each of the four rings; 2048 if zero (power of two)
	Netns     string // if not empty, a netns path (/var/run/netns/X): the socket is created and bound inside it
	ZeroCopy  bool   // try XDP_ZEROCOPY first; on failure fall back to XDP_COPY
}

// Stats are the kernel's counters for the socket (XDP_STATISTICS) and
// ours.
type Stats struct {
	RxDropped            uint64 // frames the kernel dropped for other reasons (too big for a frame, ...)
	RxInvalidDescs       uint64 // invalid fill ring addresses
	TxInvalidDescs       uint64 // invalid TX descriptors
	RxRingFull           uint64 // frames dropped because the RX ring was full
	RxFillRingEmptyDescs uint64 // times the kernel found the fill ring empty
	TxRingEmptyDescs     uint64 // times the kernel found the TX ring empty

	Sent          uint64     // frames published on the TX ring
	Received      uint64     // frames consumed from the RX ring
	TxKicks       uint64     // sendto system calls made by Flush
	RxKicks       uint64     // recvfrom system calls made by Recv
	KickRetries   uint64     // kicks answered EAGAIN, EBUSY, ENOBUFS or ENETDOWN: the next Flush tries again
	KickErrors    uint64     // kicks that failed otherwise
	LastKickErrno unix.Errno // the last of those failures
}

// Socket is an open, bound AF_XDP socket.
type Socket struct {
	fd       int
	queue    queueKey
	zc       bool
	closed   bool
	frame    uint64 // frame size
	baseMask uint64 // clears the offset within a frame from a UMEM address
	umem     []byte

	fill addrRing
	comp addrRing
	rx   descRing
	tx   descRing

	// free is the transmit side's frames not in the kernel's hands: a
	// stack, allocated at Open to hold all of them.
	free []uint64
	// held is whether TxBuf handed out heldBuf (at heldAddr), and Send
	// has not yet taken it.
	held     bool
	heldAddr uint64
	heldBuf  []byte
	// queued is how many TX descriptors Send wrote that Flush has not
	// published.
	queued uint32

	sent          atomic.Uint64
	received      atomic.Uint64
	txKicks       atomic.Uint64
	rxKicks       atomic.Uint64
	kickRetries   atomic.Uint64
	kickErrors    atomic.Uint64
	lastKickErrno atomic.Uint64
}

// ErrClosed is returned by Close and Stats on a closed socket.
var ErrClosed = errors.New("xsk: socket closed")

func (c *Config) check() error {
	if c.Frames == 0 {
		c.Frames = 4096
	}
	if c.FrameSize == 0 {
		c.FrameSize = 4096
	}
	if c.RingSize == 0 {
		c.RingSize = 2048
	}
	switch {
	case c.Ifindex <= 0:
		return fmt.Errorf("xsk: ifindex %d", c.Ifindex)
	case c.Queue < 0:
		return fmt.Errorf("xsk: queue %d", c.Queue)
	case c.Frames < 2 || c.Frames&(c.Frames-1) != 0 || c.Frames > 1<<20:
		return fmt.Errorf("xsk: %d frames (a power of two, 2 to 1<<20)", c.Frames)
	case c.FrameSize != 2048 && c.FrameSize != 4096:
		return fmt.Errorf("xsk: frame size %d (2048 or 4096)", c.FrameSize)
	case c.RingSize < 1 || c.RingSize&(c.RingSize-1) != 0 || c.RingSize > 1<<20:
		return fmt.Errorf("xsk: ring size %d (a power of two up to 1<<20)", c.RingSize)
	}
	return nil
}

// Open creates the socket, registers its UMEM, maps its rings, gives the
// receive side's frames to the fill ring and binds the socket to the
// queue, in Netns if given.
func Open(c Config) (*Socket, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.Netns == "" {
		return open(c)
	}
	// The socket belongs to the namespace of the thread that creates it,
	// and keeps it.
	var s *Socket
	err := netnsrun.Run(c.Netns, func() (err error) {
		s, err = open(c)
		return err
	})
	if err != nil && s == nil && !strings.HasPrefix(err.Error(), "xsk:") {
		err = fmt.Errorf("xsk: %w", err)
	}
	return s, err
}

func open(c Config) (*Socket, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xsk: socket: %w", err)
	}
	s := &Socket{
		fd:       fd,
		queue:    queueKey{netns: currentNetns(), ifindex: c.Ifindex, queue: c.Queue},
		frame:    uint64(c.FrameSize),
		baseMask: ^uint64(c.FrameSize - 1),
	}
	if err := s.setup(c); err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

func (s *Socket) setup(c Config) error {
	n := uint32(c.RingSize)
	umem, err := unix.Mmap(-1, 0, c.Frames*c.FrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("xsk: mmap UMEM of %d frames of %d bytes: %w", c.Frames, c.FrameSize, err)
	}
	s.umem = umem
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))),
		Len:  uint64(len(umem)),
		Size: uint32(c.FrameSize),
		// No headroom, no flags, no TX metadata: frames start at the
		// chunk's start on TX, and at XDP_PACKET_HEADROOM on RX, where
		// the kernel puts them.
	}
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		hint := ""
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
			hint = " (RLIMIT_MEMLOCK without CAP_IPC_LOCK?)"
		}
		return fmt.Errorf("xsk: XDP_UMEM_REG %d bytes: %w%s", len(umem), err, hint)
	}
	for _, o := range []struct {
		opt  int
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, "fill"},
		{unix.XDP_UMEM_COMPLETION_RING, "completion"},
		{unix.XDP_RX_RING, "RX"},
		{unix.XDP_TX_RING, "TX"},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, o.opt, c.RingSize); err != nil {
			return fmt.Errorf("xsk: %s ring of %d entries: %w", o.name, c.RingSize, err)
		}
	}

	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return fmt.Errorf("xsk: XDP_MMAP_OFFSETS: %w", e)
	}
	if size != uint32(unsafe.Sizeof(off)) {
		// Before 5.4 the offsets had no flags word, and no need_wakeup.
		return fmt.Errorf("xsk: XDP_MMAP_OFFSETS: %d bytes, not %d: kernel without ring flags", size, unsafe.Sizeof(off))
	}
	if s.fill, err = mapAddrRing(s.fd, "fill", unix.XDP_UMEM_PGOFF_FILL_RING, &off.Fr, n); err != nil {
		return err
	}
	if s.comp, err = mapAddrRing(s.fd, "completion", unix.XDP_UMEM_PGOFF_COMPLETION_RING, &off.Cr, n); err != nil {
		return err
	}
	if s.rx, err = mapDescRing(s.fd, "RX", unix.XDP_PGOFF_RX_RING, &off.Rx, n); err != nil {
		return err
	}
	if s.tx, err = mapDescRing(s.fd, "TX", unix.XDP_PGOFF_TX_RING, &off.Tx, n); err != nil {
		return err
	}

	// Half the frames receive, but no more than the fill ring holds: the
	// receive side's frames are then always either in the kernel's hands
	// or on their way back, and Recv always finds room to return them.
	rxFrames := min(c.Frames/2, c.RingSize)
	for i := range rxFrames {
		s.fill.addrs[s.fill.prod&s.fill.mask] = uint64(i) * s.frame
		s.fill.prod++
	}
	s.fill.publishProducer()
	s.free = make([]uint64, 0, c.Frames-rxFrames)
	for i := c.Frames - 1; i >= rxFrames; i-- {
		s.free = append(s.free, uint64(i)*s.frame)
	}

	if err := s.bind(c); err != nil {
		return err
	}
	var opts uint32
	size = 4
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_OPTIONS,
		uintptr(unsafe.Pointer(&opts)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return fmt.Errorf("xsk: XDP_OPTIONS: %w", e)
	}
	s.zc = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	if !s.zc && c.RingSize >= 32 {
		// In copy mode a kick transmits at most max_tx_budget frames (32
		// by default) and leaves the rest to the next kick; let one kick
		// take the whole ring. Kernels without the option (ENOPROTOOPT)
		// keep 32, which Flush copes with: the next Flush kicks again
		// while the kernel has descriptors left.
		unix.SetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, c.RingSize)
	}
	return nil
}

func (s *Socket) bind(c Config) error {
	var deadline time.Time
	for pause := time.Millisecond; ; pause = min(2*pause, 10*time.Millisecond) {
		err, zcErr := s.tryBind(c)
		if err == nil {
			// Whatever closed on this queue is gone: a socket that
			// finds it busy from now on finds a live one.
			released.forget(s.queue)
			return nil
		}
		if errors.Is(err, unix.EBUSY) {
			if deadline.IsZero() {
				deadline = released.until(s.queue)
			}
			if time.Now().Before(deadline) {
				time.Sleep(pause)
				continue
			}
		}
		hint := ""
		switch {
		case errors.Is(err, unix.EBUSY):
			hint = " (another AF_XDP socket on this queue?)"
		case errors.Is(err, unix.ENODEV):
			hint = " (no such netdev in the socket's netns)"
		case errors.Is(err, unix.EINVAL):
			hint = " (queue beyond the netdev's queues?)"
		}
		if zcErr != nil {
			return fmt.Errorf("xsk: bind ifindex %d queue %d: %w%s (zero-copy: %v)", c.Ifindex, c.Queue, err, hint, zcErr)
		}
		return fmt.Errorf("xsk: bind ifindex %d queue %d: %w%s", c.Ifindex, c.Queue, err, hint)
	}
}

// tryBind binds in zero-copy mode if asked and the netdev can, else in
// copy mode. A failed bind leaves the socket unbound and its rings as
// they were, so it can be tried again.
func (s *Socket) tryBind(c Config) (err, zcErr error) {
	sa := unix.SockaddrXDP{
		Flags:   unix.XDP_USE_NEED_WAKEUP | unix.XDP_COPY,
		Ifindex: uint32(c.Ifindex),
		QueueID: uint32(c.Queue),
	}
	if c.ZeroCopy {
		zc := sa
		zc.Flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_ZEROCOPY
		zcErr = unix.Bind(s.fd, &zc)
		if zcErr == nil {
			return nil, nil
		}
	}
	return unix.Bind(s.fd, &sa), zcErr
}

// queueKey names a netdev queue across namespaces.
type queueKey struct {
	netns   uint64 // inode of the namespace
	ifindex int
	queue   int
}

// currentNetns is the inode of the calling thread's network namespace,
// or 0 if it cannot be read (then queues are told apart by ifindex and
// queue alone).
func currentNetns() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) != nil {
		return 0
	}
	return st.Ino
}

// releaseWait bounds how long Open waits for a queue a socket of ours
// was closed on. The kernel frees a closed socket after an RCU grace
// period and then frees the queue from a work item: some 20 ms on an
// idle machine, measured, more under load. A Close followed by an Open
// of the same queue, a link restarting, is common; a queue busy with a
// live socket is an error, reported without waiting.
const releaseWait = time.Second

// released remembers when sockets of this process were closed, by
// queue, for releaseWait.
var released closings

type closings struct {
	mu sync.Mutex
	at map[queueKey]time.Time
}

func (r *closings) add(q queueKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for k, t := range r.at {
		if now.Sub(t) > releaseWait {
			delete(r.at, k)
		}
	}
	if r.at == nil {
		r.at = make(map[queueKey]time.Time)
	}
	r.at[q] = now
}

func (r *closings) forget(q queueKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, q)
}

// until is when a bind that finds q busy should give up.
func (r *closings) until(q queueKey) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.at[q]
	if !ok {
		return time.Now()
	}
	return t.Add(releaseWait)
}

func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0); e != 0 {
		return e
	}
	return nil
}

// FD is the socket's file descriptor: for the XSKMAP, and for poll.
func (s *Socket) FD() int { return s.fd }

// ZeroCopy reports whether the socket is bound in zero-copy mode (else
// it is in copy mode).
func (s *Socket) ZeroCopy() bool { return s.zc }

// MaxFrame is the largest frame TxBuf can hold: a UMEM frame (the
// netdev's MTU may allow less). Received frames are smaller by the
// XDP_PACKET_HEADROOM (256 bytes) the kernel leaves before them.
func (s *Socket) MaxFrame() int { return int(s.frame) }

// TxBuf is a free UMEM frame to build the next frame in, or nil while
// no frame or no TX slot is free, even after taking back the frames the
// kernel completed; Flush then lets the kernel make progress. Until Send
// takes it, TxBuf returns the same buffer.
func (s *Socket) TxBuf() []byte {
	if s.held {
		return s.heldBuf
	}
	if s.tx.free(1) == 0 {
		return nil
	}
	if len(s.free) == 0 {
		s.reclaim()
		if len(s.free) == 0 {
			return nil
		}
	}
	last := len(s.free) - 1
	s.heldAddr = s.free[last]
	s.free = s.free[:last]
	s.held = true
	s.heldBuf = s.umem[s.heldAddr : s.heldAddr+s.frame : s.heldAddr+s.frame]
	return s.heldBuf
}

// Send queues the first n bytes of the buffer TxBuf returned last as a
// TX descriptor, which Flush publishes. Send without TxBuf, or of more
// than the buffer, is a bug of the caller's and panics.
func (s *Socket) Send(n int) {
	if !s.held {
		panic("xsk: Send without TxBuf")
	}
	if n < 0 || uint64(n) > s.frame {
		panic(fmt.Sprintf("xsk: Send(%d) of a %d-byte frame", n, s.frame))
	}
	s.held = false
	if n == 0 {
		// The kernel would count an empty descriptor invalid; keep the
		// frame instead.
		s.free = append(s.free, s.heldAddr)
		return
	}
	// TxBuf made sure of the slot, and nothing produced on the ring
	// since.
	d := &s.tx.descs[s.tx.prod&s.tx.mask]
	d.Addr = s.heldAddr
	d.Len = uint32(n)
	d.Options = 0
	s.tx.prod++
	s.queued++
}

// Flush publishes what Send queued, kicks the kernel if it asked for it
// and still has descriptors to take (in copy mode it always asks: the
// kick is what transmits), and takes back the frames it completed.
func (s *Socket) Flush() {
	if s.queued != 0 {
		s.tx.publishProducer()
		s.sent.Add(uint64(s.queued))
		s.queued = 0
	}
	// Kick also when nothing new was queued but an earlier kick left
	// descriptors behind (EAGAIN: budget or completion ring exhausted).
	if s.tx.free(s.tx.size) != s.tx.size && s.tx.needWakeup() {
		s.kick(unix.SYS_SENDTO, &s.txKicks)
	}
	s.reclaim()
}

// kick makes the non-blocking system call that wakes the kernel up for
// a ring, and counts its outcome; a kick that did not get through is
// retried by the next Flush or Recv, since the ring still needs it.
func (s *Socket) kick(trap uintptr, count *atomic.Uint64) {
	count.Add(1)
	_, _, e := unix.Syscall6(trap, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0:
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN:
		s.kickRetries.Add(1)
	default:
		s.kickErrors.Add(1)
		s.lastKickErrno.Store(uint64(e))
	}
}

// reclaim moves the frames on the completion ring to the free list.
func (s *Socket) reclaim() {
	n := s.comp.ready(s.comp.size)
	if n == 0 {
		return
	}
	// The kernel completes only frames we sent, so they fit; the bound
	// is against a kernel that does otherwise.
	n = min(n, uint32(cap(s.free)-len(s.free)))
	for range n {
		s.free = append(s.free, s.comp.addrs[s.comp.cons&s.comp.mask])
		s.comp.cons++
	}
	s.comp.publishConsumer()
}

// Recv calls fn for each received frame, at most max of them, and
// returns how many; the frame is valid during the call only (its UMEM
// frame goes back to the fill ring) and segment is nil. Both indices
// are published once for the batch.
func (s *Socket) Recv(max int, fn func(frame, segment []byte)) int {
	if max <= 0 {
		return 0
	}
	n := s.rx.ready(uint32(max))
	n = min(n, uint32(max))
	if n == 0 {
		// A zero-copy driver that ran out of fill entries waits for a
		// wake-up, and there is nothing to receive until it gets one.
		if s.fill.needWakeup() {
			s.kick(unix.SYS_RECVFROM, &s.rxKicks)
		}
		return 0
	}
	// The receive side's frames never outnumber the fill ring's entries
	// (Open), so this is n; the bound guards the ring regardless.
	n = min(n, s.fill.free(n))
	for range n {
		d := &s.rx.descs[s.rx.cons&s.rx.mask]
		addr, l := d.Addr, uint64(d.Len)
		s.rx.cons++
		fn(s.umem[addr:addr+l:addr+l], nil)
		// In aligned mode the kernel takes any address within a frame;
		// give it the frame's start, as at Open.
		s.fill.addrs[s.fill.prod&s.fill.mask] = addr & s.baseMask
		s.fill.prod++
	}
	s.rx.publishConsumer()
	s.fill.publishProducer()
	s.received.Add(uint64(n))
	if s.fill.needWakeup() {
		s.kick(unix.SYS_RECVFROM, &s.rxKicks)
	}
	return int(n)
}

// Pending is how many received frames wait on the RX ring, without a
// system call.
func (s *Socket) Pending() int {
	return int(s.rx.ready(s.rx.size))
}

// Stats reads the kernel's counters and ours.
func (s *Socket) Stats() (Stats, error) {
	st := Stats{
		Sent:          s.sent.Load(),
		Received:      s.received.Load(),
		TxKicks:       s.txKicks.Load(),
		RxKicks:       s.rxKicks.Load(),
		KickRetries:   s.kickRetries.Load(),
		KickErrors:    s.kickErrors.Load(),
		LastKickErrno: unix.Errno(s.lastKickErrno.Load()),
	}
	if s.closed {
		return st, ErrClosed
	}
	var k unix.XDPStatistics
	size := uint32(unsafe.Sizeof(k))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&k)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return st, fmt.Errorf("xsk: XDP_STATISTICS: %w", e)
	}
	// A kernel older than 5.9 fills the first three only (and counts a
	// full RX ring as dropped).
	st.RxDropped = k.Rx_dropped
	st.RxInvalidDescs = k.Rx_invalid_descs
	st.TxInvalidDescs = k.Tx_invalid_descs
	st.RxRingFull = k.Rx_ring_full
	st.RxFillRingEmptyDescs = k.Rx_fill_ring_empty_descs
	st.TxRingEmptyDescs = k.Tx_ring_empty_descs
	return st, nil
}

// Close unmaps the rings, closes the socket and unmaps the UMEM. The
// queue is free for another socket once the kernel released this one:
// that takes both the close and the unmapping of all four rings, which
// hold references to the socket, and then some milliseconds, which an
// Open of the same queue in this process waits for (releaseWait). The
// Socket must not be used after.
func (s *Socket) Close() error {
	if s.closed {
		return ErrClosed
	}
	err := s.release()
	released.add(s.queue)
	return err
}

// release undoes whatever Open did, in the order that lets the kernel
// free the socket: mappings of the rings, descriptor, then the UMEM
// (the kernel holds its pages pinned until the socket is freed, so
// unmapping it first would be harmless, but it is the last user).
func (s *Socket) release() error {
	s.closed = true
	errs := []error{s.fill.unmap(), s.comp.unmap(), s.rx.unmap(), s.tx.unmap()}
	// Clear the entry slices with the headers, so that a use after
	// Close panics on a nil pointer instead of faulting on unmapped
	// memory.
	s.fill.addrs, s.comp.addrs, s.rx.descs, s.tx.descs = nil, nil, nil, nil
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	if s.umem != nil {
		errs = append(errs, unix.Munmap(s.umem))
		s.umem, s.heldBuf, s.free = nil, nil, nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xsk: close: %w", err)
	}
	return nil
}
