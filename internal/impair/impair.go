// Package impair joins two netdevs of a network namespace by a relay that
// loses, duplicates, reorders, delays and corrupts the frames it carries,
// chosen by a seeded generator: the faults tc netem makes, where the kernel
// has no netem.
//
// The relay reads every frame arriving on one netdev with an AF_PACKET
// socket and writes it out of the other, one goroutine per direction. The
// sockets carry a virtio_net_hdr (PACKET_VNET_HDR), so frames a local
// stack left to checksum offload (veth: CHECKSUM_PARTIAL) and GSO
// super-frames cross intact, and VLAN tags the kernel took into skb
// metadata are put back into the frame.
//
// Per frame of the faulted class (see Config.Only), in this order: loss
// (the frame is dropped; nothing else is drawn); corruption (one byte of
// the UDP payload, or of the IP payload for other protocols, or after the
// Ethernet header for non-IP frames, XORed with a non-zero mask; a
// checksum left to offload is completed first, so the receiver's check
// fails as it does behind netem); duplication (the frame, corrupted or
// not, is sent twice); reordering (the frame is held back and sent after
// the next frame of its class in its direction that is not lost, or after
// 5 ms if none comes); delay (every frame of the class waits Delay in a
// FIFO, so delay alone never reorders).
package impair

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/netnsrun"
)

// Config says where the relay runs and what it does.
type Config struct {
	Netns string // namespace path (/var/run/netns/X); "" = current
	A, B  string // the two netdevs; frames read on one are sent out of the other. Neither may be in a bridge.
	Seed  uint64
	// Probabilities 0..1 per frame.
	Loss, Duplicate, Reorder, Corrupt float64
	Delay                             time.Duration // every impaired frame held this long (0: none)
	// Only, if non-zero, restricts faults to UDP frames to this
	// destination port (4791: RoCEv2); other frames (ARP, ND, ...) are
	// relayed untouched, in order, without delay.
	Only uint16
}

// Stats counts what the relay did, both directions together.
type Stats struct {
	Relayed    uint64 // frames read and passed on (each once, however many copies went out)
	Lost       uint64 // frames dropped by Loss
	Duplicated uint64 // frames sent twice
	Reordered  uint64 // frames sent after a later frame of their class
	Corrupted  uint64 // frames with a byte changed
	Delayed    uint64 // frames that waited Delay
	Errors     uint64 // frames not relayed for other reasons: truncated, or the send failed
}

// ReorderWait is how long a frame held back for reordering waits for a
// later frame to overtake it.
const ReorderWait = 5 * time.Millisecond

const (
	maxFrame   = 65536 + 14 + 4 // a GSO super-frame (64 KiB IP) behind Ethernet and a VLAN tag
	bufLen     = 4 + vnetLen + maxFrame
	rcvBuf     = 8 << 20
	sndBuf     = 4 << 20
	queueLen   = 1 << 14         // delayed frames in flight per direction
	errRestart = unix.Errno(512) // ERESTARTSYS, should it ever leak out
)

// Relay is a running relay. Close stops it.
type Relay struct {
	c     Config
	fds   [2]int // AF_PACKET sockets on A and B
	efd   int    // eventfd, readable once Close has begun
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	stats struct {
		relayed, lost, duplicated, reordered, corrupted, delayed, errors atomic.Uint64
	}
}

// Start opens the sockets and starts relaying.
func Start(c Config) (*Relay, error) {
	if c.A == "" || c.B == "" || c.A == c.B {
		return nil, fmt.Errorf("impair: need two distinct netdevs, have %q and %q", c.A, c.B)
	}
	for _, p := range []float64{c.Loss, c.Duplicate, c.Reorder, c.Corrupt} {
		if !(p >= 0 && p <= 1) || math.IsNaN(p) {
			return nil, fmt.Errorf("impair: probability %v out of 0..1", p)
		}
	}
	if c.Delay < 0 {
		return nil, fmt.Errorf("impair: negative delay %v", c.Delay)
	}
	ns := netns.None()
	if c.Netns != "" {
		var err error
		if ns, err = netns.GetFromPath(c.Netns); err != nil {
			return nil, fmt.Errorf("impair: namespace %s: %w", c.Netns, err)
		}
		defer ns.Close()
	}
	idx, err := ifindexes(ns, c.A, c.B)
	if err != nil {
		return nil, err
	}
	r := &Relay{c: c, fds: [2]int{-1, -1}, efd: -1, done: make(chan struct{})}
	if err := netnsrun.RunHandle(ns, func() error {
		for i := range r.fds {
			fd, err := packetSocket(idx[i])
			if err != nil {
				return fmt.Errorf("impair: AF_PACKET socket on %s: %w", []string{c.A, c.B}[i], err)
			}
			r.fds[i] = fd
		}
		return nil
	}); err != nil {
		r.closeFDs()
		return nil, err
	}
	if r.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		r.closeFDs()
		return nil, fmt.Errorf("impair: eventfd: %w", err)
	}
	const salt = 0x696d70616972 // "impair"
	for i, seed := range []uint64{c.Seed, c.Seed ^ 1} {
		d := &direction{
			r: r, in: r.fds[i], out: r.fds[1-i],
			rng:  rand.New(rand.NewPCG(seed, salt)),
			buf:  make([]byte, bufLen),
			held: make([]byte, 0, bufLen),
			oob:  make([]byte, unix.CmsgSpace(int(unsafeSizeofAuxdata))),
		}
		if c.Delay > 0 {
			d.q = make(chan delayed, queueLen)
			r.wg.Add(1)
			go d.sender()
		}
		r.wg.Add(1)
		go d.reader()
	}
	return r, nil
}

// Stats returns the counters so far.
func (r *Relay) Stats() Stats {
	s := &r.stats
	return Stats{
		Relayed: s.relayed.Load(), Lost: s.lost.Load(), Duplicated: s.duplicated.Load(),
		Reordered: s.reordered.Load(), Corrupted: s.corrupted.Load(), Delayed: s.delayed.Load(),
		Errors: s.errors.Load(),
	}
}

// Close stops both directions and closes the sockets; it returns once
// every goroutine of the relay has ended. Frames still held back or
// waiting out their delay are dropped. Close may be called more than once.
func (r *Relay) Close() error {
	var err error
	r.once.Do(func() {
		close(r.done)
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		if _, err = unix.Write(r.efd, one[:]); err != nil {
			err = fmt.Errorf("impair: waking the readers: %w", err)
			// They cannot be woken: there is no bounded way on. This
			// cannot happen with a valid eventfd.
			return
		}
		r.wg.Wait()
		if e := r.closeFDs(); e != nil {
			err = e
		}
	})
	return err
}

func (r *Relay) closeFDs() error {
	var errs []error
	for _, fd := range append(r.fds[:], r.efd) {
		if fd >= 0 {
			errs = append(errs, unix.Close(fd))
		}
	}
	return errors.Join(errs...)
}

// ifindexes looks the netdevs up in ns and refuses bridge ports (the
// bridge would forward their frames too).
func ifindexes(ns netns.NsHandle, names ...string) ([]int, error) {
	var h *netlink.Handle
	var err error
	if ns.IsOpen() {
		h, err = netlink.NewHandleAt(ns)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("impair: netlink: %w", err)
	}
	defer h.Close()
	var idx []int
	for _, n := range names {
		l, err := h.LinkByName(n)
		if err != nil {
			return nil, fmt.Errorf("impair: netdev %s: %w", n, err)
		}
		if m := l.Attrs().MasterIndex; m != 0 {
			if ml, err := h.LinkByIndex(m); err != nil || ml.Type() == "bridge" || ml.Type() == "openvswitch" {
				return nil, fmt.Errorf("impair: netdev %s is a bridge port (or its master cannot be looked up)", n)
			}
		}
		idx = append(idx, l.Attrs().Index)
	}
	return idx, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocket opens an AF_PACKET socket for every frame arriving on
// netdev ifindex, in the calling thread's namespace. It is made with no
// protocol, so that it queues nothing until it is set up and bound.
func packetSocket(ifindex int) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	set := func(level, opt, v int, name string) error {
		if err := unix.SetsockoptInt(fd, level, opt, v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	err = errors.Join(
		set(unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING"),
		set(unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"),
		set(unix.SOL_PACKET, unix.PACKET_AUXDATA, 1, "PACKET_AUXDATA"),
	)
	if err == nil {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf) != nil {
			err = set(unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf, "SO_RCVBUF")
		}
	}
	if err == nil {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndBuf) != nil {
			err = set(unix.SOL_SOCKET, unix.SO_SNDBUF, sndBuf, "SO_SNDBUF")
		}
	}
	if err == nil {
		// Promiscuous for as long as the socket is open: the kernel
		// drops the membership (and the netdev's promiscuity count)
		// when it closes, even if the process dies.
		mr := unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
		if e := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mr); e != nil {
			err = fmt.Errorf("PACKET_MR_PROMISC: %w", e)
		}
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

const unsafeSizeofAuxdata = 20 // struct tpacket_auxdata

// direction relays the frames read on in out of out.
type direction struct {
	r       *Relay
	in, out int
	rng     *rand.Rand
	buf     []byte // 4 spare bytes (room for a VLAN tag), vnet header, frame
	oob     []byte
	// A frame (vnet header and frame) held back for reordering, when
	// len(held) > 0; sent twice if heldDup, before heldUntil.
	held      []byte
	heldDup   bool
	heldUntil time.Time
	q         chan delayed // the delay FIFO, nil without Delay
}

type delayed struct {
	at  time.Time
	pkt []byte
}

func (d *direction) reader() {
	defer d.r.wg.Done()
	fds := []unix.PollFd{{Fd: int32(d.in), Events: unix.POLLIN}, {Fd: int32(d.r.efd), Events: unix.POLLIN}}
	for {
		select {
		case <-d.r.done:
			return
		default:
		}
		pkt, ok, err := d.read()
		if err == unix.EAGAIN {
			timeout := -1
			if len(d.held) > 0 {
				wait := time.Until(d.heldUntil)
				if wait <= 0 {
					d.flushHeld(false)
					continue
				}
				timeout = int((wait + time.Millisecond - 1) / time.Millisecond)
			}
			if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
				// Cannot happen with valid descriptors; do not spin.
				time.Sleep(time.Millisecond)
			}
			if fds[1].Revents != 0 {
				return
			}
			continue
		}
		if err != nil || !ok {
			continue
		}
		d.relay(pkt)
		if len(d.held) > 0 && !time.Now().Before(d.heldUntil) {
			d.flushHeld(false)
		}
	}
}

// read reads one frame without blocking and returns it behind its vnet
// header, a VLAN tag the kernel took out put back. ok is false for a
// frame to skip (outgoing, truncated).
func (d *direction) read() (pkt []byte, ok bool, err error) {
	n, oobn, flags, from, err := unix.Recvmsg(d.in, d.buf[4:], d.oob, unix.MSG_DONTWAIT)
	switch {
	case err == unix.EINTR || err == errRestart:
		return nil, false, nil
	case err == unix.EAGAIN:
		return nil, false, err
	case err != nil:
		// EINVAL: the kernel could not describe the frame's offloads
		// in a vnet header; the frame is gone.
		d.r.stats.errors.Add(1)
		return nil, false, err
	}
	if sa, isLL := from.(*unix.SockaddrLinklayer); isLL && sa.Pkttype == unix.PACKET_OUTGOING {
		return nil, false, nil
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n < vnetLen+14 {
		d.r.stats.errors.Add(1)
		return nil, false, nil
	}
	pkt = d.buf[4 : 4+n]
	if tci, tpid, tagged := vlanTag(d.oob[:oobn]); tagged {
		// Put the tag back behind the MAC addresses: move the vnet
		// header and the addresses 4 bytes to the front.
		copy(d.buf[0:], d.buf[4:4+vnetLen+12])
		binary.BigEndian.PutUint16(d.buf[vnetLen+12:], tpid)
		binary.BigEndian.PutUint16(d.buf[vnetLen+14:], tci)
		pkt = d.buf[:4+n]
		h := vnet(pkt)
		if h.flags()&vnetNeedsCsum != 0 {
			h.addStart(4)
		}
		if h.gsoType() != vnetGSONone {
			h.addHdrLen(4)
		}
	}
	// DATA_VALID and other receive-only flags mean nothing to a send.
	h := vnet(pkt)
	h.setFlags(h.flags() & vnetNeedsCsum)
	return pkt, true, nil
}

// vlanTag finds in the control messages of a read the VLAN tag the
// kernel kept out of the frame.
func vlanTag(oob []byte) (tci, tpid uint16, ok bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		l := int(binary.NativeEndian.Uint64(oob))
		level := int32(binary.NativeEndian.Uint32(oob[8:]))
		typ := int32(binary.NativeEndian.Uint32(oob[12:]))
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0, 0, false
		}
		if level == unix.SOL_PACKET && typ == unix.PACKET_AUXDATA && l >= unix.SizeofCmsghdr+unsafeSizeofAuxdata {
			a := oob[unix.SizeofCmsghdr:]
			status := binary.NativeEndian.Uint32(a)
			if status&unix.TP_STATUS_VLAN_VALID == 0 {
				return 0, 0, false
			}
			tpid = etherVLAN
			if status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
				tpid = binary.NativeEndian.Uint16(a[18:])
			}
			return binary.NativeEndian.Uint16(a[16:]), tpid, true
		}
		sp := unix.CmsgSpace(l - unix.SizeofCmsghdr)
		if sp > len(oob) {
			break
		}
		oob = oob[sp:]
	}
	return 0, 0, false
}

// relay decides the fate of one frame (vnet header and frame) and sends
// it on.
func (d *direction) relay(pkt []byte) {
	c, s := &d.r.c, &d.r.stats
	f := pkt[vnetLen:]
	l := parse(f)
	if !l.faulted(c.Only) {
		s.relayed.Add(1)
		d.send(pkt, false)
		return
	}
	from, to := l.span()
	v := decide(d.rng, c, max(to-from, 0))
	if v.Lose {
		s.lost.Add(1)
		return
	}
	s.relayed.Add(1)
	if v.Corrupt {
		finishChecksum(vnet(pkt), f)
		f[from+v.At] ^= v.Mask
		s.corrupted.Add(1)
	}
	if v.Duplicate {
		s.duplicated.Add(1)
	}
	if v.Reorder && len(d.held) == 0 {
		d.held = append(d.held[:0], pkt...)
		d.heldDup = v.Duplicate
		d.heldUntil = time.Now().Add(ReorderWait)
		return
	}
	d.emit(pkt, v.Duplicate)
	if len(d.held) > 0 {
		d.flushHeld(true)
	}
}

// flushHeld sends the frame held back; overtaken says whether a later
// frame went before it.
func (d *direction) flushHeld(overtaken bool) {
	if overtaken {
		d.r.stats.reordered.Add(1)
	}
	d.emit(d.held, d.heldDup)
	d.held = d.held[:0]
}

// emit sends a frame of the faulted class, once or twice, through the
// delay FIFO if there is one.
func (d *direction) emit(pkt []byte, dup bool) {
	if d.q == nil {
		d.send(pkt, dup)
		return
	}
	d.r.stats.delayed.Add(1)
	at := time.Now().Add(d.r.c.Delay)
	cp := append([]byte(nil), pkt...)
	for range 1 + b2i(dup) {
		select {
		case d.q <- delayed{at, cp}:
		case <-d.r.done:
			return
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// send sends a frame out now, twice if dup. With Only 0 and a delay, all
// frames are of the faulted class and none comes here straight, so the
// order of the faulted class is that of the FIFO and the order of the
// rest is that of their reading.
func (d *direction) send(pkt []byte, dup bool) {
	for range 1 + b2i(dup) {
		d.write(pkt)
	}
}

func (d *direction) write(pkt []byte) {
	for tries := 0; ; tries++ {
		_, err := unix.Write(d.out, pkt)
		switch {
		case err == nil:
			return
		case err == unix.EINTR || err == errRestart:
			continue
		case (err == unix.ENOBUFS || err == unix.EAGAIN) && tries < 100:
			// The send buffer is full of frames the peer has not
			// taken yet.
			time.Sleep(100 * time.Microsecond)
			continue
		}
		d.r.stats.errors.Add(1)
		return
	}
}

// sender sends the delayed frames when their time comes, in order.
func (d *direction) sender() {
	defer d.r.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var x delayed
		select {
		case x = <-d.q:
		case <-d.r.done:
			return
		}
		if wait := time.Until(x.at); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-d.r.done:
				return
			}
		}
		d.write(x.pkt)
	}
}
