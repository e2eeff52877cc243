package wire

import "encoding/binary"

// Ethernet II framing (IEEE 802.3) as RoCE uses it.
const (
	EthernetLen     = 14
	VLANTagLen      = 4
	EtherTypeIPv4   = 0x0800
	EtherTypeIPv6   = 0x86DD
	EtherTypeRoCEv1 = 0x8915 // IBoE: GRH, BTH ... (IBA 1.4 Annex A16)
	EtherTypeVLAN   = 0x8100
	EtherTypeQinQ   = 0x88A8
	// MinFrameLen is the shortest Ethernet frame without its FCS: shorter
	// frames are padded, so a receiver finds the packet's end in the IP
	// length or the GRH PayLen, never in the frame length.
	MinFrameLen = 60
)

// MAC is an Ethernet address.
type MAC [6]byte

// Ethernet is a view of an Ethernet II header: destination, source, type.
type Ethernet []byte

func (h Ethernet) Dst() (m MAC)          { copy(m[:], h[0:6]); return }
func (h Ethernet) Src() (m MAC)          { copy(m[:], h[6:12]); return }
func (h Ethernet) EtherType() uint16     { return binary.BigEndian.Uint16(h[12:]) }
func (h Ethernet) SetDst(m MAC)          { copy(h[0:6], m[:]) }
func (h Ethernet) SetSrc(m MAC)          { copy(h[6:12], m[:]) }
func (h Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(h[12:], t) }
