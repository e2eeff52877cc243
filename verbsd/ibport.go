package verbsd

import (
	"encoding/binary"
	"fmt"

	"github.com/softib/softib/vhca"
	"github.com/softib/softib/vhca/link/cable"
	"github.com/softib/softib/vhca/wire"
)

// CableConfig makes a device's port a native InfiniBand port on a cable
// (vhca/link/cable) to a vswitch or another vHCA.
type CableConfig struct {
	Local, Peer string // UDP addresses of this end and the other
	// VLs: data VLs (1 if zero); BufferBlocks: receive buffer per data
	// VL in 64-byte blocks, the credits granted (256 if zero).
	VLs, BufferBlocks int
	LID               uint16 // the port's base LID (static, from the topology)
	LMC               uint8
	SMLID             uint16
	// SubnetPrefix is the upper half of the port's GID (fe80:: if zero).
	SubnetPrefix uint64
	// SL2VL maps the address vector's SL to the VL its packets take on
	// the cable; nil: SL modulo VLs.
	SL2VL []uint8
}

// defaultSubnetPrefix is the link-local prefix an SM gives by default.
const defaultSubnetPrefix = 0xFE80_0000_0000_0000

// ibPort is the port configuration of a device on a cable: LID, one GID
// (subnet prefix and port GUID, GID index 0 as on every IB port), the SL
// to VL table.
func ibPort(c *CableConfig, guid uint64) (vhca.PortConfig, error) {
	if c.LID == 0 || c.LID >= 0xC000 {
		return vhca.PortConfig{}, fmt.Errorf("LID %d: a unicast LID (1..0xBFFF) is needed", c.LID)
	}
	vls := max(c.VLs, 1)
	prefix := c.SubnetPrefix
	if prefix == 0 {
		prefix = defaultSubnetPrefix
	}
	var gid wire.GID
	binary.BigEndian.PutUint64(gid[:8], prefix)
	binary.BigEndian.PutUint64(gid[8:], guid)
	pc := vhca.PortConfig{LinkLayer: vhca.LinkLayerInfiniBand, MaxMTU: vhca.MTU4096, ActiveMTU: vhca.MTU4096,
		LID: c.LID, LMC: c.LMC, SMLID: c.SMLID, GIDs: []vhca.GIDEntry{{GID: gid, Type: vhca.GIDTypeIB}}}
	for sl := range pc.SL2VL {
		pc.SL2VL[sl] = uint8(sl % vls)
		if sl < len(c.SL2VL) {
			if int(c.SL2VL[sl]) >= vls {
				return vhca.PortConfig{}, fmt.Errorf("SL %d to VL %d: the cable has %d data VLs", sl, c.SL2VL[sl], vls)
			}
			pc.SL2VL[sl] = c.SL2VL[sl]
		}
	}
	return pc, nil
}

// openCable opens the cable of a device's IB port.
func openCable(name, netns string, c *CableConfig) (*cable.Cable, error) {
	k, err := cable.Open(cable.Config{Name: name, Local: c.Local, Peer: c.Peer, VLs: c.VLs, BufferBlocks: c.BufferBlocks, Netns: netns})
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", name, err)
	}
	return k, nil
}

// ownLID reports whether a packet to dlid is the port's own (loopback,
// as an HCA does in hardware): its base LID with any path bits.
func ownLID(pt *vhca.Port, dlid uint16) bool {
	mask := ^uint16(1<<pt.LMC - 1)
	return dlid&mask == pt.LID&mask
}

// syncPortState makes the port's state the cable's: Active once the link
// is up (and, with an SM, once it says so), Down otherwise.
func (h *hca) syncPortState() {
	_, l := h.cable.State()
	h.dev.SetPortState(1, vhca.PortState(l))
}
