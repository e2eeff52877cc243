package abi

// Control messages. Every message on the control socket is a Header
// followed by a body whose layout its Op fixes; the structs below are
// the bodies. They are written with encoding/binary in the host's byte
// order, fields in the order given, without padding: every struct is laid
// out so that a C struct with the same members in the same order has no
// implicit padding either (the explicit Pad fields are zero).

// Version is the ABI version: of the control messages and of the ring
// and entry layouts. verbsd refuses a client of any other version.
// Version 2 added PortAttr.Netdev; version 3 the rings' sequence words.
const Version = 3

// MaxMsg is the largest control message, header included.
const MaxMsg = 64 << 10

// DefaultSocket is where verbsd listens unless told otherwise.
const DefaultSocket = "/run/softib/verbsd.sock"

// Op is what a control message asks for (or answers).
type Op uint16

const (
	OpHello              Op = 1
	OpListDevices        Op = 2
	OpOpenDevice         Op = 3
	OpQueryDevice        Op = 4
	OpQueryPort          Op = 5
	OpQueryGID           Op = 6
	OpQueryPKey          Op = 7
	OpAllocPD            Op = 8
	OpDeallocPD          Op = 9
	OpRegMR              Op = 10
	OpDeregMR            Op = 11
	OpCreateCompChannel  Op = 12
	OpDestroyCompChannel Op = 13
	OpCreateCQ           Op = 14
	OpDestroyCQ          Op = 15
	OpCreateSRQ          Op = 16
	OpModifySRQ          Op = 17
	OpQuerySRQ           Op = 18
	OpDestroySRQ         Op = 19
	OpCreateQP           Op = 20
	OpModifyQP           Op = 21
	OpQueryQP            Op = 22
	OpDestroyQP          Op = 23
	OpCreateAH           Op = 24
	OpDestroyAH          Op = 25
	OpQueryCounters      Op = 26
	OpAddAddr            Op = 27
	OpDelAddr            Op = 28
	OpSetPath            Op = 29
	OpAttachMcast        Op = 30
	OpDetachMcast        Op = 31
	OpEvent              Op = 100 // verbsd to client, unasked: an asynchronous event
)

var opNames = map[Op]string{
	OpHello: "Hello", OpListDevices: "ListDevices", OpOpenDevice: "OpenDevice",
	OpQueryDevice: "QueryDevice", OpQueryPort: "QueryPort", OpQueryGID: "QueryGID",
	OpQueryPKey: "QueryPKey", OpAllocPD: "AllocPD", OpDeallocPD: "DeallocPD",
	OpRegMR: "RegMR", OpDeregMR: "DeregMR", OpCreateCompChannel: "CreateCompChannel",
	OpDestroyCompChannel: "DestroyCompChannel", OpCreateCQ: "CreateCQ", OpDestroyCQ: "DestroyCQ",
	OpCreateSRQ: "CreateSRQ", OpModifySRQ: "ModifySRQ", OpQuerySRQ: "QuerySRQ",
	OpDestroySRQ: "DestroySRQ", OpCreateQP: "CreateQP", OpModifyQP: "ModifyQP",
	OpQueryQP: "QueryQP", OpDestroyQP: "DestroyQP", OpCreateAH: "CreateAH",
	OpDestroyAH: "DestroyAH", OpQueryCounters: "QueryCounters", OpAddAddr: "AddAddr",
	OpDelAddr: "DelAddr", OpSetPath: "SetPath", OpAttachMcast: "AttachMcast",
	OpDetachMcast: "DetachMcast", OpEvent: "Event",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return "Op(?)"
}

// Header starts every message. Seq is chosen by the client and echoed in
// the reply; Status is 0 in requests, and in replies 0 or an errno value
// (the body of an error reply is a UTF-8 text saying what was wrong).
type Header struct {
	Version uint16
	Op      Op
	Seq     uint32
	Status  int32
	Pad     uint32
}

// HeaderSize is the encoded size of Header.
const HeaderSize = 12 + 4

// HelloReply answers OpHello (no request body). Its message carries one
// file descriptor: the doorbell eventfd the client writes to when a ring
// it produces into says that verbsd is asleep.
type HelloReply struct {
	Devices  uint32
	MaxEntry uint32 // largest ring entry verbsd accepts
}

// Name is a device name, NUL-padded.
type Name [64]byte

// DeviceEntry is one device in the reply to OpListDevices (an array).
type DeviceEntry struct {
	Name     Name
	NodeGUID uint64
}

// OpenDevice asks for a device; every later verb of the connection is on
// it. The reply is OpenDeviceReply.
type OpenDevice struct{ Name Name }

type OpenDeviceReply struct {
	Ports uint32
	Pad   uint32
}

// DeviceAttr answers OpQueryDevice (ibv_device_attr).
type DeviceAttr struct {
	FWVer           [64]byte
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           uint32
	MaxQPWR         uint32
	MaxSGE          uint32
	MaxCQ           uint32
	MaxCQE          uint32
	MaxMR           uint32
	MaxPD           uint32
	MaxQPRdAtom     uint32
	MaxQPInitRdAtom uint32
	MaxResRdAtom    uint32
	MaxSRQ          uint32
	MaxSRQWR        uint32
	MaxSRQSGE       uint32
	MaxInlineData   uint32
	MaxAH           uint32
	MaxPKeys        uint32
	MaxMsgSize      uint32
	AtomicCap       uint8
	PhysPortCnt     uint8
	LocalCACKDelay  uint8
	Pad             [5]byte
}

// PortQuery names a port and a table index (OpQueryPort, OpQueryGID,
// OpQueryPKey, OpQueryCounters).
type PortQuery struct {
	Port  uint32
	Index uint32
}

// PortAttr answers OpQueryPort (ibv_port_attr).
type PortAttr struct {
	State      uint8
	MaxMTU     uint8
	ActiveMTU  uint8
	LinkLayer  uint8
	LMC        uint8
	Pad0       [3]byte
	GIDTblLen  uint32
	PKeyTblLen uint32
	LID        uint16
	SMLID      uint16
	MaxMsgSize uint32
	MAC        [6]byte
	Paths      uint8 // the paths RoCEv2 can take: PathTAP | PathXDP
	Path       uint8 // the one it takes
	Netdev     Name  // the port's netdev (its TAP, or the one it attaches to), empty if none
}

// GIDEntry answers OpQueryGID. Type: 0 IB, 1 RoCEv1, 2 RoCEv2.
type GIDEntry struct {
	GID  [16]byte
	Type uint32
	Pad  uint32
}

// PKey answers OpQueryPKey.
type PKey struct {
	PKey uint32
	Pad  uint32
}

// Counters answers OpQueryCounters: the port's counters, in the order of
// vhca.PortCounters without the per-cause malformed packet counts, which
// are summed in Malformed.
type Counters struct {
	XmitPackets, XmitBytes, RcvPackets, RcvBytes        uint64
	Malformed, PKeyDrops, QKeyDrops, NoQP, AddrDrops    uint64
	BadOpcode, PSNDrops, Retransmits, RNRNAKsSent       uint64
	RNRNAKsRcvd, NAKsSent, NAKsRcvd, Timeouts, Reserved uint64
}

// Handle names an object of the connection (requests that destroy one,
// replies that create one without more to say).
type Handle struct {
	Handle uint32
	Pad    uint32
}

// RegMR registers [Offset, Offset+Length) of the memfd the message
// carries, at address IOVA of the client (ibv_reg_mr's addr). The memfd
// must be sealed against shrinking (F_SEAL_SHRINK) and at least
// Offset+Length long; Offset is a multiple of the page size.
type RegMR struct {
	PD     uint32
	Access uint32
	Offset uint64
	Length uint64
	IOVA   uint64
}

type RegMRReply struct {
	Handle uint32
	LKey   uint32
	RKey   uint32
	Pad    uint32
}

// CreateCQ makes a CQ of at least CQE entries, its events signalled on
// the completion channel Channel (0: none; a completion channel is made by
// OpCreateCompChannel, whose message carries the eventfd). The reply's
// message carries the memfd of the CQ's ring, RingBytes long.
type CreateCQ struct {
	CQE     uint32
	Channel uint32
}

type CreateCQReply struct {
	Handle    uint32
	CQE       uint32
	RingBytes uint64
}

// CreateSRQ makes a shared receive queue; the reply's message carries the
// memfd of its ring.
type CreateSRQ struct {
	PD     uint32
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32
}

type CreateSRQReply struct {
	Handle    uint32
	MaxWR     uint32
	MaxSGE    uint32
	Pad       uint32
	RingBytes uint64
}

// ModifySRQ arms an SRQ's limit; QuerySRQ's reply is a CreateSRQ.
type ModifySRQ struct {
	Handle uint32
	Limit  uint32
}

// QPCap are a QP's queue sizes (ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	Pad           uint32
}

// CreateQP makes a QP (ibv_create_qp). The reply's message carries one
// memfd holding the send queue's ring at SQOffset and the receive queue's
// at RQOffset (none when the QP receives from an SRQ: RQOffset 0).
type CreateQP struct {
	PD     uint32
	Type   uint32
	SendCQ uint32
	RecvCQ uint32
	SRQ    uint32 // 0: none
	SigAll uint32
	Cap    QPCap
}

type CreateQPReply struct {
	Handle   uint32
	QPN      uint32
	Cap      QPCap
	SQOffset uint64
	RQOffset uint64
	MapBytes uint64
}

// AV is an address vector (ibv_ah_attr). verbsd resolves the Ethernet
// destination itself, as the kernel does for RoCE.
type AV struct {
	DGID         [16]byte
	FlowLabel    uint32
	DLID         uint16
	SL           uint8
	SrcPathBits  uint8
	StaticRate   uint8
	IsGlobal     uint8
	Port         uint8
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	Pad          [6]byte
}

// QPAttr are a QP's attributes (ibv_qp_attr), for OpModifyQP and the
// reply to OpQueryQP.
type QPAttr struct {
	State            uint8
	CurState         uint8
	PathMTU          uint8
	EnSQDAsyncNotify uint8
	SQDraining       uint8
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	Port             uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	PKeyIndex        uint16
	Pad              uint16
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPN          uint32
	AccessFlags      uint32
	RateLimit        uint32
	Cap              QPCap
	AV               AV
}

// ModifyQP sets the attributes Mask names (ibv_qp_attr_mask).
type ModifyQP struct {
	Handle uint32
	Mask   uint32
	Attr   QPAttr
}

// QueryQPReply answers OpQueryQP (request: Handle).
type QueryQPReply struct {
	Attr   QPAttr
	Type   uint32
	SigAll uint32
}

// CreateAH makes an address handle.
type CreateAH struct {
	PD  uint32
	Pad uint32
	AV  AV
}

// Addr adds an IP address to a port or removes it (OpAddAddr,
// OpDelAddr; root or verbsd's user only): its GIDs come and go with it
// (a GID_CHANGE event to every client of the device). An IPv4 address is
// given IPv4-mapped (::ffff:a.b.c.d). AddAddr's reply is a Handle whose
// Handle is the new RoCEv2 GID's index.
type Addr struct {
	Port uint32
	Pad  uint32
	IP   [16]byte
}

// The paths a port's RoCEv2 frames take (PortAttr.Paths and Path,
// SetPath.Path): its TAP netdev, or AF_XDP on an uplink or an attached
// netdev (the fast path).
const (
	PathTAP = 1
	PathXDP = 2
)

// SetPath chooses the path of a port that has two (OpSetPath; root or
// verbsd's user only): Path is PathTAP or PathXDP. It is how softib perf
// --path measures both on one set-up.
type SetPath struct {
	Port uint32
	Path uint32
}

// Mcast attaches a UD QP to a multicast group or detaches it from one
// (OpAttachMcast, OpDetachMcast: ibv_attach_mcast, ibv_detach_mcast): QP
// is the QP's Handle, GID the group's MGID and LID its MLID.
type Mcast struct {
	QP  uint32
	LID uint16
	Pad uint16
	GID [16]byte
}

// Event is an asynchronous event (ibv_async_event): Type is an
// ibv_event_type, Handle the QP, CQ or SRQ it concerns (0 for a device or
// port event), Port the port of a port event.
type Event struct {
	Type   uint32
	Handle uint32
	Port   uint32
	Pad    uint32
}
