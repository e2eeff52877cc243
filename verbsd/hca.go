package verbsd

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"

	"github.com/softib/softib/ebpf"
	"github.com/softib/softib/vhca"
	"github.com/softib/softib/vhca/link/cable"
	"github.com/softib/softib/vhca/link/netdev"
	"github.com/softib/softib/vhca/link/pipe"
	"github.com/softib/softib/vhca/link/tap"
	"github.com/softib/softib/vhca/wire"
)

// DeviceConfig describes one hosted vHCA.
type DeviceConfig struct {
	Name string
	// NodeGUID: zero derives a stable one from the host name and the
	// device name, so that a restarted verbsd keeps its GIDs.
	NodeGUID uint64
	// Addrs are the port's IP addresses: one RoCEv2 GID each, after the
	// link-local GID at index 0 (Linux rxe's order).
	Addrs []netip.Addr
	// Pipe names another hosted vHCA this one is joined to by an
	// in-memory link (vhca/link/pipe). Empty: loopback only.
	Pipe string
	// TAP makes the port a TAP netdev (vhca/link/tap) named after the
	// device, with MTU (1500 if zero), moved into the network namespace
	// at Netns if set: the vHCA is an Ethernet endpoint behind it that
	// owns Addrs and answers ARP for them.
	TAP   bool
	MTU   int
	Netns string
	// RoCEv1 appends a RoCEv1 GID (ethertype 0x8915) for each RoCEv2
	// one, after them: v1 only where the user asks for it.
	RoCEv1 bool
	// Uplink, with TAP, names the netdev (in Netns) the TAP is bridged
	// to: RoCEv2 frames go both ways through AF_XDP on it (the fast
	// path, package ebpf); ARP, ND and all else through the TAP.
	Uplink string
	// Attach makes the port share an existing netdev (in Netns), as
	// `rdma link add rxe0 type rxe netdev X` does for rxe: its MAC, MTU
	// and addresses (followed as they change), the kernel's ARP and ND,
	// RoCEv2 through AF_XDP. Not with TAP or Pipe.
	Attach string
	// XDPMode is how the steering program attaches for Uplink or Attach.
	XDPMode ebpf.Mode
	// Cable makes the port a native InfiniBand port on a cable to a
	// vswitch or another vHCA (not with Pipe, TAP or Attach); its UDP
	// socket lives in Netns if that is set.
	Cable *CableConfig
	// Seed makes keys and PSNs repeatable (tests); zero: random.
	Seed uint64
}

// hca is a vHCA as verbsd hosts it: the device, its Ethernet addressing
// and the link of its port.
type hca struct {
	name string
	dev  *vhca.Device
	mac  wire.MAC
	pipe *pipe.End // nil: loopback only
	peer *hca
	tap  *tap.TAP // nil: no netdev
	// tapNext: when the engine next reads the TAP while the fast path
	// carries RoCEv2 (the TAP then carries ARP and ND alone).
	tapNext vhca.Time
	fast    *fastPath      // nil: no AF_XDP path
	nd      *netdev.Netdev // attach mode: the netdev shared
	cable   *cable.Cable   // native IB port
	ipv4    [][4]byte      // the port's IPv4 addresses
	neigh   neighbours     // ARP and ND
	rocev1  bool
	cqs     []*cqRing  // every CQ of every client on this device (addCQ, dropCQ)
	cqOrder hotFirst   // cqs[:hot] are looked at every look, the rest every coldEvery
	qps     []*qpRings // every QP with its rings (addQP, dropQP)
	sqWatch []sqWatch  // qps[i]'s send ring, as each round looks at it
	qpOrder hotFirst   // qps[:hot] are looked at every round, the rest every coldEvery
	srqs    []*srqRing
}

// sqWatch is what a round looks at of a QP's send ring (abi.Ring.Watch):
// the sequence word of its next entry and the value that says it is
// published. Side by side in an array, every QP costs a round one load,
// where Ready, through the QP's structures, costs four that depend on
// each other: with many idle QPs (other clients'), most of a round.
type sqWatch struct {
	word *uint32
	want uint32
	seen uint32 // the engine's round when the ring last had work (wrapping)
}

// addQP and dropQP keep qps and sqWatch in step. A new QP is hot: its
// rounds count from now.
func (h *hca) addQP(r *qpRings, now uint32) {
	word, want := r.sq.Watch()
	h.qps, h.sqWatch = append(h.qps, r), append(h.sqWatch, sqWatch{word, want, now})
	h.qpOrder.added(len(h.qps)-1, h.swapQPs)
}

// dropQP moves r last, keeping the hot QPs first, and clears the slots
// left behind: no pointer into a ring about to be unmapped stays in the
// arrays' storage.
func (h *hca) dropQP(r *qpRings) {
	for i, q := range h.qps {
		if q == r {
			last := len(h.qps) - 1
			h.qpOrder.removed(i, last, h.swapQPs)
			h.qps[last], h.sqWatch[last] = nil, sqWatch{}
			h.qps, h.sqWatch = h.qps[:last], h.sqWatch[:last]
			return
		}
	}
}

func (h *hca) swapQPs(i, j int) {
	h.qps[i], h.qps[j] = h.qps[j], h.qps[i]
	h.sqWatch[i], h.sqWatch[j] = h.sqWatch[j], h.sqWatch[i]
}

// addCQ and dropCQ keep the CQs, the hot ones first. A new CQ is hot.
func (h *hca) addCQ(c *cqRing, now uint32) {
	c.seen = now
	h.cqs = append(h.cqs, c)
	h.cqOrder.added(len(h.cqs)-1, h.swapCQs)
}

func (h *hca) dropCQ(c *cqRing) {
	for i, x := range h.cqs {
		if x == c {
			last := len(h.cqs) - 1
			h.cqOrder.removed(i, last, h.swapCQs)
			h.cqs[last] = nil
			h.cqs = h.cqs[:last]
			return
		}
	}
}

func (h *hca) swapCQs(i, j int) { h.cqs[i], h.cqs[j] = h.cqs[j], h.cqs[i] }

// derivedMAC is a locally administered unicast MAC that stays the same
// for a device name on a host.
func derivedMAC(name string) wire.MAC {
	host, _ := os.Hostname()
	h := fnv.New64a()
	h.Write([]byte(host + "/" + name))
	var m wire.MAC
	s := h.Sum64()
	for i := range m {
		m[i] = byte(s >> (8 * i))
	}
	m[0] = m[0]&^1 | 2
	return m
}

// macFromGUID and guidFromMAC convert between a MAC and its modified
// EUI-64 (RFC 4291 appendix A), as rxe derives its node GUID from the
// netdev's MAC.
func guidFromMAC(m wire.MAC) uint64 {
	b := [8]byte{m[0] ^ 2, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]}
	return binary.BigEndian.Uint64(b[:])
}

func macFromGUID(g uint64) wire.MAC {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], g)
	return wire.MAC{b[0] ^ 2, b[1], b[2], b[5], b[6], b[7]}
}

func newHCA(c DeviceConfig) (*hca, error) {
	if c.Name == "" || len(c.Name) >= 64 {
		return nil, fmt.Errorf("device name %q: want 1 to 63 characters", c.Name)
	}
	guid := c.NodeGUID
	if guid == 0 {
		guid = guidFromMAC(derivedMAC(c.Name))
	}
	mac := macFromGUID(guid)
	var ll wire.GID
	ll[0], ll[1] = 0xFE, 0x80
	binary.BigEndian.PutUint64(ll[8:], guid)
	gids := []vhca.GIDEntry{{GID: ll, Type: vhca.GIDTypeRoCEv2}}
	var ipv4 [][4]byte
	for _, a := range c.Addrs {
		var g wire.GID
		if a.Is4() {
			g = wire.IPv4MappedGID(a.As4())
			ipv4 = append(ipv4, a.As4())
		} else {
			g = a.As16()
		}
		gids = append(gids, vhca.GIDEntry{GID: g, Type: vhca.GIDTypeRoCEv2})
	}
	if c.RoCEv1 {
		for _, e := range gids[:len(gids):len(gids)] {
			gids = append(gids, vhca.GIDEntry{GID: e.GID, Type: vhca.GIDTypeRoCEv1})
		}
	}
	port := vhca.PortConfig{LinkLayer: vhca.LinkLayerEthernet, MaxMTU: vhca.MTU4096, ActiveMTU: activeMTU(c),
		MAC: mac, GIDs: gids, InProcess: !c.TAP && c.Attach == ""}
	if c.Cable != nil {
		if c.TAP || c.Pipe != "" || c.Attach != "" || c.Uplink != "" || len(c.Addrs) > 0 || c.RoCEv1 {
			return nil, fmt.Errorf("device %q: a cable makes an InfiniBand port: not with tap, pipe=, attach=, xdp=, addr= or rocev1", c.Name)
		}
		var err error
		if port, err = ibPort(c.Cable, guid); err != nil {
			return nil, fmt.Errorf("device %q: %w", c.Name, err)
		}
		mac, ipv4 = wire.MAC{}, nil
	}
	dev, err := vhca.NewDevice(vhca.Config{
		Name: c.Name, NodeGUID: guid, Seed: c.Seed,
		Ports: []vhca.PortConfig{port},
	})
	if err != nil {
		return nil, err
	}
	return &hca{name: c.Name, dev: dev, mac: mac, ipv4: ipv4, neigh: newNeighbours(), rocev1: c.RoCEv1}, nil
}

// activeMTU is the largest IB MTU that fits the netdev's MTU, as rxe
// chooses it (1500 → 1024, 9000 → 4096); 4096 without a netdev.
func activeMTU(c DeviceConfig) vhca.MTU {
	if !c.TAP && c.Attach == "" {
		return vhca.MTU4096
	}
	mtu := c.MTU
	if mtu == 0 {
		mtu = 1500
	}
	best := vhca.MTU256
	for m := vhca.MTU256; m <= vhca.MTU4096; m++ {
		if m.Bytes() <= mtu {
			best = m
		}
	}
	return best
}

// resolveMAC finds the Ethernet address of the port that owns dgid, as
// the kernel's neighbour resolution does for a RoCE address vector: this
// device itself (loopback) or the one at the other end of its pipe. A
// link-local GID carries its MAC in its interface identifier.
func (h *hca) resolveMAC(dgid wire.GID) (wire.MAC, error) {
	if h.cable != nil {
		return wire.MAC{}, nil // InfiniBand: LIDs, no MACs
	}
	for _, x := range []*hca{h, h.peer} {
		if x == nil {
			continue
		}
		for _, e := range x.dev.Ports[0].GIDs {
			if e.GID == dgid {
				return x.mac, nil
			}
		}
	}
	if dgid[0] == 0xFE && dgid[1]&0xC0 == 0x80 {
		return macFromGUID(binary.BigEndian.Uint64(dgid[8:])), nil
	}
	if h.nd != nil {
		// Attached: the kernel owns neighbour resolution, as for rxe.
		ip := netip.AddrFrom16(dgid).Unmap()
		if mac, ok := h.nd.Neighbour(ip); ok {
			return mac, nil
		}
		if err := h.nd.Resolve(ip); err != nil {
			return wire.MAC{}, fmt.Errorf("resolving %v on %s: %w", ip, h.nd.Name(), err)
		}
		return wire.MAC{}, errResolving
	}
	if a := netip.AddrFrom16(dgid); !a.Is4In6() && h.tap != nil {
		if mac, ok := h.neigh.lookup(dgid); ok {
			return mac, nil
		}
		h.sendND(ndSolicit, dgid, [16]byte{}, wire.MAC{})
		return wire.MAC{}, errResolving
	}
	if a := netip.AddrFrom16(dgid); a.Is4In6() && h.tap != nil {
		ip := a.Unmap().As4()
		if mac, ok := h.neigh.lookup(v4key(ip)); ok {
			return mac, nil
		}
		h.request(ip)
		return wire.MAC{}, errResolving
	}
	return wire.MAC{}, fmt.Errorf("no route to GID %s from %s", netip.AddrFrom16(dgid), h.name)
}

// gidOf is the GID of an IP address: IPv4-mapped for IPv4.
func gidOf(a netip.Addr) wire.GID {
	if a.Is4() {
		return wire.IPv4MappedGID(a.As4())
	}
	return a.As16()
}

// addAddr gives the port an address at run time: its RoCEv2 GID (and
// RoCEv1 one, where enabled), and for IPv4 a gratuitous ARP.
func (h *hca) addAddr(a netip.Addr) (int, error) {
	if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
		return 0, fmt.Errorf("address %v", a)
	}
	i, err := h.dev.AddGID(1, vhca.GIDEntry{GID: gidOf(a), Type: vhca.GIDTypeRoCEv2})
	if err != nil {
		return 0, err
	}
	if h.rocev1 {
		h.dev.AddGID(1, vhca.GIDEntry{GID: gidOf(a), Type: vhca.GIDTypeRoCEv1})
	}
	if h.fast != nil {
		if err := h.fast.own(a); err != nil {
			return i, err
		}
	}
	if a.Is4() {
		ip := a.As4()
		for _, x := range h.ipv4 {
			if x == ip {
				return i, nil
			}
		}
		h.ipv4 = append(h.ipv4, ip)
		h.sendARP(arpRequest, ip, ip, wire.MAC{}) // gratuitous
	}
	return i, nil
}

// delAddr takes an address away: its GIDs become empty entries.
func (h *hca) delAddr(a netip.Addr) {
	h.dev.DelGID(1, gidOf(a))
	if h.fast != nil {
		h.fast.disown(a)
	}
	if a.Is4() {
		ip := a.As4()
		for i, x := range h.ipv4 {
			if x == ip {
				h.ipv4 = append(h.ipv4[:i], h.ipv4[i+1:]...)
				break
			}
		}
	}
}
