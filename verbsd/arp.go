package verbsd

import (
	"encoding/binary"
	"errors"

	"github.com/softib/softib/vhca/wire"
)

// ARP for a vHCA behind a TAP (RFC 826): the vHCA owns its IPv4
// addresses like a VM's NIC, answers requests for them, announces them
// when it starts (gratuitous ARP), and learns its peers' MACs, which the
// address vectors of its QPs and AHs need (rxe asks the kernel's
// neighbour table; a vHCA behind a TAP keeps its own).

const (
	etherTypeARP = 0x0806
	arpRequest   = 1
	arpReply     = 2
	arpLen       = 28
)

// errResolving says a destination's MAC is being asked for: the verb is
// tried again shortly (see Server.serve).
var errResolving = errors.New("resolving the destination's MAC address (ARP)")

var broadcast = wire.MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// sendARP writes, from the port's address spa, an ARP request for tpa
// (op arpRequest, to the broadcast address) or a reply to the host at tpa
// and tha.
func (h *hca) sendARP(op uint16, spa, tpa [4]byte, tha wire.MAC) {
	if h.tap == nil {
		return
	}
	var f [14 + arpLen]byte
	dst := tha
	if op == arpRequest {
		dst, tha = broadcast, wire.MAC{}
	}
	copy(f[0:], dst[:])
	copy(f[6:], h.mac[:])
	binary.BigEndian.PutUint16(f[12:], etherTypeARP)
	a := f[14:]
	binary.BigEndian.PutUint16(a[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(a[2:], 0x0800) // IPv4
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], op)
	copy(a[8:], h.mac[:])
	copy(a[14:], spa[:])
	copy(a[18:], tha[:])
	copy(a[24:], tpa[:])
	h.tap.Write(f[:])
}

// request asks who has tpa, from the port's first IPv4 address.
func (h *hca) request(tpa [4]byte) {
	if len(h.ipv4) > 0 {
		h.sendARP(arpRequest, h.ipv4[0], tpa, wire.MAC{})
	}
}

// announce sends a gratuitous ARP for each address (a request for itself).
func (h *hca) announce() {
	for _, ip := range h.ipv4 {
		h.sendARP(arpRequest, ip, ip, wire.MAC{})
	}
}

// onARP handles an ARP frame from the TAP: it learns the sender, and
// answers a request for one of the port's addresses. It reports whether
// the frame was ARP.
func (h *hca) onARP(f []byte) bool {
	if len(f) < 14+arpLen || binary.BigEndian.Uint16(f[12:]) != etherTypeARP {
		return false
	}
	a := f[14:]
	if binary.BigEndian.Uint16(a[0:]) != 1 || binary.BigEndian.Uint16(a[2:]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return true
	}
	var sha wire.MAC
	var spa, tpa [4]byte
	copy(sha[:], a[8:14])
	copy(spa[:], a[14:18])
	copy(tpa[:], a[24:28])
	if spa != ([4]byte{}) && sha != h.mac {
		h.neigh.learn(v4key(spa), sha)
	}
	if binary.BigEndian.Uint16(a[6:]) == arpRequest {
		for _, ip := range h.ipv4 {
			if ip == tpa && spa != tpa {
				h.sendARP(arpReply, ip, spa, sha)
			}
		}
	}
	return true
}
