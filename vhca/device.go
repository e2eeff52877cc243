package vhca

import (
	crand "crypto/rand"
	"math/rand/v2"

	"github.com/softib/softib/vhca/wire"
)

// Time is the engine's clock in nanoseconds. The engine never reads a
// clock: every call that needs the time takes it, so that tests run on a
// virtual clock.
type Time int64

// DeviceAttr is what a program learns from ibv_query_device.
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int // max_qp_rd_atom: RDMA READ/atomics a QP answers at once
	MaxQPInitRdAtom int // max_qp_init_rd_atom: ... a QP has outstanding at once
	MaxResRdAtom    int
	MaxSRQ          int
	MaxSRQWR        int
	MaxSRQSGE       int
	MaxInlineData   int
	MaxAH           int
	MaxPKeys        int
	AtomicCap       AtomicCap
	MaxMsgSize      uint32 // 2^31, as IBA's DMA length allows
	PhysPortCnt     int
	LocalCACKDelay  uint8
}

// AtomicCap is how atomic operations are atomic (ibv_atomic_cap).
type AtomicCap uint8

const (
	AtomicNone AtomicCap = 0
	AtomicHCA  AtomicCap = 1 // atomic against other vHCA operations only
	AtomicGlob AtomicCap = 2 // atomic against the host CPU too
)

// DefaultDeviceAttr are the limits of a vHCA unless configured otherwise:
// those of Linux rxe where it has them, so programs tuned for rxe fit.
func DefaultDeviceAttr() DeviceAttr {
	return DeviceAttr{
		FWVer:           "0.1.0",
		MaxMRSize:       ^uint64(0),
		PageSizeCap:     0xFFFFF000,
		VendorID:        0xFFFFFF,
		MaxQP:           1 << 16,
		MaxQPWR:         1 << 14,
		MaxSGE:          32,
		MaxCQ:           1 << 16,
		MaxCQE:          1<<15 - 1,
		MaxMR:           1 << 18,
		MaxPD:           1 << 16,
		MaxQPRdAtom:     128,
		MaxQPInitRdAtom: 128,
		MaxResRdAtom:    1 << 18,
		MaxSRQ:          1 << 14,
		MaxSRQWR:        1 << 14,
		MaxSRQSGE:       27,
		MaxInlineData:   256,
		MaxAH:           1 << 15,
		MaxPKeys:        64,
		AtomicCap:       AtomicGlob,
		MaxMsgSize:      1 << 31,
		PhysPortCnt:     1,
		LocalCACKDelay:  15,
	}
}

// Config makes a Device.
type Config struct {
	Name     string
	NodeGUID uint64
	Attr     *DeviceAttr // nil: DefaultDeviceAttr
	Ports    []PortConfig
	// Seed, when not zero, makes every random choice (keys, PSNs) of the
	// device repeatable: for tests. Zero draws a secret from crypto/rand.
	Seed uint64
}

// Device is one vHCA. It is not safe for concurrent use: its owner (the
// engine goroutine of verbsd, a test) calls it from one goroutine, which
// is also what makes deregistration safe against in-flight use: no
// packet is half processed while a verb runs.
type Device struct {
	Name  string
	Attr  DeviceAttr
	Ports []*Port

	rng        *rand.Rand
	keys       *keySpace
	nextHandle uint32
	pds        map[uint32]*PD
	mrs        map[uint32]*MR // by key
	cqs        map[uint32]*CQ
	qps        map[uint32]*QP
	qpSlot     [lookupSlots]*QP // in front of qps (lookup.go)
	mrSlot     [lookupSlots]*MR // in front of mrs
	nextQPN    uint32
	ready      qpRing // QPs that may have a packet to send, in turn
	timed      []*QP  // QPs with a timer armed, in the order they were armed
	rx         wire.Packet
	tx         wire.Packet // the view of the frame Transmit built last (ReceiveOwn)
	own        ownDelivery // set while ReceiveOwn delivers a frame (ownack.go)
	scratch    [64]byte    // staging for what a packet path copies through an SGL (atomic results, the GRH area)
	srqs       map[uint32]*SRQ
	events     []Event
	seg        bool   // the Transmit in progress may build segments (segment.go)
	txSeg      []byte // the payload of the segment it built

	// LoopsOwn says that the link turns around every frame to the
	// port's own MAC (as verbsd's engine does, with ReceiveOwn): a
	// request between two QPs of the device then goes without a frame,
	// Transmit returning 0 with a nonzero port (ownreq.go).
	LoopsOwn bool
	stage    []byte // a request's payload on its way without a frame
	// Completed, if set, is called when a request taken without a
	// frame has completed at its responder, before its ACK is taken:
	// the owner publishes the completions there (verbsd moves them to
	// the client's CQ ring, those that its CQRing did not take at
	// once). Without it, the ACK waits for the responder's turn, and
	// the completions for Transmit to return.
	Completed func()
	// The CQs that took a completion since TakeCompleted (the second:
	// the list it returned last, reused).
	completedCQs, completedNext []*CQ

	// FetchRecv, if set, is called when a message finds qp's receive
	// queue empty, before the responder decides there is no receive
	// WQE (RNR): the owner posts there, with PostRecv, the receives
	// the client has posted and it has not yet moved. So it need not
	// move each receive the moment it is posted: an HCA too fetches a
	// receive WQE when a message needs one. It must not change qp's
	// state (a receive it would refuse waits for the owner's next look).
	FetchRecv func(qp *QP)

	mcast    []mcastGroup // the groups QPs joined (mcast.go)
	mcastSeq uint64       // multicast packets received: marks the QPs given one
}

// NewDevice makes a vHCA.
func NewDevice(c Config) (*Device, error) {
	attr := DefaultDeviceAttr()
	if c.Attr != nil {
		attr = *c.Attr
	}
	attr.NodeGUID, attr.SysImageGUID = c.NodeGUID, c.NodeGUID
	var seed [32]byte
	if c.Seed != 0 {
		s := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9E3779B97F4A7C15))
		for i := range seed {
			seed[i] = byte(s.Uint32())
		}
	} else if _, err := crand.Read(seed[:]); err != nil {
		return nil, err
	}
	d := &Device{
		Name: c.Name,
		Attr: attr,
		rng:  rand.New(rand.NewChaCha8(seed)),
		pds:  map[uint32]*PD{},
		mrs:  map[uint32]*MR{},
		cqs:  map[uint32]*CQ{},
		qps:  map[uint32]*QP{},
		srqs: map[uint32]*SRQ{},
	}
	var secret [16]byte
	for i := range secret {
		secret[i] = byte(d.rng.Uint32())
	}
	d.keys = newKeySpace(secret)
	if len(c.Ports) == 0 {
		return nil, invalid("a device needs a port")
	}
	for i, pc := range c.Ports {
		p, err := newPort(d, uint8(i+1), pc)
		if err != nil {
			return nil, err
		}
		d.Ports = append(d.Ports, p)
	}
	d.Attr.PhysPortCnt = len(d.Ports)
	return d, nil
}

// Port returns port n (ports count from 1, as in the verbs), or nil.
func (d *Device) Port(n uint8) *Port {
	if n < 1 || int(n) > len(d.Ports) {
		return nil
	}
	return d.Ports[n-1]
}

// randomPSN draws an initial PSN, as rxe and the pingpongs do.
func (d *Device) randomPSN() uint32 { return d.rng.Uint32() & wire.MaxPSN }
