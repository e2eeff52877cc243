package verbsd

import (
	"errors"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/softib/softib/vhca"
	"github.com/softib/softib/vhca/wire"
	"golang.org/x/sys/unix"
)

// engine is the one goroutine that owns every hosted vHCA: it runs the
// verbs the control plane hands it, moves work requests from the clients'
// rings into the devices and completions back, carries frames between
// ports, and fires the timers. A vhca.Device is not safe for concurrent
// use; having one owner is also what makes destroying an object safe
// against a packet in flight.
//
// It polls while there is work and for a short while after (a client that
// posts again soon is served without a wake-up), then sleeps on the
// doorbell after telling every ring it consumes that it is asleep.
type engine struct {
	hcas   []*hca
	todo   chan func()
	bell   int // eventfd: clients' doorbell, control requests, shutdown
	start  time.Time
	clock  *clock // time since start, for the engine goroutine
	spin   time.Duration
	cores  *cores
	cpus   *unix.CPUSet // the engine thread's CPUs; nil: any
	now    vhca.Time
	quit   bool
	rounds uint32

	frame   []byte
	wqe     []byte
	wr      [1]vhca.SendWR
	sgl     []vhca.SGE
	rwr     [1]vhca.RecvWR
	rsgl    []vhca.SGE
	events  [64]vhca.Event
	rx      func(frame, segment []byte)
	rxTAP   func(frame, segment []byte)
	rxCable func(pkt []byte) bool
	rxHCA   *hca

	cqOf  map[*vhca.CQ]*cqRing
	qpOf  map[*vhca.QP]*qpRings
	srqOf map[*vhca.SRQ]*srqRing

	bellBuf [8]byte
	pollFDs []unix.PollFd
	asleep  atomic.Bool // in sleep: a link's reader must ring the doorbell
	stopped chan struct{}
	// async delivers a device's asynchronous events to the sessions.
	async func(h *hca, ev vhca.Event)
}

// maxFrame is the largest frame a port builds: a 4096-byte payload and
// every header a RoCEv2/IPv6 packet can carry.
const maxFrame = 4096 + 256

func newEngine(hcas []*hca, spin time.Duration) (*engine, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	e := &engine{
		hcas: hcas, todo: make(chan func(), 64), bell: fd,
		start: start, clock: newClock(start), spin: spin, frame: make([]byte, maxFrame), wqe: make([]byte, 1<<16),
		sgl: make([]vhca.SGE, 0, 256), rsgl: make([]vhca.SGE, 0, 256),
		cqOf: map[*vhca.CQ]*cqRing{}, qpOf: map[*vhca.QP]*qpRings{}, srqOf: map[*vhca.SRQ]*srqRing{},
		stopped: make(chan struct{}), cores: openCores(),
	}
	for _, h := range hcas {
		h := h
		h.dev.Completed = func() { e.publishCQs(h) }
		h.dev.FetchRecv = e.fetchRecv
		// transmit turns around every frame to the port's own MAC.
		h.dev.LoopsOwn = true
	}
	e.rx = func(f, seg []byte) { e.rxHCA.dev.ReceiveSegment(e.now, 1, f, seg) }
	e.rxCable = func(pkt []byte) bool {
		e.rxHCA.dev.Receive(e.now, 1, pkt)
		return true // consumed: the cable's buffer is free again
	}
	e.rxTAP = func(f, _ []byte) {
		h := e.rxHCA
		if len(f) < 14 || h.onARP(f) || h.onND(f) {
			return
		}
		// A port behind a bridge sees others' traffic: only its own
		// unicast frames go to the device.
		var dst wire.MAC
		copy(dst[:], f)
		if dst == h.mac {
			h.dev.Receive(e.now, 1, f)
		}
	}
	return e, nil
}

// bellFD is the doorbell's descriptor, to hand to clients.
func (e *engine) bellFD() int { return e.bell }

// ring wakes the engine (a write of 1 to the doorbell).
func (e *engine) ring() {
	one := [8]byte{1}
	unix.Write(e.bell, one[:])
}

var errStopped = errors.New("verbsd is shutting down")

// do runs f on the engine goroutine and waits for it.
func (e *engine) do(f func()) error {
	done := make(chan struct{})
	select {
	case e.todo <- func() { f(); close(done) }:
	case <-e.stopped:
		return errStopped
	}
	e.ring()
	select {
	case <-done:
		return nil
	case <-e.stopped:
		return errStopped
	}
}

// run is the engine goroutine. It returns when a control function sets
// quit.
//
// Polling, the engine has two manners. With a core to itself it spins:
// an empty round costs tens of nanoseconds, where a sched_yield costs a
// microsecond here, and that microsecond lands on every message's
// latency. On a host with fewer cores than busy threads (two clients
// polling their CQs and verbsd on two cores) it yields between rounds
// instead: clients that yield between their empty polls (client.Relax)
// and an engine that does take turns in microseconds. Which host it is
// on, the scheduler says (cores.toSpare), asked every coresEvery while
// polling, and a few answers in a row change the manner (pollManner). A
// yield that itself lasts more than contendedGap means a thread that
// does not yield holds the core: the engine then sleeps on its doorbell
// between rounds for a while, longer each time it recurs (contention),
// where a wake-up costs microseconds, not milliseconds. (manner.go)
func (e *engine) run() {
	defer close(e.stopped)
	runtime.LockOSThread()
	if e.cpus != nil {
		// This thread only (pid 0: the calling thread); it stays the
		// engine's until run returns.
		if err := unix.SchedSetaffinity(0, e.cpus); err != nil {
			// New checked them against verbsd's own: only a change of
			// its affinity since then gets here.
			slog.Error("engine thread not bound to its CPUs", "cpus", cpuList(e.cpus), "err", err)
		} else {
			slog.Info("engine thread bound", "cpus", cpuList(e.cpus))
		}
	}
	// Times are the monotonic clock's, since e.start, read through the
	// TSC where it can be (clock.go): the idle round reads it every
	// time, and so does every busy one.
	since := e.clock.now
	last := since()
	var asked time.Duration
	var manner pollManner
	var contended contention
	for !e.quit {
		now := since()
		e.now = vhca.Time(now)
		if e.step() {
			last = now
			continue
		}
		if now-last >= e.spin || contended.backingOff(now) {
			e.sleep()
			last = since()
			asked = 0 // the threads around may have changed
			manner.recount()
			continue
		}
		if asked == 0 || now-asked > coresEvery {
			manner.vote(e.cores.toSpare())
			asked = now
		}
		if manner.spin {
			continue
		}
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		contended.yielded(now, since())
	}
}

// tapBesideFastPath: how often a polling engine reads the TAP of a port
// whose RoCEv2 goes through AF_XDP. Only ARP and ND come that way, which
// wait a fraction of a millisecond gladly; a read each round would cost
// a system call (a microsecond) per round. A sleeping engine polls the
// TAP's descriptor too, so nothing waits longer than this.
const tapBesideFastPath = vhca.Time(100 * time.Microsecond)

// step does one round of everything and reports whether it found work.
func (e *engine) step() bool {
	work := 0
	// len first: a look at the channel's count, where a select takes
	// its lock path; control requests are rare.
	for drained := len(e.todo) == 0; !drained; {
		select {
		case f := <-e.todo:
			// The receives posted before the request go in first, as
			// the client ordered them (receive queues are looked at
			// lazily, below).
			e.pollRQs()
			f()
			work++
		default:
			drained = true
		}
	}
	for pass := 0; ; pass++ {
		wrote := false
		for _, h := range e.hcas {
			// The hot send rings, and every coldEvery rounds the cold
			// ones after them (a cold one with work turns hot: warm
			// moves a cold one already looked at into its place).
			watched := h.qpOrder.hot
			if pass == 0 && e.rounds%coldEvery == 0 {
				watched = len(h.sqWatch)
			}
			for i := range h.sqWatch[:watched] {
				if w := &h.sqWatch[i]; atomic.LoadUint32(w.word) == w.want {
					r := h.qps[i]
					work += e.pollSQ(r)
					w.word, w.want = r.sq.Watch()
					w.seen = e.rounds
					if i >= h.qpOrder.hot {
						h.qpOrder.warm(i, h.swapQPs)
					}
				}
			}
			for _, r := range h.srqs {
				work += e.pollSRQ(r)
			}
			if pass == 0 {
				if dl := h.dev.Deadline(); dl != 0 && dl <= e.now {
					h.dev.Advance(e.now)
					work++
				}
			}
			sent, frames := e.transmit(h)
			work += sent
			wrote = wrote || frames > 0 && h.tap != nil && (h.fast == nil || !h.fast.on)
		}
		// A write to a TAP is a system call of microseconds, in which
		// clients may have posted: send what they posted before the
		// reads (a ping-pong's answer then goes out ahead of them, and
		// its peer reads it with what came before in one batch).
		if !wrote || pass == 1 {
			break
		}
	}
	// Every port transmits before any receives: a frame one vHCA sent
	// through the host's bridges to another of this engine's is read in
	// the same round, whichever comes first in the list.
	for _, h := range e.hcas {
		e.rxHCA = h
		if h.pipe != nil {
			work += h.pipe.Recv(256, e.rx)
		}
		if h.tap != nil && (h.fast == nil || !h.fast.on || e.now >= h.tapNext) {
			work += h.tap.Recv(256, e.rxTAP)
			h.tapNext = e.now + tapBesideFastPath
		}
		if h.fast != nil {
			for _, s := range h.fast.socks {
				work += s.Recv(256, e.rxTAP)
			}
		}
		if h.cable != nil {
			work += h.cable.Recv(256, e.rxCable)
			h.syncPortState()
		}
	}
	// Segments in a pipe point into their sender's registered memory:
	// deliver them all before the next round's verbs could deregister it.
	for _, h := range e.hcas {
		for h.pipe != nil && h.pipe.Pending() > 0 {
			e.rxHCA = h
			work += h.pipe.Recv(1<<16, e.rx)
		}
	}
	// Receive queues are looked at every lookEvery rounds: a message
	// that needs a receive fetches it from the ring itself (fetchRecv).
	// A receive posted again after each message then costs no look at
	// its ring on the message's path, and a few come in one look. Not
	// in every idle round either: a look at a ring the client has just
	// written takes the engine off its other rings for a trip between
	// cores (150 ns and more when they are far apart).
	e.rounds++
	look := e.rounds%lookEvery == 0
	if look {
		work += e.pollRQs()
	}
	// A CQ's arm word too. A completion the device writes into the
	// client's ring itself (vhca.CQRing) does not look at it: one that
	// came after an arm this engine had not seen yet raises its event
	// here, within lookEvery rounds, coldEvery looks for a cold CQ
	// (fillCQ fires for an arm that finds completions unconsumed), and
	// the engine does not sleep on an arm unseen (sleep).
	for _, h := range e.hcas {
		if look {
			for i := 0; i < h.qpOrder.hot; i++ {
				if e.rounds-h.sqWatch[i].seen > coldAfter {
					h.qpOrder.cool(i, h.swapQPs)
					i-- // the QP moved into i is looked at next
				}
			}
			work += e.lookCQs(h)
		} else {
			work += e.publishCQs(h)
		}
		work += e.deliverEvents(h)
	}
	return work > 0
}

// lookCQs looks at the hot CQs, every coldEvery looks at the cold ones
// too, and at any other that took completions since the last look: at
// their arm words, and at the completions a full ring left in the
// device's CQ (fillCQ). A cold CQ with work is hot again: an arm, a
// completion moved, or one the device wrote into its ring itself (its
// producer index moved). A hot one idle for coldAfter rounds cools.
func (e *engine) lookCQs(h *hca) int {
	work := 0
	watched := h.cqOrder.hot
	if e.rounds%(lookEvery*coldEvery) == 0 {
		watched = len(h.cqs)
	}
	for i := range h.cqs[:watched] {
		c := h.cqs[i]
		n := e.fillCQ(c)
		work += n
		c.looked = e.rounds
		if p := c.ring.Produced(); n > 0 || p != c.produced {
			c.seen, c.produced = e.rounds, p
			if i >= h.cqOrder.hot {
				h.cqOrder.warm(i, h.swapCQs)
			}
		}
	}
	for _, cq := range h.dev.TakeCompleted() {
		if c, _ := cq.Ring.(*cqRing); c != nil && c.looked != e.rounds {
			work += e.fillCQ(c) // a cold CQ's, not looked at above
		}
	}
	for i := 0; i < h.cqOrder.hot; i++ {
		if e.rounds-h.cqs[i].seen > coldAfter {
			h.cqOrder.cool(i, h.swapCQs)
			i--
		}
	}
	return work
}

// lookEvery: how often a busy engine looks at what it need not watch
// every round: the receive rings and the CQs' arm words.
const lookEvery = 16

// pollRQs moves the receives published in every receive ring.
func (e *engine) pollRQs() int {
	work := 0
	for _, h := range e.hcas {
		for _, r := range h.qps {
			work += e.pollRQ(r, false)
		}
	}
	return work
}

// fetchRecv is the devices' FetchRecv: a message found qp's receive
// queue empty.
func (e *engine) fetchRecv(qp *vhca.QP) {
	if r := e.qpOf[qp]; r != nil {
		e.pollRQ(r, true)
	}
}

// transmit moves the device's ready frames to their port's destination:
// the device itself (loopback, as an HCA does in hardware), or the pipe.
// It reports the work done and, of it, the frames sent.
func (e *engine) transmit(h *hca) (sent, frames int) {
	fast := h.fast != nil && h.fast.on
	// The buffer a frame is built in is taken when one is needed and
	// kept until a frame fills it: a request that goes without a frame
	// leaves it free, and a device with nothing ready needs none.
	var buf []byte
	for sent < 256 && h.dev.Ready() {
		if buf == nil {
			buf = e.frame
			if h.pipe != nil {
				if buf = h.pipe.TxBuf(); buf == nil {
					break
				}
			}
			if fast {
				// Built in place in an AF_XDP frame; none free is the
				// link's back pressure.
				if buf = h.fast.tx().TxBuf(); buf == nil {
					break
				}
			}
			if h.cable != nil {
				// Built in place in the cable's queue; a full queue
				// (the credits hold it back) is the link's back
				// pressure.
				if buf = h.cable.TxBuf(); buf == nil {
					break
				}
			}
		}
		n, seg, port := h.dev.TransmitSegment(e.now, buf)
		if n == 0 {
			if port == 0 {
				break
			}
			// A request to a QP of this vHCA, taken without a frame
			// (LoopsOwn). Its receive completion went out through
			// Completed; its ACK's send completion, if the ACK was
			// taken at once, goes now, as after ReceiveOwn.
			e.publishCQs(h)
			sent++
			continue
		}
		sent++
		frames++
		if h.cable != nil {
			if ownLID(h.dev.Ports[0], wire.LRH(buf).DLID()) {
				h.dev.ReceiveSegment(e.now, port, buf[:n], seg)
			} else {
				h.cable.Send(n)
				buf = nil
			}
			continue
		}
		var dst wire.MAC
		copy(dst[:], buf[:6])
		switch {
		case dst == h.mac:
			h.dev.ReceiveOwn(e.now, port)
			// Loopback: what the frame completed is published before
			// the next frame is built (often the ACK of this one), as
			// a frame that crossed a link would be.
			e.publishCQs(h)
		case h.pipe != nil:
			h.pipe.SendSegment(n, seg)
			buf = nil
		case fast:
			h.fast.tx().Send(n)
			buf = nil
		case h.tap != nil:
			h.tap.Write(buf[:n])
		}
	}
	if frames > 0 && h.pipe != nil {
		h.pipe.Flush()
	}
	if frames > 0 && fast {
		h.fast.tx().Flush()
	}
	if h.cable != nil {
		h.cable.Flush() // credits, link packets and timers too
	}
	return sent, frames
}

// publishCQs moves to their rings the completions of the device's CQs
// that took some since the last look (Device.TakeCompleted): a message
// costs the same however many CQs the clients have. (A CQ whose ring was
// full keeps the rest until the next round that looks at every CQ.)
func (e *engine) publishCQs(h *hca) int {
	if !h.dev.AnyCompleted() {
		return 0 // most calls, now that completions go to the rings at once: inlined
	}
	return e.publishCompleted(h)
}

func (e *engine) publishCompleted(h *hca) int {
	work := 0
	for _, cq := range h.dev.TakeCompleted() {
		if c, _ := cq.Ring.(*cqRing); c != nil {
			work += e.fillCQ(c)
		}
	}
	return work
}

// sleep blocks on the doorbell until a client rings it, a control request
// arrives, or the earliest timer of the devices is due.
func (e *engine) sleep() {
	// Published before the rings are looked at, so that a client that
	// posts after the look sees it and rings. The links need no such
	// care: the poll below is on their own descriptors.
	e.asleep.Store(true)
	defer e.asleep.Store(false)
	asleep := true
	for _, h := range e.hcas {
		if h.pipe != nil && h.pipe.Pending() > 0 || h.fast != nil && h.fast.pending() {
			asleep = false
		}
		for _, r := range h.qps {
			asleep = asleep && r.sleep()
		}
		for _, r := range h.srqs {
			asleep = asleep && r.ring.Sleep()
		}
		// Arming a CQ rings no doorbell: an arm that came in since the
		// last fillCQ is handled before sleeping. With the store of
		// asleep above (a full fence) before these loads, either they
		// see the client's arm or the client's poll after arming sees
		// every completion published before (a CQ's sequence words and
		// producer index are stored without a fence: abi.Ring.Release).
		for _, c := range h.cqs {
			asleep = asleep && (c.dead || c.ring.ArmRequest() == c.armSeen)
		}
	}
	if asleep && len(e.todo) == 0 {
		var deadline vhca.Time
		for _, h := range e.hcas {
			if dl := h.dev.Deadline(); dl != 0 && (deadline == 0 || dl < deadline) {
				deadline = dl
			}
			if h.cable != nil {
				// The cable's link packets and liveness check.
				if dl := vhca.Time(h.cable.Deadline().Sub(e.start)); deadline == 0 || dl < deadline {
					deadline = max(dl, 1)
				}
			}
		}
		// ppoll on the eventfd itself, not Go's netpoller: the kernel
		// wakes this (locked) thread directly, which is several times
		// quicker than a netpoller round when the other cores are busy
		// with clients polling their CQs.
		var ts *unix.Timespec
		if deadline != 0 {
			d := max(time.Duration(deadline)-e.clock.now(), 0)
			t := unix.NsecToTimespec(int64(d))
			ts = &t
		}
		// The AF_XDP sockets too: readable once their RX ring holds a
		// frame, which needs no reader thread to ring the doorbell.
		fds := append(e.pollFDs[:0], unix.PollFd{Fd: int32(e.bellFD()), Events: unix.POLLIN})
		for _, h := range e.hcas {
			if h.fast != nil {
				for _, s := range h.fast.socks {
					fds = append(fds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
				}
			}
			if h.cable != nil {
				fds = append(fds, unix.PollFd{Fd: int32(h.cable.FD()), Events: unix.POLLIN})
			}
			if h.tap != nil {
				fds = append(fds, unix.PollFd{Fd: int32(h.tap.FD()), Events: unix.POLLIN})
			}
		}
		e.pollFDs = fds
		unix.Ppoll(fds, ts, nil)
		unix.Read(e.bellFD(), e.bellBuf[:])
	}
	for _, h := range e.hcas {
		for _, r := range h.qps {
			r.wake()
		}
		for _, r := range h.srqs {
			r.ring.Wake()
		}
	}
}

// deliverEvents signals completion channels and passes the device's
// asynchronous events to the sessions that own their objects.
func (e *engine) deliverEvents(h *hca) int {
	total := 0
	for {
		n := h.dev.Events(e.events[:])
		for _, ev := range e.events[:n] {
			if ev.Type == vhca.EventCompletion {
				if c := e.cqOf[ev.CQ]; c != nil {
					c.fire()
				}
				continue
			}
			if e.async != nil {
				e.async(h, ev)
			}
		}
		total += n
		if n < len(e.events) {
			return total
		}
	}
}
