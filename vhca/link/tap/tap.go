// Package tap is a vHCA port's link on a TAP netdev: the host sees the
// vHCA as a network device it can bridge, capture and disturb (tc netem)
// with its own tools. Frames go out with one write each and come in with
// one read each (a TAP fd has no batching call, DESIGN.md). The fd is
// non-blocking and outside Go's poller: its owner reads it in its own
// rounds and sleeps in poll on it (FD), so that a frame costs no goroutine
// hand-off and no wake-up of a runtime thread (measured on the cable
// link, which had the same design: a runtime thread woken per datagram).
package tap

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config describes the netdev.
type Config struct {
	Name string           // netdev name (the vHCA's name by default in verbsd)
	MTU  int              // 1500 if zero
	MAC  net.HardwareAddr // the netdev's own address (the host side of the TAP)
	// Netns, if not empty, is the path of a network namespace to move
	// the netdev into (/var/run/netns/NAME for `ip netns add NAME`).
	Netns string
}

// TAP is an open TAP netdev.
type TAP struct {
	fd     int
	name   string
	mtu    int
	tx     []byte
	rx     []byte
	closed bool
	// batch is how many frames the next Recv reads at most (Recv).
	batch int
	// Dropped counts frames a write did not take (the netdev's queue
	// full, or the netdev down).
	Dropped uint64
}

// Open creates the TAP netdev, sets its MTU and MAC, moves it to the
// namespace if asked, and brings it up.
func Open(c Config) (*TAP, error) {
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.MTU < 1280 || c.MTU > 9000 {
		return nil, fmt.Errorf("tap %s: MTU %d (1280..9000)", c.Name, c.MTU)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tap %s: /dev/net/tun: %w", c.Name, err)
	}
	ifr, err := unix.NewIfreq(c.Name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %s: %w", c.Name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %s: TUNSETIFF: %w", c.Name, err)
	}
	t := &TAP{fd: fd, name: ifr.Name(), mtu: c.MTU, tx: make([]byte, c.MTU+14+4), rx: make([]byte, 65536)}
	if err := t.configure(c); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return t, nil
}

func (t *TAP) configure(c Config) error {
	l, err := netlink.LinkByName(t.name)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetMTU(l, c.MTU); err != nil {
		return fmt.Errorf("tap %s: MTU: %w", c.Name, err)
	}
	if c.MAC != nil {
		if err := netlink.LinkSetHardwareAddr(l, c.MAC); err != nil {
			return fmt.Errorf("tap %s: MAC: %w", c.Name, err)
		}
	}
	h := &netlink.Handle{}
	if c.Netns != "" {
		ns, err := netns.GetFromPath(c.Netns)
		if err != nil {
			return fmt.Errorf("tap %s: namespace %s: %w", c.Name, c.Netns, err)
		}
		defer ns.Close()
		if err := netlink.LinkSetNsFd(l, int(ns)); err != nil {
			return fmt.Errorf("tap %s: moving to %s: %w", c.Name, c.Netns, err)
		}
		if h, err = netlink.NewHandleAt(ns); err != nil {
			return err
		}
		defer h.Close()
		if l, err = h.LinkByName(t.name); err != nil {
			return err
		}
	}
	return h.LinkSetUp(l)
}

// Name is the netdev's name.
func (t *TAP) Name() string { return t.name }

// MTU is the netdev's MTU.
func (t *TAP) MTU() int { return t.mtu }

// FD is the TAP's file descriptor, for the owner's poll: readable when
// Recv has frames.
func (t *TAP) FD() int { return t.fd }

// TxBuf is the buffer to build the next frame in.
func (t *TAP) TxBuf() []byte { return t.tx }

// Send writes the first n bytes of TxBuf to the netdev.
func (t *TAP) Send(n int) { t.Write(t.tx[:n]) }

// Write sends a frame of the caller's: one write(2).
func (t *TAP) Write(frame []byte) error {
	for {
		_, err := unix.Write(t.fd, frame)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		}
		t.Dropped++
		return err
	}
}

// Flush does nothing: every Send is a write.
func (t *TAP) Flush() {}

// Recv reads frames, one read(2) each, and hands each to fn (never
// segments), until the netdev has no more or the call has read its
// batch (never more than most). The frame is valid during the call only.
//
// Only a read that finds nothing tells that nothing more is queued, and
// it costs a system call (half a microsecond here) like any other: on a
// ping-pong, a frame or two at a time, that is a third to a half of the
// reading. So Recv reads at most batch frames: two (minBatch) after a
// call that found the queue empty, twice as many after a call that took
// all it was allowed. A pair of frames is read with two system calls,
// and a stream still gets batches of up to most within a few calls.
// What is left stays queued for the next call.
func (t *TAP) Recv(most int, fn func(frame, segment []byte)) int {
	limit := min(most, max(t.batch, minBatch))
	n := 0
	for n < limit {
		k, err := unix.Read(t.fd, t.rx)
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			t.batch = max(n, minBatch) // EAGAIN: nothing more now
			return n
		}
		fn(t.rx[:k], nil)
		n++
	}
	t.batch = min(2*limit, maxBatch)
	return n
}

// minBatch and maxBatch bound the batch. Two, because an RC peer's
// frames often come in twos: the acknowledgement of what was sent, and
// its next request or answer.
const (
	minBatch = 2
	maxBatch = 256
)

// Close removes the netdev.
func (t *TAP) Close() error {
	if t.closed {
		return errors.New("tap: closed twice")
	}
	t.closed = true
	return unix.Close(t.fd)
}
