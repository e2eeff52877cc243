package verbsd

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/ebpf"
	"github.com/softib/softib/ebpf/xsk"
	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca/wire"
)

// fastPath is a port's RoCEv2 path through AF_XDP: the steering program
// on a netdev (package ebpf) hands the frames addressed to the vHCA's MAC
// and IP addresses to its sockets, one per RX queue, and the vHCA
// transmits through the first. The TAP path costs a system call and a
// copy per frame and a trip through a bridge; this one takes the frames
// off the uplink before the kernel's stack sees them, and sends in
// batches of one system call.
type fastPath struct {
	steer *ebpf.Steering
	socks []*xsk.Socket
	mac   wire.MAC
	id    uint32
	owned map[netip.Addr]bool
	// on: steering and transmitting through the sockets. Off (a port
	// with a TAP only), the port uses its TAP as if there were no fast
	// path: softib perf --path tap measures both on one set-up.
	on bool
}

// openFastPath attaches the steering program to netdev (in the namespace
// at nsPath, if set), opens a socket on each of its RX queues, and steers
// the addresses.
func openFastPath(dev, netdev, nsPath string, mode ebpf.Mode, mac wire.MAC, addrs []netip.Addr, id uint32, mtu int) (*fastPath, error) {
	steer, err := ebpf.Attach(ebpf.Config{Netdev: netdev, Netns: nsPath, Mode: mode})
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", dev, err)
	}
	f := &fastPath{steer: steer, mac: mac, id: id, owned: map[netip.Addr]bool{}, on: true}
	for q := range steer.Queues() {
		s, err := xsk.Open(xsk.Config{Ifindex: steer.Ifindex(), Queue: q, Netns: nsPath, ZeroCopy: true})
		// A socket of a verbsd that just died holds its queue for a few
		// tens of milliseconds more (the kernel frees it after an RCU
		// grace period): a restart retries for a while.
		for start := time.Now(); errors.Is(err, unix.EBUSY) && time.Since(start) < time.Second; {
			time.Sleep(20 * time.Millisecond)
			s, err = xsk.Open(xsk.Config{Ifindex: steer.Ifindex(), Queue: q, Netns: nsPath, ZeroCopy: true})
		}
		if q > 0 && errors.Is(err, unix.EINVAL) {
			// The netdev has room for more queues than it uses (a veth
			// has one per CPU, one in use): the rest get no traffic.
			break
		}
		// A received frame sits after the kernel's XDP_PACKET_HEADROOM
		// (256 bytes) in its UMEM frame; 18: Ethernet and a VLAN tag.
		if room := s.MaxFrame() - 256 - 18; err == nil && mtu > room {
			s.Close()
			err = fmt.Errorf("MTU %d: AF_XDP frames of %d bytes take frames of an MTU of at most %d", mtu, s.MaxFrame(), room)
		}
		if err == nil {
			if err = steer.SetSocket(q, s.FD()); err != nil {
				s.Close()
			}
		}
		if err != nil {
			f.close()
			return nil, fmt.Errorf("device %q: fast path on %s: %w", dev, netdev, err)
		}
		f.socks = append(f.socks, s)
	}
	for _, a := range addrs {
		if err := f.own(a); err != nil {
			f.close()
			return nil, fmt.Errorf("device %q: %w", dev, err)
		}
	}
	copyMode := "copy"
	if f.socks[0].ZeroCopy() {
		copyMode = "zero-copy"
	}
	slog.Info("RoCEv2 fast path", "device", dev, "netdev", netdev, "xdp", steer.Mode().String(), "af_xdp", copyMode, "queues", len(f.socks))
	return f, nil
}

// own steers a's RoCEv2 frames to the vHCA (while on).
func (f *fastPath) own(a netip.Addr) error {
	f.owned[a] = true
	if !f.on {
		return nil
	}
	return f.steer.Own(f.mac, a, f.id)
}

// disown gives a's frames back to the kernel.
func (f *fastPath) disown(a netip.Addr) error {
	delete(f.owned, a)
	return f.steer.Disown(f.mac, a)
}

// setOn turns steering and transmission through the sockets on or off.
func (f *fastPath) setOn(on bool) error {
	if on == f.on {
		return nil
	}
	f.on = on
	var errs []error
	for a := range f.owned {
		if on {
			errs = append(errs, f.steer.Own(f.mac, a, f.id))
		} else {
			errs = append(errs, f.steer.Disown(f.mac, a))
		}
	}
	return errors.Join(errs...)
}

// tx is the socket the port transmits through.
func (f *fastPath) tx() *xsk.Socket { return f.socks[0] }

// pending reports whether a socket has frames waiting.
func (f *fastPath) pending() bool {
	for _, s := range f.socks {
		if s.Pending() > 0 {
			return true
		}
	}
	return false
}

// close detaches the program and closes the sockets.
func (f *fastPath) close() {
	for _, s := range f.socks {
		s.Close()
	}
	f.socks = nil
	if f.steer != nil {
		f.steer.Close()
		f.steer = nil
	}
}

// paths tells which paths RoCEv2 can take through the port, which it
// takes, and the port's netdev: its TAP, or the netdev it attaches to.
func (h *hca) paths() (paths, path uint8, name abi.Name) {
	if h.tap != nil {
		paths, path, name = abi.PathTAP, abi.PathTAP, abi.SetName(h.tap.Name())
	}
	if h.fast != nil {
		paths |= abi.PathXDP
		if h.fast.on {
			path = abi.PathXDP
		}
	}
	if h.nd != nil {
		name = abi.SetName(h.nd.Name())
	}
	return paths, path, name
}

// pathNames spells a set of paths for an error message.
func pathNames(paths uint8) string {
	switch paths {
	case abi.PathTAP:
		return "tap only"
	case abi.PathXDP:
		return "xdp only"
	case abi.PathTAP | abi.PathXDP:
		return "tap and xdp"
	}
	return "no netdev"
}

// LinkStats counts a port's frames on its fast path.
type LinkStats struct {
	// The steering program's counts on the netdev (package ebpf).
	Steered, Passed, Dropped uint64
	// Frames through the port's AF_XDP sockets.
	Received, Sent uint64
	// Frames the kernel dropped for want of room in an RX ring, or for
	// being too big for a UMEM frame.
	RxRingFull, RxDropped uint64
}

// LinkStats reads the fast-path counters of device dev.
func (s *Server) LinkStats(dev string) (LinkStats, error) {
	var st LinkStats
	var err error
	if e := s.eng.do(func() {
		for _, h := range s.eng.hcas {
			if h.name != dev {
				continue
			}
			if h.fast == nil {
				err = fmt.Errorf("device %q has no fast path", dev)
				return
			}
			c, e := h.fast.steer.Counters()
			if e != nil {
				err = e
				return
			}
			st.Steered, st.Passed, st.Dropped = c.Steered, c.Passed, c.Dropped
			for _, sk := range h.fast.socks {
				x, e := sk.Stats()
				if e != nil {
					err = e
					return
				}
				st.Received += x.Received
				st.Sent += x.Sent
				st.RxRingFull += x.RxRingFull
				st.RxDropped += x.RxDropped
			}
			return
		}
		err = fmt.Errorf("no device %q", dev)
	}); e != nil {
		return st, e
	}
	return st, err
}
