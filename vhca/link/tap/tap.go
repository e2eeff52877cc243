// Package tap is a vHCA port's link on a TAP netdev: the host sees the
// vHCA as a network device it can bridge, capture and disturb (tc netem)
// with its own tools. Frames go out with one write each (TAP cannot
// batch, DESIGN.md); a reader goroutine takes frames in, into a ring the
// port's owner drains, and calls a wake-up function so that an owner
// asleep on its doorbell runs.
package tap

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Config describes the netdev.
type Config struct {
	Name string           // netdev name (the vHCA's name by default in verbsd)
	MTU  int              // 1500 if zero
	MAC  net.HardwareAddr // the netdev's own address (the host side of the TAP)
	// Netns, if not empty, is the path of a network namespace to move
	// the netdev into (/var/run/netns/NAME for `ip netns add NAME`).
	Netns string
	// Wake is called after frames arrived (from the reader goroutine).
	Wake func()
}

// TAP is an open TAP netdev.
type TAP struct {
	ifc  *water.Interface
	mtu  int
	wake func()
	tx   []byte

	// The reader's ring of received frames: single producer (reader),
	// single consumer (the owner).
	frames [][]byte
	lens   []int
	prod   atomic.Uint32
	cons   atomic.Uint32
	closed atomic.Bool
	done   chan struct{}
	spare  []byte // where the reader drops a frame the owner has no room for
	// Dropped counts frames lost because the owner fell a ring behind.
	Dropped atomic.Uint64
}

const ringFrames = 1024

// Open creates the TAP netdev, sets its MTU and MAC, moves it to the
// namespace if asked, brings it up, and starts reading.
func Open(c Config) (*TAP, error) {
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.MTU < 1280 || c.MTU > 9000 {
		return nil, fmt.Errorf("tap %s: MTU %d (1280..9000)", c.Name, c.MTU)
	}
	ifc, err := water.New(water.Config{DeviceType: water.TAP, PlatformSpecificParams: water.PlatformSpecificParams{Name: c.Name}})
	if err != nil {
		return nil, fmt.Errorf("tap %s: %w", c.Name, err)
	}
	t := &TAP{ifc: ifc, mtu: c.MTU, wake: c.Wake, tx: make([]byte, c.MTU+14+4),
		frames: make([][]byte, ringFrames), lens: make([]int, ringFrames), done: make(chan struct{}), spare: make([]byte, 65536)}
	for i := range t.frames {
		t.frames[i] = make([]byte, c.MTU+14+4)
	}
	if err := t.configure(c); err != nil {
		ifc.Close()
		return nil, err
	}
	go t.read()
	return t, nil
}

func (t *TAP) configure(c Config) error {
	l, err := netlink.LinkByName(t.ifc.Name())
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
		if l, err = h.LinkByName(t.ifc.Name()); err != nil {
			return err
		}
	}
	return h.LinkSetUp(l)
}

// Name is the netdev's name.
func (t *TAP) Name() string { return t.ifc.Name() }

// MTU is the netdev's MTU.
func (t *TAP) MTU() int { return t.mtu }

func (t *TAP) read() {
	defer close(t.done)
	for {
		p := t.prod.Load()
		if p-t.cons.Load() >= ringFrames {
			// The owner is a ring behind: read into the spare and drop.
			if _, err := t.ifc.Read(t.spare); err != nil {
				return
			}
			t.Dropped.Add(1)
			continue
		}
		i := p % ringFrames
		n, err := t.ifc.Read(t.frames[i])
		if err != nil {
			return
		}
		t.lens[i] = n
		t.prod.Store(p + 1)
		if t.wake != nil {
			t.wake()
		}
	}
}

// TxBuf is the buffer to build the next frame in.
func (t *TAP) TxBuf() []byte { return t.tx }

// Send writes the first n bytes of TxBuf to the netdev.
func (t *TAP) Send(n int) { t.ifc.Write(t.tx[:n]) }

// Write sends a frame of the caller's.
func (t *TAP) Write(frame []byte) error {
	_, err := t.ifc.Write(frame)
	return err
}

// Flush does nothing: every Send is a write.
func (t *TAP) Flush() {}

// Recv hands up to max received frames to fn (never segments).
func (t *TAP) Recv(max int, fn func(frame, segment []byte)) int {
	c, p := t.cons.Load(), t.prod.Load()
	n := 0
	for ; n < max && c != p; n++ {
		i := c % ringFrames
		fn(t.frames[i][:t.lens[i]], nil)
		c++
	}
	t.cons.Store(c)
	return n
}

// Pending is how many received frames wait.
func (t *TAP) Pending() int { return int(t.prod.Load() - t.cons.Load()) }

// Close removes the netdev and stops the reader.
func (t *TAP) Close() error {
	if t.closed.Swap(true) {
		return errors.New("tap: closed twice")
	}
	err := t.ifc.Close()
	<-t.done
	return err
}
