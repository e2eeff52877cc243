package cable

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/mmsg"
	"github.com/softib/softib/internal/netnsrun"
	"github.com/softib/softib/vhca/wire"
)

// Config describes one end of a cable.
type Config struct {
	Name        string
	Local, Peer string // UDP addresses (host:port) of this end and the other
	// Netns, if set, is the network namespace path the socket lives in.
	Netns string
	// VLs: data VLs (1..15; 1 if zero). BufferBlocks: this end's
	// receive buffer per data VL in 64-byte blocks (256 if zero): the
	// credits it grants.
	VLs          int
	BufferBlocks int
	// Managed: a subnet manager moves the port to Active; otherwise it is
	// Active as soon as the link is up (static configuration).
	Managed bool
	// Timing, zero for the defaults.
	FCInterval, DownAfter, PollInterval time.Duration
}

// MaxPacket is the largest IB packet a cable carries: a 4096-byte
// payload and every header (LRH, GRH, BTH, the largest extended headers,
// ICRC, VCRC).
const MaxPacket = 4096 + 8 + 40 + 12 + 28 + 16 + 4 + 2 + 8

const (
	txSlots = 512 // packets waiting to go, all VLs
	batch   = 64  // datagrams a system call
)

// Cable is one end of a cable: an Endpoint on a connected UDP socket.
// Everything runs on the owner's goroutine, in Recv, Send and Flush, so
// the Endpoint needs no lock; an owner with nothing to do sleeps in poll
// on FD and Deadline.
//
// The socket is a plain descriptor, not a net.UDPConn: Go's netpoller
// would watch it (edge-triggered, for reading and writing) and wake its
// thread in epoll_pwait for every datagram sent or received, though no
// goroutine ever waits on it — a context switch a packet, which on a host
// with fewer cores than busy threads takes the CPU from the engine and
// the clients and costs the round trip tens of microseconds.
type Cable struct {
	cfg   Config
	start time.Time
	ep    *Endpoint

	// Received datagrams, a batch at a time: the kernel's socket buffer,
	// sized for all the credits granted, is where they wait.
	rxHdr  []mmsg.Hdr
	rxBuf  [][]byte
	closed bool

	// Packets waiting to go: slots, a FIFO per VL (credits are per VL,
	// so one VL's wait does not hold another's packets), and the free
	// slots.
	tx       [][]byte
	txLen    []int
	fifo     [16][]int
	free     []int
	held     int // the slot TxBuf handed out, -1 if none
	next     uint8
	out      []mmsg.Hdr
	outSlot  []int
	outIov   []unix.Iovec
	nout     int
	link     [][wire.FlowControlLen]byte
	nlink    int
	sendErrs uint64
	fd       int
}

// Open opens the cable's socket and starts its reader.
func Open(c Config) (*Cable, error) {
	if c.VLs == 0 {
		c.VLs = 1
	}
	if c.BufferBlocks == 0 {
		c.BufferBlocks = 256
	}
	if c.VLs < 1 || c.VLs > 15 {
		return nil, fmt.Errorf("cable %s: %d data VLs (1..15)", c.Name, c.VLs)
	}
	if wire.Blocks(MaxPacket) > c.BufferBlocks {
		return nil, fmt.Errorf("cable %s: a buffer of %d blocks cannot hold a packet of %d bytes", c.Name, c.BufferBlocks, MaxPacket)
	}
	local, err := net.ResolveUDPAddr("udp", c.Local)
	if err != nil {
		return nil, fmt.Errorf("cable %s: local address: %w", c.Name, err)
	}
	peer, err := net.ResolveUDPAddr("udp", c.Peer)
	if err != nil {
		return nil, fmt.Errorf("cable %s: peer address: %w", c.Name, err)
	}
	k := &Cable{cfg: c, start: time.Now(), ep: NewEndpoint(c.VLs, c.BufferBlocks, !c.Managed), held: -1, fd: -1}
	k.ep.SetTiming(c.FCInterval, c.DownAfter, c.PollInterval)
	err = netnsrun.Run(c.Netns, func() (err error) {
		k.fd, err = dialUDP(local, peer)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cable %s: %w", c.Name, err)
	}
	// The receive buffer must hold all the credits let be in flight, as
	// the kernel counts it (a small datagram costs it several times its
	// size): beyond net.core.rmem_max where root may (SO_RCVBUFFORCE),
	// else as far as that limit goes. A datagram the kernel drops for
	// want of room is a packet lost on the link.
	size := max(8<<20, 16*c.VLs*c.BufferBlocks*64)
	if unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}
	if unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	}
	k.rxHdr, k.rxBuf, _ = mmsg.New(batch, MaxPacket, false)
	k.tx, k.txLen = make([][]byte, txSlots), make([]int, txSlots)
	txSlab := make([]byte, txSlots*MaxPacket)
	for i := range k.tx {
		k.tx[i] = txSlab[i*MaxPacket : (i+1)*MaxPacket : (i+1)*MaxPacket]
		k.free = append(k.free, i)
	}
	for vl := range k.fifo {
		k.fifo[vl] = make([]int, 0, txSlots)
	}
	k.out, k.outIov, k.outSlot = make([]mmsg.Hdr, batch), make([]unix.Iovec, batch), make([]int, batch)
	for i := range k.out {
		k.out[i].Hdr.Iov = &k.outIov[i]
		k.out[i].Hdr.SetIovlen(1)
	}
	k.link = make([][wire.FlowControlLen]byte, 2*16)
	return k, nil
}

// dialUDP makes a non-blocking UDP socket bound to local and connected to
// peer, outside Go's netpoller: IPv4 if both addresses are (or local is
// unspecified), else IPv6 (an IPv4 address as a mapped one).
func dialUDP(local, peer *net.UDPAddr) (int, error) {
	family := unix.AF_INET6
	if peer.IP.To4() != nil && (local.IP == nil || local.IP.To4() != nil) {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if family == unix.AF_INET6 {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err := unix.Bind(fd, sockaddr(family, local)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %v: %w", local, err)
	}
	if err := unix.Connect(fd, sockaddr(family, peer)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect %v: %w", peer, err)
	}
	return fd, nil
}

// sockaddr is a's socket address in family.
func sockaddr(family int, a *net.UDPAddr) unix.Sockaddr {
	if family == unix.AF_INET {
		sa := &unix.SockaddrInet4{Port: a.Port}
		copy(sa.Addr[:], a.IP.To4())
		return sa
	}
	sa := &unix.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], a.IP.To16())
	if a.Zone != "" {
		if ifi, err := net.InterfaceByName(a.Zone); err == nil {
			sa.ZoneId = uint32(ifi.Index)
		}
	}
	return sa
}

// now is the endpoint's clock: time since Open.
func (k *Cable) now() time.Duration { return time.Since(k.start) }

// FD is the socket, for an owner's poll: readable when Recv has work.
func (k *Cable) FD() int { return k.fd }

// Recv handles up to max received datagrams: link packets go to the
// flow control; data packets whose VCRC is right and that are within
// credit go to fn. The packet is valid during the call only. If fn
// returns true the packet's buffer is free at once (an owner that copied
// or consumed it); false: the owner holds it and calls Release later
// (a switch's input buffer). One recvmmsg a batch; none waits.
func (k *Cable) Recv(max int, fn func(pkt []byte) bool) int {
	total := 0
	for total < max {
		want := min(batch, max-total)
		n, errno := mmsg.RecvNow(uintptr(k.fd), k.rxHdr[:want])
		if errno != 0 || n == 0 {
			// EAGAIN: nothing more. ECONNREFUSED: an ICMP error for
			// what we sent while the far end was away.
			return total
		}
		now := k.now()
		for i := range n {
			k.packet(now, k.rxBuf[i][:k.rxHdr[i].Len], fn)
		}
		total += n
		if n < want {
			return total
		}
	}
	return total
}

// packet handles one received datagram.
func (k *Cable) packet(now time.Duration, pkt []byte, fn func(pkt []byte) bool) {
	if len(pkt) == wire.FlowControlLen {
		if f, err := wire.CheckFlowControl(pkt); err == nil {
			k.ep.LinkPacket(now, f)
		} else {
			k.ep.Counters.RcvErrors++
		}
		return
	}
	vl, ok := checkVCRC(pkt)
	if !ok {
		k.ep.heard = now // a bad packet is still a sign of life
		k.ep.Counters.RcvErrors++
		return
	}
	if !k.ep.Received(now, vl, len(pkt)) {
		if vl == 15 {
			k.ep.Counters.VL15Dropped++
		}
		return
	}
	if fn(pkt) {
		k.ep.Release(vl, len(pkt))
	}
}

// checkVCRC checks a data packet's length (LRH's PktLen) and VCRC, and
// returns its VL.
func checkVCRC(pkt []byte) (uint8, bool) {
	if len(pkt) < wire.LRHLen+wire.VCRCLen {
		return 0, false
	}
	l := wire.LRH(pkt)
	end := int(l.PktLen()) * 4
	if end+wire.VCRCLen != len(pkt) || end < wire.LRHLen {
		return 0, false
	}
	if wire.VCRC(pkt[:end]) != uint16(pkt[end])|uint16(pkt[end+1])<<8 {
		return 0, false
	}
	return l.VL(), true
}

// Release gives back the buffer of a packet of bytes on vl that Recv's
// owner held.
func (k *Cable) Release(vl uint8, bytes int) { k.ep.Release(vl, bytes) }

// ReleaseBlocks gives back blocks of vl's buffer (a switch's input
// buffer counts in blocks).
func (k *Cable) ReleaseBlocks(vl uint8, blocks int) { k.ep.ReleaseBlocks(vl, blocks) }

// FitsBlocks reports whether a packet of blocks may go on vl now.
func (k *Cable) FitsBlocks(vl uint8, blocks int) bool { return k.ep.Fits(vl, blocks) }

// TxBuf is a buffer to build the next packet in (LRH first, VCRC
// last), or nil while packets enough wait to go: the cable's back
// pressure.
func (k *Cable) TxBuf() []byte {
	if k.held >= 0 {
		return k.tx[k.held]
	}
	if len(k.free) == 0 {
		return nil
	}
	k.held = k.free[len(k.free)-1]
	k.free = k.free[:len(k.free)-1]
	return k.tx[k.held]
}

// Send queues the first n bytes of TxBuf's buffer on the VL its LRH
// names; it goes when Flush finds credit for it.
func (k *Cable) Send(n int) {
	if k.held < 0 {
		panic("cable: Send without TxBuf")
	}
	i := k.held
	k.held = -1
	k.txLen[i] = n
	vl := wire.LRH(k.tx[i]).VL()
	if int(vl) >= k.ep.vls && vl != 15 {
		k.ep.Counters.XmitDiscards++ // a VL this link does not have
		k.free = append(k.free, i)
		return
	}
	k.fifo[vl] = append(k.fifo[vl], i)
}

// Fits reports whether a packet of bytes may go on vl now.
func (k *Cable) Fits(vl uint8, bytes int) bool { return k.ep.Fits(vl, wire.Blocks(bytes)) }

// Transmit sends a packet the caller checked with Fits (a switch's
// output), copying it: it goes with the next Flush, ahead of what waits
// in the VL FIFOs.
func (k *Cable) Transmit(pkt []byte) {
	if len(k.free) == 0 || len(pkt) > MaxPacket {
		k.ep.Counters.XmitDiscards++
		return
	}
	vl := wire.LRH(pkt).VL()
	i := k.free[len(k.free)-1]
	k.free = k.free[:len(k.free)-1]
	k.txLen[i] = copy(k.tx[i], pkt)
	k.ep.Sent(vl, len(pkt))
	k.push(k.tx[i][:len(pkt)], i)
}

// push adds a datagram to the batch, sending the batch when full.
// slot is the tx slot freed once sent, or -1.
func (k *Cable) push(b []byte, slot int) {
	if k.nout == batch {
		k.sendBatch()
	}
	k.outIov[k.nout].Base = &b[0]
	k.outIov[k.nout].SetLen(len(b))
	k.outSlot[k.nout] = slot
	k.nout++
}

// Flush sends what has credit, the link packets due, and handles the
// timers: one sendmmsg a batch.
func (k *Cable) Flush() {
	now := k.now()
	if k.ep.Tick(now) {
		k.discard()
	}
	k.nlink = 0
	k.ep.LinkPackets(now, func(op, vl uint8, fctbs, fccl uint16) {
		if k.nlink == len(k.link) {
			return
		}
		f := wire.BuildFlowControl(k.link[k.nlink][:], op, vl, fctbs, fccl)
		k.nlink++
		k.push(f, -1)
	})
	// VL15 first (management is never held back), then the data VLs in
	// turn, each as far as its credit goes.
	wait := false
	for j := 0; j <= k.ep.vls; j++ {
		vl := uint8(15)
		if j > 0 {
			vl = (k.next + uint8(j-1)) % uint8(k.ep.vls)
		}
		q := k.fifo[vl]
		sent := 0
		for _, i := range q {
			if !k.ep.Fits(vl, wire.Blocks(k.txLen[i])) {
				wait = true
				break
			}
			k.ep.Sent(vl, k.txLen[i])
			k.push(k.tx[i][:k.txLen[i]], i)
			sent++
		}
		if sent > 0 {
			k.fifo[vl] = append(q[:0], q[sent:]...)
		}
	}
	k.next = (k.next + 1) % uint8(k.ep.vls)
	if wait {
		k.ep.Counters.XmitWait++
	}
	k.sendBatch()
}

// sendBatch sends the batch; a datagram the kernel will not take now is
// lost like a packet on a bad link (the link packets make up for its
// credits), which the counters show.
func (k *Cable) sendBatch() {
	for off := 0; off < k.nout; {
		n, errno := mmsg.SendNow(uintptr(k.fd), k.out[off:k.nout])
		if errno != 0 || n == 0 {
			// ECONNREFUSED: nobody at the far end yet. Drop the rest.
			k.sendErrs += uint64(k.nout - off)
			break
		}
		off += n
	}
	for i := range k.nout {
		if s := k.outSlot[i]; s >= 0 {
			k.free = append(k.free, s)
		}
	}
	k.nout = 0
}

// discard drops what waits to go when the link goes down.
func (k *Cable) discard() {
	for vl := range k.fifo {
		for _, i := range k.fifo[vl] {
			k.free = append(k.free, i)
			k.ep.Counters.XmitDiscards++
		}
		k.fifo[vl] = k.fifo[vl][:0]
	}
}

// Waiting is how many packets wait for credit.
func (k *Cable) Waiting() int { return txSlots - len(k.free) - max(0, min(1, k.held+1)) }

// Deadline is when Flush next has something to do by itself.
func (k *Cable) Deadline() time.Time { return k.start.Add(k.ep.Deadline()) }

// State is the link's physical and logical state.
func (k *Cable) State() (PhysState, LogicalState) { return k.ep.State() }

// SetLogical moves the port state (a subnet manager's job).
func (k *Cable) SetLogical(s LogicalState) bool { return k.ep.SetLogical(s) }

// Stats are the endpoint's counters and the cable's own.
type Stats struct {
	Counters
	SendErrors uint64 // datagrams the kernel refused (no far end yet)
}

// Stats reads the counters (on the owner's goroutine).
func (k *Cable) Stats() Stats {
	return Stats{Counters: k.ep.Counters, SendErrors: k.sendErrs}
}

// Name is the cable end's name.
func (k *Cable) Name() string { return k.cfg.Name }

// Close closes the socket.
func (k *Cable) Close() error {
	if k.closed {
		return errors.New("cable: closed twice")
	}
	k.closed = true
	return unix.Close(k.fd)
}
