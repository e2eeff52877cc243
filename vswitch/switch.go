package vswitch

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Limits and constants.
const (
	MaxPorts = 254 // external ports; 255 in a forwarding table means "drop"

	// MaxPacketLen is the longest packet a queue takes: a 4096-byte
	// payload and the 126 bytes of the largest header stack, LRH through
	// VCRC (IBA 1.4 §7.7.8).
	MaxPacketLen = 4096 + 126

	// BlockSize is the unit of buffers and credits (§7.9).
	BlockSize = 64

	// VL15Blocks is the size of each input port's VL15 buffer: room for
	// several SMPs (290 bytes, 5 blocks; 330 with a GRH). VL15 is not flow
	// controlled: a VL15 packet that does not fit is dropped (VL15Dropped).
	VL15Blocks = 32

	// OutputBatch is the most packets one Output call sends.
	OutputBatch = 64

	// NoRoute is the LFT entry of a LID with no route (the default).
	NoRoute = 255

	maxBufferBlocks = 1 << 16
	firstMLID       = 0xC000
	lastMLID        = 0xFFFE
	numMLIDs        = lastMLID - firstMLID + 1
	maxPacketBlocks = (MaxPacketLen + BlockSize - 1) / BlockSize
	maxArbEntries   = 64
)

// Config describes a switch.
type Config struct {
	Ports        int           // external ports, 1..Ports; port 0 is the management port
	LID          uint16        // the switch's own LID (port 0)
	LMC          uint8         // LID mask control of port 0
	VLs          int           // data VLs per port: 1, 2, 4, 8 or 15
	BufferBlocks int           // input buffer per port per data VL, in 64-byte blocks (credits)
	HOQLife      time.Duration // head-of-queue lifetime; 0: forever
	SwitchLife   time.Duration // lifetime of a packet in the switch; 0: forever
	Router       bool          // route global packets by DGID prefix instead of switching by DLID
}

// VLArbEntry is one entry of a VL arbitration table (§7.6.9): Weight is in
// 64-byte units, 0 skips the entry.
type VLArbEntry struct {
	VL     uint8
	Weight uint8
}

// Errors.
var (
	ErrConfig = errors.New("vswitch: bad configuration")
	ErrPort   = errors.New("vswitch: no such port")
	ErrLID    = errors.New("vswitch: LID out of range")
	ErrVL     = errors.New("vswitch: bad VL")
	ErrTable  = errors.New("vswitch: bad table")
)

// Stats are counters of the switch as a whole.
type Stats struct {
	ToManagement     uint64 // packets for the management port (its own LID, permissive, router port LIDs), dropped for now
	HopLimitDiscards uint64 // router mode: global packets that arrived with a hop limit of 1 or less
}

// portSet is a set of ports 0..255.
type portSet [4]uint64

func (p *portSet) add(i int)      { p[i>>6] |= 1 << (i & 63) }
func (p *portSet) del(i int)      { p[i>>6] &^= 1 << (i & 63) }
func (p *portSet) has(i int) bool { return p[i>>6]&(1<<(i&63)) != 0 }
func (p *portSet) empty() bool    { return p[0]|p[1]|p[2]|p[3] == 0 }

// each calls fn for each port in p, in increasing order.
func (p *portSet) each(fn func(int)) {
	for w, word := range p {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &= word - 1
			fn(w<<6 | b)
		}
	}
}

type route struct {
	port    int
	nextHop uint16
}

// Switch is a switch (or router). Its methods are not safe for concurrent
// use.
type Switch struct {
	cfg   Config
	np    int // ports including port 0
	qpp   int // queues per input port: the data VLs, then VL15
	ports []portState
	outs  []outPort
	qs    []queue
	// nodes[out*len(qs)+qi] links queue qi into one of outs[out]'s lists.
	nodes []node

	lft    []uint8   // per unicast LID, NoRoute if none
	mftIdx []uint16  // per MLID-0xC000: 1+index into mft, 0 if none
	mft    []portSet // member ports
	sl2vl  [][16]uint8

	routes    map[uint64]route
	hosts     map[[16]byte]route // host routes, looked up before the prefixes
	routerLID []uint16

	freedList []int32 // queues with blocks freed since the last Freed
	stats     Stats
}

type portState struct {
	c                   PortCounters // PortXmitData and PortRcvData unused: bytes below
	xmitBytes, rcvBytes uint64
}

// New returns a switch with empty forwarding tables, identity SL-to-VL
// tables (SL mod VLs) and round-robin VL arbitration.
func New(c Config) (*Switch, error) {
	switch {
	case c.Ports < 1 || c.Ports > MaxPorts:
		return nil, fmt.Errorf("%w: %d ports (1..%d)", ErrConfig, c.Ports, MaxPorts)
	case c.VLs != 1 && c.VLs != 2 && c.VLs != 4 && c.VLs != 8 && c.VLs != 15:
		return nil, fmt.Errorf("%w: %d VLs (1, 2, 4, 8 or 15)", ErrConfig, c.VLs)
	case c.BufferBlocks < 1 || c.BufferBlocks > maxBufferBlocks:
		return nil, fmt.Errorf("%w: %d buffer blocks (1..%d)", ErrConfig, c.BufferBlocks, maxBufferBlocks)
	case c.LMC > 7:
		return nil, fmt.Errorf("%w: LMC %d (0..7)", ErrConfig, c.LMC)
	case c.HOQLife < 0 || c.SwitchLife < 0:
		return nil, fmt.Errorf("%w: negative lifetime", ErrConfig)
	}
	np := c.Ports + 1
	s := &Switch{
		cfg:       c,
		np:        np,
		qpp:       c.VLs + 1,
		ports:     make([]portState, np),
		outs:      make([]outPort, np),
		lft:       make([]uint8, firstMLID),
		mftIdx:    make([]uint16, numMLIDs),
		sl2vl:     make([][16]uint8, np*np),
		routes:    make(map[uint64]route),
		hosts:     make(map[[16]byte]route),
		routerLID: make([]uint16, np),
	}
	for i := range s.lft {
		s.lft[i] = NoRoute
	}
	var id [16]uint8
	for sl := range id {
		id[sl] = uint8(sl % c.VLs)
	}
	for i := range s.sl2vl {
		s.sl2vl[i] = id
	}
	s.qs = make([]queue, np*s.qpp)
	for in := range np {
		for v := range s.qpp {
			vl, blocks := uint8(v), c.BufferBlocks
			if v == c.VLs {
				vl, blocks = 15, VL15Blocks
			}
			s.qs[in*s.qpp+v].init(in, vl, blocks)
		}
	}
	s.freedList = make([]int32, 0, len(s.qs))
	s.nodes = make([]node, np*len(s.qs))
	for i := range s.nodes {
		s.nodes[i].vl = -1
	}
	low := make([]VLArbEntry, c.VLs)
	for v := range low {
		low[v] = VLArbEntry{VL: uint8(v), Weight: 255}
	}
	for o := range s.outs {
		op := &s.outs[o]
		for v := range op.lists {
			op.lists[v] = list{-1, -1}
		}
		op.low.set(low, c.VLs)
	}
	return s, nil
}

// Config returns the switch's configuration.
func (s *Switch) Config() Config { return s.cfg }

// queueIndex is the queue of (port, VL), or -1 if the port runs no such VL.
func (s *Switch) queueIndex(port int, vl uint8) int {
	switch {
	case vl == 15:
		return port*s.qpp + s.cfg.VLs
	case int(vl) < s.cfg.VLs:
		return port*s.qpp + int(vl)
	}
	return -1
}

func (s *Switch) validPort(p int) bool { return p >= 0 && p < s.np }

// SetLFT sets the LFT entry of a unicast LID (0x0001..0xBFFF): the output
// port, 0 for the switch itself, NoRoute (255) for none.
func (s *Switch) SetLFT(lid uint16, port int) error {
	if lid >= firstMLID {
		return fmt.Errorf("%w: %#x is not a unicast LID", ErrLID, lid)
	}
	if port != NoRoute && !s.validPort(port) {
		return fmt.Errorf("%w: %d", ErrPort, port)
	}
	s.lft[lid] = uint8(port)
	return nil
}

// LFTBlock returns block block of the LFT, LIDs block*64..block*64+63, as
// the LinearForwardingTable attribute carries it; blocks past
// the unicast range read as NoRoute.
func (s *Switch) LFTBlock(block int) (b [64]uint8) {
	if block < 0 || block >= firstMLID/64 {
		for i := range b {
			b[i] = NoRoute
		}
		return b
	}
	copy(b[:], s.lft[block*64:])
	return b
}

// SetMFT sets the member ports of a multicast LID (0xC000..0xFFFE); no
// ports (nil) removes the entry, and its packets are then dropped.
func (s *Switch) SetMFT(mlid uint16, ports []int) error {
	if mlid < firstMLID || mlid > lastMLID {
		return fmt.Errorf("%w: %#x is not a multicast LID", ErrLID, mlid)
	}
	var set portSet
	for _, p := range ports {
		if !s.validPort(p) {
			return fmt.Errorf("%w: %d", ErrPort, p)
		}
		set.add(p)
	}
	i := &s.mftIdx[mlid-firstMLID]
	switch {
	case len(ports) == 0:
		if *i != 0 {
			s.mft[*i-1] = portSet{}
		}
		*i = 0
	case *i == 0:
		s.mft = append(s.mft, set)
		*i = uint16(len(s.mft))
	default:
		s.mft[*i-1] = set
	}
	return nil
}

// MFT returns the member ports of a multicast LID.
func (s *Switch) MFT(mlid uint16) []int {
	if mlid < firstMLID || mlid > lastMLID || s.mftIdx[mlid-firstMLID] == 0 {
		return nil
	}
	var ports []int
	s.mft[s.mftIdx[mlid-firstMLID]-1].each(func(p int) { ports = append(ports, p) })
	return ports
}

// SetSL2VL sets the SL-to-VL mapping of packets going from port in to port
// out (SLtoVLMappingTable, §7.6.6). An entry of 15 discards the packets of
// that SL.
func (s *Switch) SetSL2VL(in, out int, table [16]uint8) error {
	if !s.validPort(in) || !s.validPort(out) {
		return fmt.Errorf("%w: %d→%d", ErrPort, in, out)
	}
	for sl, vl := range table {
		if vl != 15 && int(vl) >= s.cfg.VLs {
			return fmt.Errorf("%w: SL%d → VL%d with %d VLs", ErrVL, sl, vl, s.cfg.VLs)
		}
	}
	s.sl2vl[in*s.np+out] = table
	return nil
}

// SL2VL returns the SL-to-VL mapping from port in to port out.
func (s *Switch) SL2VL(in, out int) [16]uint8 {
	if !s.validPort(in) || !s.validPort(out) {
		return [16]uint8{}
	}
	return s.sl2vl[in*s.np+out]
}

// SetVLArb sets the VL arbitration of output port out (§7.6.9): the high-
// and low-priority tables (up to 64 entries each, VLs 0..14; entries of a
// VL the port does not run are never served) and the limit of high
// priority in 4096-byte units (255: none).
func (s *Switch) SetVLArb(out int, high, low []VLArbEntry, highLimit uint8) error {
	if !s.validPort(out) {
		return fmt.Errorf("%w: %d", ErrPort, out)
	}
	if len(high) > maxArbEntries || len(low) > maxArbEntries {
		return fmt.Errorf("%w: more than %d VL arbitration entries", ErrTable, maxArbEntries)
	}
	for _, e := range append(high[:len(high):len(high)], low...) {
		if e.VL >= 15 {
			return fmt.Errorf("%w: VL%d in a VL arbitration table", ErrVL, e.VL)
		}
	}
	op := &s.outs[out]
	op.high.set(high, s.cfg.VLs)
	op.low.set(low, s.cfg.VLs)
	op.highLimit = highLimit
	op.highSent = 0
	return nil
}

// SetRoute makes the router send global packets whose DGID has subnet
// prefix prefix out of port, with DLID nextHopLID (the destination's LID
// on that subnet, or the next router's).
func (s *Switch) SetRoute(prefix uint64, port int, nextHopLID uint16) error {
	if port < 1 || port >= s.np {
		return fmt.Errorf("%w: %d", ErrPort, port)
	}
	s.routes[prefix] = route{port, nextHopLID}
	return nil
}

// SetHostRoute makes the router send global packets to the port whose
// GID is gid out of port with DLID lid: the destination's LID on its
// subnet, as the router learns it there (a prefix route names one
// next hop for a whole subnet; a subnet of several ports needs these).
func (s *Switch) SetHostRoute(gid [16]byte, port int, lid uint16) error {
	if port < 1 || port >= s.np {
		return fmt.Errorf("%w: %d", ErrPort, port)
	}
	s.hosts[gid] = route{port, lid}
	return nil
}

// DeleteRoute removes the route of a subnet prefix.
func (s *Switch) DeleteRoute(prefix uint64) { delete(s.routes, prefix) }

// SetRouterLID sets the LID of a router port on its subnet: the SLID of
// the packets routed out of it, and the DLID of its management packets.
func (s *Switch) SetRouterLID(port int, lid uint16) error {
	if port < 1 || port >= s.np {
		return fmt.Errorf("%w: %d", ErrPort, port)
	}
	s.routerLID[port] = lid
	return nil
}

// Stats returns the switch-wide counters.
func (s *Switch) Stats() Stats { return s.stats }

// Held returns the blocks the queue of (input port in, VL vl) holds.
func (s *Switch) Held(in int, vl uint8) int {
	if !s.validPort(in) {
		return 0
	}
	qi := s.queueIndex(in, vl)
	if qi < 0 {
		return 0
	}
	return s.qs[qi].used
}

// Queued returns the number of packets the queue of (in, vl) holds.
func (s *Switch) Queued(in int, vl uint8) int {
	if !s.validPort(in) {
		return 0
	}
	qi := s.queueIndex(in, vl)
	if qi < 0 {
		return 0
	}
	return s.qs[qi].n
}
