package vhca

import "github.com/softib/softib/vhca/wire"

// LinkLayer is what a port is cabled to (IBV_LINK_LAYER_*).
type LinkLayer uint8

const (
	LinkLayerInfiniBand LinkLayer = 1
	LinkLayerEthernet   LinkLayer = 2
)

// PortState is a port's logical state (ibv_port_state, IBA 1.4 §7.2).
type PortState uint8

const (
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

// GIDType says how a GID table entry is used on the wire.
type GIDType uint8

const (
	GIDTypeIB     GIDType = iota // native IB: GRH when the path is global
	GIDTypeRoCEv1                // Ethernet, ethertype 0x8915, GRH
	GIDTypeRoCEv2                // Ethernet, IPv4 or IPv6, UDP 4791
)

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	GID  wire.GID
	Type GIDType
}

// PortConfig describes a port when the device is made.
type PortConfig struct {
	LinkLayer LinkLayer
	MaxMTU    MTU
	ActiveMTU MTU
	LID       uint16 // IB: assigned by the SM (static in labs)
	LMC       uint8
	SMLID     uint16
	MAC       wire.MAC // Ethernet
	GIDs      []GIDEntry
	PKeys     []uint16 // nil: the default partition 0xFFFF alone
	// InProcess says the port's frames never leave the process (the
	// loopback and in-memory pipes of verbsd): they go without ICRC
	// (wire.Headers.Unsealed). Ethernet ports only.
	InProcess bool
	// SL2VL is the port's SL-to-VL mapping table (IBA 1.4 §7.6.6): the VL
	// of the LRH of a packet sent with an address vector's SL. IB only.
	SL2VL [16]uint8
}

// Port is a vHCA port: its state, addresses and tables, and its counters.
type Port struct {
	dev       *Device
	Num       uint8
	LinkLayer LinkLayer
	State     PortState
	MaxMTU    MTU
	ActiveMTU MTU
	LID       uint16
	LMC       uint8
	SMLID     uint16
	MAC       wire.MAC
	GIDs      []GIDEntry
	PKeys     []uint16
	Counters  PortCounters
	InProcess bool
	SL2VL     [16]uint8
}

func newPort(d *Device, num uint8, c PortConfig) (*Port, error) {
	if c.LinkLayer != LinkLayerInfiniBand && c.LinkLayer != LinkLayerEthernet {
		return nil, invalid("port %d: unknown link layer %d", num, c.LinkLayer)
	}
	if c.MaxMTU == 0 {
		c.MaxMTU = MTU4096
	}
	if c.ActiveMTU == 0 {
		c.ActiveMTU = c.MaxMTU
	}
	if c.MaxMTU.Bytes() == 0 || c.ActiveMTU.Bytes() == 0 || c.ActiveMTU > c.MaxMTU {
		return nil, invalid("port %d: MTUs %d/%d", num, c.ActiveMTU, c.MaxMTU)
	}
	p := &Port{
		dev: d, Num: num, LinkLayer: c.LinkLayer, State: PortActive,
		MaxMTU: c.MaxMTU, ActiveMTU: c.ActiveMTU,
		LID: c.LID, LMC: c.LMC, SMLID: c.SMLID, MAC: c.MAC, InProcess: c.InProcess && c.LinkLayer == LinkLayerEthernet,
		GIDs:  append([]GIDEntry(nil), c.GIDs...),
		PKeys: append([]uint16(nil), c.PKeys...),
		SL2VL: c.SL2VL,
	}
	if len(p.PKeys) == 0 {
		p.PKeys = []uint16{wire.DefaultPKey}
	}
	return p, nil
}

// SetPortState moves a port to state as its link says (the link came up
// or went down, an SM moved it), with the asynchronous event an HCA
// raises then: PORT_ACTIVE when it becomes Active, PORT_ERR when it
// leaves Active.
func (d *Device) SetPortState(n uint8, state PortState) {
	p := d.Port(n)
	if p == nil || p.State == state {
		return
	}
	was := p.State
	p.State = state
	switch {
	case state == PortActive:
		d.raise(Event{Type: EventPortActive, Port: n})
	case was == PortActive:
		d.raise(Event{Type: EventPortErr, Port: n})
	}
}

// PortCounters count what a port sent, received and dropped, and why.
type PortCounters struct {
	XmitPackets, XmitBytes uint64
	RcvPackets, RcvBytes   uint64
	// Drops of received packets, by cause.
	RcvMalformed [wire.NumParseErrors]uint64 // refused by the parser, by ParseError
	RcvPKeyDrops uint64                      // P_Key not the QP's: silently dropped (IBA 1.4 §9.6)
	RcvQKeyDrops uint64                      // UD Q_Key mismatch
	RcvNoQP      uint64                      // no QP by that number, or not in a receiving state
	RcvAddrDrops uint64                      // a connected QP's packet from another address than its peer's
	RcvBadOpcode uint64                      // opcode of another transport than the QP's, or out of sequence
	RcvPSNDrops  uint64                      // duplicate or out-of-sequence packets dropped
	Retransmits  uint64                      // request packets sent again
	RNRNAKsSent  uint64
	RNRNAKsRcvd  uint64
	NAKsSent     uint64
	NAKsRcvd     uint64
	Timeouts     uint64 // retransmission timer expiries
}

// PortAttr is what ibv_query_port tells of a port.
type PortAttr struct {
	State      PortState
	MaxMTU     MTU
	ActiveMTU  MTU
	GIDTblLen  int
	PKeyTblLen int
	LID        uint16
	SMLID      uint16
	LMC        uint8
	LinkLayer  LinkLayer
	MaxMsgSize uint32
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (d *Device) QueryDevice() DeviceAttr { return d.Attr }

// QueryPort returns port n's attributes (ibv_query_port).
func (d *Device) QueryPort(n uint8) (PortAttr, error) {
	p := d.Port(n)
	if p == nil {
		return PortAttr{}, invalid("port %d", n)
	}
	return PortAttr{State: p.State, MaxMTU: p.MaxMTU, ActiveMTU: p.ActiveMTU, GIDTblLen: len(p.GIDs),
		PKeyTblLen: len(p.PKeys), LID: p.LID, SMLID: p.SMLID, LMC: p.LMC, LinkLayer: p.LinkLayer,
		MaxMsgSize: d.Attr.MaxMsgSize}, nil
}

// QueryGID returns entry index of port n's GID table (ibv_query_gid).
func (d *Device) QueryGID(n uint8, index int) (GIDEntry, error) {
	p := d.Port(n)
	if p == nil || index < 0 || index >= len(p.GIDs) {
		return GIDEntry{}, invalid("GID %d of port %d", index, n)
	}
	return p.GIDs[index], nil
}

// QueryPKey returns entry index of port n's P_Key table (ibv_query_pkey).
func (d *Device) QueryPKey(n uint8, index int) (uint16, error) {
	p := d.Port(n)
	if p == nil || index < 0 || index >= len(p.PKeys) {
		return 0, invalid("P_Key %d of port %d", index, n)
	}
	return p.PKeys[index], nil
}
