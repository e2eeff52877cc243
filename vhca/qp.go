package vhca

import "github.com/softib/softib/vhca/wire"

// SGE is a scatter/gather element: Length bytes at Addr in the region
// whose L_Key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// GlobalRoute is the GRH part of an address vector (ibv_global_route).
type GlobalRoute struct {
	DGID         wire.GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AV is an address vector: how to reach a destination (ibv_ah_attr).
type AV struct {
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	Port        uint8
	GRH         GlobalRoute
	// DMAC is the destination's Ethernet address on a RoCE port: the link
	// layer resolves it (ARP, neighbour discovery) before the verbs see
	// the AV, as the kernel does for ibv_modify_qp and ibv_create_ah.
	DMAC wire.MAC
}

// QPCap are the sizes of a QP's queues (ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr creates a QP (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	SigAll bool // every send WR completes, signaled or not
}

// QPAttr are a QP's attributes (ibv_qp_attr); ModifyQP sets those its
// mask names.
type QPAttr struct {
	State            QPState
	CurState         QPState
	PathMTU          MTU
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPN          uint32
	AccessFlags      Access
	Cap              QPCap
	AV               AV
	PKeyIndex        uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8 // outstanding RDMA READ/atomics as requester
	MaxDestRdAtomic  uint8 // ... as responder
	MinRNRTimer      uint8 // the RNR NAK timer code this QP sends
	Port             uint8
	Timeout          uint8 // local ACK timeout: 4.096 µs × 2^Timeout, 0 = infinite
	RetryCnt         uint8
	RNRRetry         uint8 // 7 = retry forever
	RateLimit        uint32
}

// SendWR is a send work request (ibv_send_wr). PostSend copies it: the
// caller may reuse it, and its SGL and InlineData, at once.
type SendWR struct {
	WRID       uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGL        []SGE
	InlineData []byte // with SendInline: the data itself, in place of the SGL
	Imm        uint32 // immediate data, or the R_Key to invalidate (WRSendWithInv)
	RemoteAddr uint64 // RDMA and atomics
	RKey       uint32
	CompareAdd uint64 // atomics: the compare value (CmpSwap) or the addend (FetchAdd)
	Swap       uint64
	AH         *AH // UD
	RemoteQPN  uint32
	RemoteQKey uint32
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// AH is an address handle for UD sends.
type AH struct {
	PD *PD
	AV AV
}

// CreateAH makes an address handle in pd.
func (d *Device) CreateAH(pd *PD, av AV) (*AH, error) {
	if pd == nil || d.pds[pd.Handle] != pd {
		return nil, ErrNoSuchObject
	}
	p := d.Port(av.Port)
	if p == nil {
		return nil, invalid("AH port %d", av.Port)
	}
	if (av.IsGlobal || p.LinkLayer == LinkLayerEthernet) && int(av.GRH.SGIDIndex) >= len(p.GIDs) {
		return nil, invalid("AH SGID index %d of %d", av.GRH.SGIDIndex, len(p.GIDs))
	}
	pd.users++
	return &AH{PD: pd, AV: av}, nil
}

// DestroyAH destroys an address handle.
func (d *Device) DestroyAH(ah *AH) error {
	if ah == nil || ah.PD == nil {
		return ErrNoSuchObject
	}
	ah.PD.users--
	ah.PD = nil
	return nil
}
