// Package cable is a native InfiniBand link between two ports — a vHCA's
// or a vswitch's — carried over UDP: one IB packet (LRH through VCRC) or
// one link packet per datagram, so that a cable joins two processes on a
// host, two namespaces or two VMs. On it run what IBA 1.4 chapter 7 gives a
// physical link: bring-up and liveness (§7.2), the VCRC check (§7.8.2) and
// credit-based flow control per data VL (§7.9): a sender never transmits
// on a VL without credit, so a healthy fabric drops nothing for want of
// buffer. VL15 carries management packets only, outside flow control.
//
// Endpoint is the protocol, without I/O and with the time given; Cable is
// an Endpoint on a UDP socket.
package cable

import (
	"time"

	"github.com/softib/softib/vhca/wire"
)

// PhysState is the physical link state as PortInfo reports it (§14.2.5.6):
// Polling while looking for the other end, LinkUp once both ends hear
// each other.
type PhysState uint8

const (
	PhysPolling PhysState = 2
	PhysLinkUp  PhysState = 5
)

func (s PhysState) String() string {
	if s == PhysLinkUp {
		return "LinkUp"
	}
	return "Polling"
}

// LogicalState is the port state of PortInfo (§7.2): Down until the
// physical link is up, then Init; a subnet manager takes it to Armed and
// Active. A cable configured statically (no SM) goes Active at once.
type LogicalState uint8

const (
	LogicalDown   LogicalState = 1
	LogicalInit   LogicalState = 2
	LogicalArmed  LogicalState = 3
	LogicalActive LogicalState = 4
)

func (s LogicalState) String() string {
	return [...]string{"?", "Down", "Init", "Armed", "Active"}[min(int(s), 4)]
}

// Timing of the link protocol. FCInterval: a flow control packet per VL
// at least this often (the spec asks for one every 65,536 symbol times;
// here they also carry liveness). DownAfter: a link that hears nothing
// for this long goes Down — long enough that a far end descheduled on a
// busy host (a 2-core machine running many tests) is not taken for gone.
// PollInterval: how often a polling end says Init.
const (
	DefaultFCInterval   = 10 * time.Millisecond
	DefaultDownAfter    = 500 * time.Millisecond
	DefaultPollInterval = 10 * time.Millisecond
)

// Counters of an endpoint, named as PortCounters names them (§16.1.3.5).
// Data are in bytes here (the MAD gives 4-byte words).
type Counters struct {
	XmitData, RcvData                uint64
	XmitPkts, RcvPkts                uint64
	RcvErrors                        uint64 // malformed packets, bad VCRC or LPCRC
	XmitWait                         uint64 // flushes in which a packet waited for credit
	XmitDiscards                     uint64 // packets discarded when the link went down
	LinkDowned                       uint64 // times the link went down after being up
	ExcessiveBufferOverrunErrors     uint64 // data beyond the credits granted (dropped)
	VL15Dropped                      uint64 // VL15 packets dropped for want of buffer
	LinkPacketsSent, LinkPacketsRcvd uint64
}

// maxCredit is how far ahead of ABR an FCCL may grant (§7.9.4.2: the
// credit limit is at most 2048 blocks beyond what was received).
const maxCredit = 2048

// Endpoint is one end of a link: its states and, per data VL, the
// sender's and the receiver's flow control counts.
type Endpoint struct {
	vls, buffer  int // data VLs, receive buffer blocks per data VL
	static       bool
	phys         PhysState
	logical      LogicalState
	peerUp       bool // the other end has sent Normal flow control
	heard        time.Duration
	lastInit     time.Duration
	sayInit      bool
	fcInterval   time.Duration
	downAfter    time.Duration
	pollInterval time.Duration
	tx           [15]struct {
		fctbs, fccl uint16 // blocks sent; the limit granted by the other end
		granted     bool   // a limit has been granted since the link came up
	}
	rx [15]struct {
		abr  uint16 // adjusted blocks received
		used int    // blocks the owner holds
		sent uint16 // the FCCL last advertised
		at   time.Duration
	}
	Counters Counters
}

// NewEndpoint makes an endpoint with vls data VLs (1..15) of buffer
// blocks each. static: no subnet manager, the port goes Active as soon as
// the link is up.
func NewEndpoint(vls, buffer int, static bool) *Endpoint {
	e := &Endpoint{vls: vls, buffer: buffer, static: static, phys: PhysPolling, logical: LogicalDown,
		fcInterval: DefaultFCInterval, downAfter: DefaultDownAfter, pollInterval: DefaultPollInterval, sayInit: true}
	return e
}

// SetTiming changes the intervals (zero keeps the default).
func (e *Endpoint) SetTiming(fc, down, poll time.Duration) {
	if fc > 0 {
		e.fcInterval = fc
	}
	if down > 0 {
		e.downAfter = down
	}
	if poll > 0 {
		e.pollInterval = poll
	}
}

// State is the link's physical and logical state.
func (e *Endpoint) State() (PhysState, LogicalState) { return e.phys, e.logical }

// SetLogical is the subnet manager's move of the port state (Armed,
// Active); refused while the link is down.
func (e *Endpoint) SetLogical(s LogicalState) bool {
	if e.phys != PhysLinkUp || s < LogicalInit {
		return false
	}
	e.logical = s
	return true
}

// VLs is the number of data VLs.
func (e *Endpoint) VLs() int { return e.vls }

// up brings the link up with fresh counts on both sides (§7.9.4.3: after
// link initialization FCTBS and ABR start at zero).
func (e *Endpoint) up(now time.Duration) {
	e.phys = PhysLinkUp
	e.logical = LogicalInit
	if e.static {
		e.logical = LogicalActive
	}
	e.peerUp = false
	for i := range e.tx {
		e.tx[i].fctbs, e.tx[i].fccl, e.tx[i].granted = 0, 0, false
	}
	for i := range e.rx {
		e.rx[i].abr, e.rx[i].at = 0, now-e.fcInterval // advertise at once
		e.rx[i].sent = e.fccl(i) ^ 1                  // differs: sent next
	}
}

// down takes the link down: the owner is to discard what waits to be
// sent (XmitDiscards is the owner's to count).
func (e *Endpoint) down() {
	if e.phys == PhysLinkUp {
		e.Counters.LinkDowned++
	}
	e.phys, e.logical, e.peerUp, e.sayInit = PhysPolling, LogicalDown, false, true
}

// fccl is the credit limit the receiver of VL vl grants: ABR plus the free
// blocks of its buffer, at most 2048 ahead, modulo 4096 (§7.9.4.2).
func (e *Endpoint) fccl(vl int) uint16 {
	free := min(max(e.buffer-e.rx[vl].used, 0), maxCredit)
	return (e.rx[vl].abr + uint16(free)) & wire.BlockMask
}

// Fits reports whether a data packet of blocks may be sent on vl now:
// the link is up and (FCCL − (FCTBS + blocks)) mod 4096 ≤ 2048 (§7.9.4.2).
// VL15 needs no credit.
func (e *Endpoint) Fits(vl uint8, blocks int) bool {
	if e.phys != PhysLinkUp {
		return false
	}
	if vl == 15 {
		return true
	}
	if int(vl) >= e.vls || !e.tx[vl].granted || e.logical != LogicalActive {
		return false
	}
	t := &e.tx[vl]
	return (t.fccl-(t.fctbs+uint16(blocks)))&wire.BlockMask <= maxCredit
}

// Sent accounts a data packet sent on vl.
func (e *Endpoint) Sent(vl uint8, bytes int) {
	e.Counters.XmitPkts++
	e.Counters.XmitData += uint64(bytes)
	if vl < 15 {
		e.tx[vl].fctbs = (e.tx[vl].fctbs + uint16(wire.Blocks(bytes))) & wire.BlockMask
	}
}

// Received accounts a data packet received on vl and reports whether the
// owner may take it: within the credits granted, on a link that is up.
// A packet taken holds its blocks until Release.
func (e *Endpoint) Received(now time.Duration, vl uint8, bytes int) bool {
	e.heard = now
	if e.phys != PhysLinkUp || vl != 15 && (e.logical < LogicalArmed) {
		e.Counters.RcvErrors++
		return false
	}
	if vl == 15 {
		e.Counters.RcvPkts++
		e.Counters.RcvData += uint64(bytes)
		return true
	}
	if int(vl) >= e.vls {
		e.Counters.RcvErrors++
		return false
	}
	r := &e.rx[vl]
	b := wire.Blocks(bytes)
	r.abr = (r.abr + uint16(b)) & wire.BlockMask
	if r.used+b > e.buffer {
		e.Counters.ExcessiveBufferOverrunErrors++
		return false
	}
	r.used += b
	e.Counters.RcvPkts++
	e.Counters.RcvData += uint64(bytes)
	return true
}

// Release gives back the buffer a taken packet of bytes held on vl.
func (e *Endpoint) Release(vl uint8, bytes int) {
	if vl >= 15 {
		return
	}
	e.rx[vl].used = max(e.rx[vl].used-wire.Blocks(bytes), 0)
}

// ReleaseBlocks gives back blocks of vl's buffer.
func (e *Endpoint) ReleaseBlocks(vl uint8, blocks int) {
	if vl < 15 {
		e.rx[vl].used = max(e.rx[vl].used-blocks, 0)
	}
}

// Held is how many blocks of vl's buffer the owner holds.
func (e *Endpoint) Held(vl uint8) int { return e.rx[vl].used }

// LinkPacket takes a received link packet.
//
// The bring-up: an end that is polling says Init until it hears the
// other end, and comes up on either packet, Init or Normal; an end that
// is up says only Normal. An Init heard by an end that is up and has
// heard Normal from the other end means the other end started afresh:
// the link went down and came back, and both count from zero again. An
// Init heard before any Normal is the other end's older word, still on
// its way: nothing to do. (An up end answering Init with Init would set
// two ends in step bouncing Inits and resetting each other for ever.)
func (e *Endpoint) LinkPacket(now time.Duration, f wire.FlowControl) {
	e.heard = now
	e.Counters.LinkPacketsRcvd++
	if f.Op() == wire.FlowControlInit {
		switch {
		case e.phys != PhysLinkUp:
			e.up(now)
		case e.peerUp:
			e.Counters.LinkDowned++
			e.up(now)
		}
		return
	}
	if e.phys != PhysLinkUp {
		e.up(now)
	}
	if int(f.VL()) >= e.vls {
		return
	}
	e.peerUp = true
	t := &e.tx[f.VL()]
	t.fccl, t.granted = f.FCCL(), true
	// §7.9.4.3: the receiver sets ABR to the sender's FCTBS, recovering
	// the blocks of packets lost on the way.
	e.rx[f.VL()].abr = f.FCTBS()
}

// Tick advances the time: a link that heard nothing for DownAfter goes
// down. It reports whether it went down now.
func (e *Endpoint) Tick(now time.Duration) bool {
	if e.phys == PhysLinkUp && now-e.heard > e.downAfter {
		e.down()
		return true
	}
	return false
}

// LinkPackets calls emit for each link packet due now: Init while
// polling (every PollInterval) or when the other end needs one, then per
// data VL a Normal one when FCInterval passed, or when its credit limit
// changed and the sender is running short: it has used half the credit
// the last one granted. A limit that moves with every packet received
// and released is not worth a datagram each time: the link packet would
// double the datagrams, and the system calls, of a request-response
// exchange.
func (e *Endpoint) LinkPackets(now time.Duration, emit func(op, vl uint8, fctbs, fccl uint16)) {
	if e.phys != PhysLinkUp {
		if e.sayInit || now-e.lastInit >= e.pollInterval {
			e.sayInit, e.lastInit = false, now
			e.Counters.LinkPacketsSent++
			emit(wire.FlowControlInit, 0, 0, 0)
		}
		return
	}
	for vl := range e.vls {
		r := &e.rx[vl]
		limit := e.fccl(vl)
		left := int((r.sent - r.abr) & wire.BlockMask) // the sender's credit, as last granted
		if limit != r.sent && (left > maxCredit || 2*left < min(e.buffer, maxCredit)) || now-r.at >= e.fcInterval {
			r.sent, r.at = limit, now
			e.Counters.LinkPacketsSent++
			emit(wire.FlowControlNormal, uint8(vl), e.tx[vl].fctbs, limit)
		}
	}
}

// Deadline is when the endpoint next has something to do by itself: a
// periodic link packet, or the liveness check.
func (e *Endpoint) Deadline() time.Duration {
	if e.phys != PhysLinkUp {
		return e.lastInit + e.pollInterval
	}
	d := e.heard + e.downAfter + 1
	for vl := range e.vls {
		d = min(d, e.rx[vl].at+e.fcInterval)
	}
	return d
}
