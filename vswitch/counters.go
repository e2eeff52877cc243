package vswitch

// PortCounters are the fields of the PortCounters and PortCountersExtended
// attributes (IBA 1.4 §16.1) of one port, as 64-bit
// values that do not wrap. PortXmitData and PortRcvData are in 4-byte
// words; PortXmitWait in Output calls (see the package documentation).
type PortCounters struct {
	SymbolErrorCounter           uint64
	LinkErrorRecoveryCounter     uint64
	LinkDownedCounter            uint64
	PortRcvErrors                uint64
	PortRcvRemotePhysicalErrors  uint64
	PortRcvSwitchRelayErrors     uint64
	PortXmitDiscards             uint64
	PortXmitConstraintErrors     uint64
	PortRcvConstraintErrors      uint64
	LocalLinkIntegrityErrors     uint64
	ExcessiveBufferOverrunErrors uint64
	VL15Dropped                  uint64
	PortXmitData                 uint64
	PortRcvData                  uint64
	PortXmitPkts                 uint64
	PortRcvPkts                  uint64
	PortXmitWait                 uint64
	PortUnicastXmitPkts          uint64
	PortUnicastRcvPkts           uint64
	PortMulticastXmitPkts        uint64
	PortMulticastRcvPkts         uint64
}

// Counters returns the counters of a port (0..Ports).
func (s *Switch) Counters(port int) PortCounters {
	if !s.validPort(port) {
		return PortCounters{}
	}
	ps := &s.ports[port]
	c := ps.c
	c.PortXmitData = ps.xmitBytes / 4
	c.PortRcvData = ps.rcvBytes / 4
	return c
}

// ClearCounters zeroes the counters of a port, as a PMA Set of
// PortCounters with every select bit does.
func (s *Switch) ClearCounters(port int) {
	if s.validPort(port) {
		s.ports[port] = portState{}
	}
}

// PortCountersAttribute holds the counters at the widths of the
// PortCounters attribute (§16.1), each stopping at its maximum as the
// spec's counters do instead of wrapping.
type PortCountersAttribute struct {
	SymbolErrorCounter           uint16
	LinkErrorRecoveryCounter     uint8
	LinkDownedCounter            uint8
	PortRcvErrors                uint16
	PortRcvRemotePhysicalErrors  uint16
	PortRcvSwitchRelayErrors     uint16
	PortXmitDiscards             uint16
	PortXmitConstraintErrors     uint8
	PortRcvConstraintErrors      uint8
	LocalLinkIntegrityErrors     uint8 // 4 bits
	ExcessiveBufferOverrunErrors uint8 // 4 bits
	VL15Dropped                  uint16
	PortXmitData                 uint32
	PortRcvData                  uint32
	PortXmitPkts                 uint32
	PortRcvPkts                  uint32
	PortXmitWait                 uint32
}

func sat(v, max uint64) uint64 { return min(v, max) }

// Attribute returns c saturated at the widths of the PortCounters
// attribute.
func (c PortCounters) Attribute() PortCountersAttribute {
	return PortCountersAttribute{
		SymbolErrorCounter:           uint16(sat(c.SymbolErrorCounter, 0xFFFF)),
		LinkErrorRecoveryCounter:     uint8(sat(c.LinkErrorRecoveryCounter, 0xFF)),
		LinkDownedCounter:            uint8(sat(c.LinkDownedCounter, 0xFF)),
		PortRcvErrors:                uint16(sat(c.PortRcvErrors, 0xFFFF)),
		PortRcvRemotePhysicalErrors:  uint16(sat(c.PortRcvRemotePhysicalErrors, 0xFFFF)),
		PortRcvSwitchRelayErrors:     uint16(sat(c.PortRcvSwitchRelayErrors, 0xFFFF)),
		PortXmitDiscards:             uint16(sat(c.PortXmitDiscards, 0xFFFF)),
		PortXmitConstraintErrors:     uint8(sat(c.PortXmitConstraintErrors, 0xFF)),
		PortRcvConstraintErrors:      uint8(sat(c.PortRcvConstraintErrors, 0xFF)),
		LocalLinkIntegrityErrors:     uint8(sat(c.LocalLinkIntegrityErrors, 0xF)),
		ExcessiveBufferOverrunErrors: uint8(sat(c.ExcessiveBufferOverrunErrors, 0xF)),
		VL15Dropped:                  uint16(sat(c.VL15Dropped, 0xFFFF)),
		PortXmitData:                 uint32(sat(c.PortXmitData, 0xFFFFFFFF)),
		PortRcvData:                  uint32(sat(c.PortRcvData, 0xFFFFFFFF)),
		PortXmitPkts:                 uint32(sat(c.PortXmitPkts, 0xFFFFFFFF)),
		PortRcvPkts:                  uint32(sat(c.PortRcvPkts, 0xFFFFFFFF)),
		PortXmitWait:                 uint32(sat(c.PortXmitWait, 0xFFFFFFFF)),
	}
}
