// Package ebpf is the RoCEv2 fast path's kernel side: the XDP program
// that steers a vHCA's RoCEv2 frames off an uplink netdev into its AF_XDP
// socket (roce.c, compiled by bpf2go), and its loader. The socket itself
// is package ebpf/xsk.
package ebpf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/softib/softib/internal/netnsrun"
)

// Mode is how the program is attached: native runs it in the driver
// before any socket buffer exists; generic (skb mode) runs it later, on
// any netdev, slower.
type Mode int

const (
	ModeAuto    Mode = iota // native, else generic
	ModeNative              // native only
	ModeGeneric             // generic only
)

func (m Mode) String() string {
	return [...]string{"auto", "native", "generic"}[m]
}

// ParseMode reads a Mode as the flags spell it.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "auto":
		return ModeAuto, nil
	case "native", "drv":
		return ModeNative, nil
	case "generic", "skb":
		return ModeGeneric, nil
	}
	return 0, fmt.Errorf("XDP mode %q: want auto, native or generic", s)
}

// Config says where to attach.
type Config struct {
	Netdev string // the uplink's name
	// Netns, if not empty, is the path of the network namespace the
	// netdev is in (/var/run/netns/NAME).
	Netns string
	Mode  Mode
}

// Steering is the program attached to one netdev, with its maps. The
// attachment is a BPF link owned by this process's file descriptor:
// whatever way the process ends, the kernel detaches the program, so a
// crash leaves nothing attached and nothing is pinned.
type Steering struct {
	objs    roceObjects
	link    link.Link
	ifindex int
	queues  int
	netdev  string
	mode    Mode // native or generic, as attached
}

// Attach loads the program and attaches it to the netdev.
func Attach(c Config) (*Steering, error) {
	s := &Steering{netdev: c.Netdev}
	// No rlimit.RemoveMemlock: kernels from 5.11 on (the README names
	// 6.1) account BPF memory to the memory cgroup, and its probe of the
	// kernel fails in a minimal VM (scripts/verifier-kernels.sh) in a way
	// that then fails the load. Kernels before 5.11 would need it.
	if err := loadRoceObjects(&s.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("xdp: the verifier refused the steering program: %+v", verr)
		}
		return nil, fmt.Errorf("xdp: loading the steering program: %w", err)
	}
	err := netnsrun.Run(c.Netns, func() error {
		l, err := netlink.LinkByName(c.Netdev)
		if err != nil {
			return fmt.Errorf("xdp: netdev %q%s: %w", c.Netdev, where(c.Netns), err)
		}
		s.ifindex = l.Attrs().Index
		s.queues = max(l.Attrs().NumRxQueues, 1)
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("xdp: netdev %q%s already has an XDP program (id %d): another verbsd, or another XDP user, holds it", c.Netdev, where(c.Netns), x.ProgId)
		}
		modes := []Mode{ModeNative, ModeGeneric}
		switch c.Mode {
		case ModeNative:
			modes = modes[:1]
		case ModeGeneric:
			modes = modes[1:]
		}
		var errs []error
		for _, m := range modes {
			flags := link.XDPDriverMode
			if m == ModeGeneric {
				flags = link.XDPGenericMode
			}
			l, err := link.AttachXDP(link.XDPOptions{Program: s.objs.SteerRocev2, Interface: s.ifindex, Flags: flags})
			if err == nil {
				s.link, s.mode = l, m
				return nil
			}
			errs = append(errs, fmt.Errorf("%v mode: %w", m, err))
		}
		return fmt.Errorf("xdp: attaching to %q%s: %w", c.Netdev, where(c.Netns), errors.Join(errs...))
	})
	if err != nil {
		s.objs.Close()
		return nil, err
	}
	return s, nil
}

func where(ns string) string {
	if ns == "" {
		return ""
	}
	return " in " + ns
}

// Mode is the mode the program runs in (native or generic).
func (s *Steering) Mode() Mode { return s.mode }

// Ifindex is the netdev's index in its namespace.
func (s *Steering) Ifindex() int { return s.ifindex }

// Queues is how many RX queues the netdev has: one socket each.
func (s *Steering) Queues() int { return s.queues }

// Netdev is the netdev's name.
func (s *Steering) Netdev() string { return s.netdev }

// key is the map's key for a vHCA's address: As16 gives an IPv4
// address in its ::ffff:a.b.c.d form, the form the program builds.
func key(mac [6]byte, ip netip.Addr) roceVhcaKey {
	return roceVhcaKey{Mac: mac, Ip: ip.Unmap().As16()}
}

// Own steers RoCEv2 frames to mac and ip into the sockets: a vHCA owns
// them. id is the vHCA's number, for whoever reads the map.
func (s *Steering) Own(mac [6]byte, ip netip.Addr, id uint32) error {
	k := key(mac, ip)
	if err := s.objs.VhcaAddrs.Update(&k, &id, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("xdp: steering %v to vHCA %d: %w", ip, id, err)
	}
	return nil
}

// Disown stops steering frames for mac and ip: the kernel gets them.
func (s *Steering) Disown(mac [6]byte, ip netip.Addr) error {
	k := key(mac, ip)
	if err := s.objs.VhcaAddrs.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: unsteering %v: %w", ip, err)
	}
	return nil
}

// SetSocket makes fd, an AF_XDP socket bound to queue of the netdev,
// the destination of the frames steered on that queue.
func (s *Steering) SetSocket(queue int, fd int) error {
	q, v := uint32(queue), uint32(fd)
	if err := s.objs.Xsks.Update(&q, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("xdp: socket for queue %d: %w", queue, err)
	}
	return nil
}

// Counters are the program's counts, summed over CPUs.
type Counters struct {
	Steered uint64 // RoCEv2 frames redirected into a vHCA's socket
	Passed  uint64 // frames left to the kernel
	Dropped uint64 // RoCEv2 frames for a vHCA with no socket on their queue
}

// Counters reads the counts.
func (s *Steering) Counters() (Counters, error) {
	var c Counters
	for i, dst := range []*uint64{&c.Steered, &c.Passed, &c.Dropped} {
		var per []uint64
		if err := s.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return c, fmt.Errorf("xdp: counters: %w", err)
		}
		for _, n := range per {
			*dst += n
		}
	}
	return c, nil
}

// Close detaches the program and frees its maps.
func (s *Steering) Close() error {
	if s.link == nil {
		return errors.New("xdp: closed twice")
	}
	err := s.link.Close()
	s.link = nil
	return errors.Join(err, s.objs.Close())
}
