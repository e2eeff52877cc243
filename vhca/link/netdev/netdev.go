// Package netdev is a vHCA's view of a netdev it attaches to, as Linux
// rxe attaches to one: its MAC, MTU and addresses, followed through a
// netlink subscription, and the kernel's neighbour table, which resolves
// the MACs of peers (the kernel owns ARP and ND).
//
// The vHCA shares the netdev's addresses rather than owning any: its
// GIDs are the netdev's IPv4 and IPv6 addresses, so it must learn when
// one comes or goes (Changes), and it never answers ARP or neighbour
// solicitations itself, so it asks the kernel for a peer's MAC
// (Neighbour) and, when the kernel has none, has the kernel go and find
// it (Resolve).
package netdev

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config names the netdev to attach to.
type Config struct {
	Name string // netdev name
	// Netns is "" for the current network namespace, else the path of
	// one, such as /var/run/netns/X for `ip netns add X`.
	Netns string
	// Logger, if not nil, hears of netlink trouble: a subscription the
	// kernel dropped (and that is made again) or a message that would
	// not parse.
	Logger *slog.Logger
}

// AddrChange is an address the netdev gained (Added) or lost.
type AddrChange struct {
	Addr  netip.Addr
	Added bool
}

var (
	// ErrNotFound is returned by Open for a netdev the namespace lacks.
	ErrNotFound = errors.New("not found")
	// ErrClosed is returned by the methods of a closed Netdev.
	ErrClosed = errors.New("closed")
)

// changesBuffer is how many address changes wait for a slow reader
// before the next ones are dropped (and counted): addresses change
// rarely, in bursts of a few (an interface going down takes its IPv6
// addresses with it).
const changesBuffer = 64

// Resubscribing after the kernel dropped a subscription (ENOBUFS when
// the socket overflowed) backs off between these bounds while it fails.
const (
	resubscribeFirst = 50 * time.Millisecond
	resubscribeMax   = 5 * time.Second
)

// The neighbour states whose link-layer address can be used to send:
// the kernel itself sends to STALE, DELAY and PROBE entries while it
// confirms them.
const usableNeighbour = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// An address carrying one of these flags cannot be used yet (DAD runs)
// or at all (DAD found a duplicate); the kernel will not send from it.
const unusableAddr = unix.IFA_F_TENTATIVE | unix.IFA_F_DADFAILED

// Netdev is an attached netdev. Its methods are safe for concurrent use.
type Netdev struct {
	name  string
	where string // the namespace path, for messages ("" for the current one)
	index int
	log   *slog.Logger

	ns netns.NsHandle // the namespace (netns.None() for the current one)
	// nl is a netlink handle whose sockets live in the namespace, made
	// once so that queries need not switch a thread's namespace.
	nl *netlink.Handle
	// nlMu keeps Close from closing nl under a query: a closed Handle
	// falls back to the current namespace instead of failing.
	nlMu   sync.RWMutex
	closed bool // under nlMu

	changes  chan AddrChange
	dropped  atomic.Uint64
	stop     chan struct{} // closed by Close
	followed chan struct{} // closed when the follow goroutine returned

	mu   sync.Mutex
	mac  [6]byte
	mtu  int
	up   bool
	gone bool // the netdev left the namespace or was deleted
	// The netdev's usable prefixes (an IPv4 address may be there under
	// two prefix lengths, and leaves only with the last), and its
	// addresses in order of first appearance, IPv4 and IPv6 apart.
	prefixes map[netip.Prefix]struct{}
	v4, v6   []netip.Addr
}

// Open attaches to the netdev: reads its index, MAC, MTU and addresses,
// and subscribes to the changes of its addresses and link.
func Open(c Config) (*Netdev, error) {
	d := &Netdev{
		name: c.Name, where: c.Netns, log: c.Logger, ns: netns.None(),
		changes: make(chan AddrChange, changesBuffer),
		stop:    make(chan struct{}), followed: make(chan struct{}),
		prefixes: map[netip.Prefix]struct{}{},
	}
	if c.Netns != "" {
		ns, err := netns.GetFromPath(c.Netns)
		if err != nil {
			return nil, d.errorf("%w", err)
		}
		d.ns = ns
	}
	h, err := netlink.NewHandleAt(d.ns, unix.NETLINK_ROUTE)
	if err != nil {
		d.releaseNamespace()
		return nil, d.errorf("netlink: %w", err)
	}
	d.nl = h
	a, l, err := d.attach()
	if err != nil {
		if a != nil {
			a.stop()
		}
		if l != nil {
			l.stop()
		}
		d.nl.Close()
		d.releaseNamespace()
		return nil, err
	}
	go d.follow(a, l)
	return d, nil
}

// attach subscribes, then reads the link and its addresses: in this
// order no change can fall between the two; one made after subscribing
// but before the reading arrives as well, and is known already.
func (d *Netdev) attach() (*addrFeed, *linkFeed, error) {
	a, err := d.subscribeAddrs()
	if err != nil {
		return nil, nil, d.errorf("address subscription: %w", err)
	}
	l, err := d.subscribeLinks()
	if err != nil {
		return a, nil, d.errorf("link subscription: %w", err)
	}
	link, err := d.nl.LinkByName(d.name)
	if err != nil {
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			return a, l, d.errorf("%w", ErrNotFound)
		}
		return a, l, d.errorf("%w", err)
	}
	attrs := link.Attrs()
	if attrs.EncapType != "ether" || len(attrs.HardwareAddr) != 6 {
		return a, l, d.errorf("not an Ethernet netdev (link type %s)", attrs.EncapType)
	}
	d.index = attrs.Index
	d.readLink(link)
	prefixes, err := d.listPrefixes()
	if err != nil {
		return a, l, d.errorf("addresses: %w", err)
	}
	for _, p := range prefixes {
		d.addPrefix(p)
	}
	return a, l, nil
}

func (d *Netdev) errorf(format string, args ...any) error {
	if d.where == "" {
		return fmt.Errorf("netdev %q: "+format, append([]any{d.name}, args...)...)
	}
	return fmt.Errorf("netdev %q in %s: "+format, append([]any{d.name, d.where}, args...)...)
}

// Index is the netdev's interface index in its namespace.
func (d *Netdev) Index() int { return d.index }

// Name is the netdev's name.
func (d *Netdev) Name() string { return d.name }

// MAC is the netdev's MAC address, the vHCA's source MAC.
func (d *Netdev) MAC() [6]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mac
}

// MTU is the netdev's MTU (the IP MTU: the largest packet without its
// Ethernet header).
func (d *Netdev) MTU() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mtu
}

// Up tells whether the netdev is up with its carrier on (IFF_RUNNING),
// that is, whether the vHCA's port is active.
func (d *Netdev) Up() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.up && !d.gone
}

// Addrs is the netdev's usable addresses: IPv4 ones first, then IPv6
// ones (global and link-local, without zone), each group in the order
// the addresses appeared.
func (d *Netdev) Addrs() []netip.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append(append(make([]netip.Addr, 0, len(d.v4)+len(d.v6)), d.v4...), d.v6...)
}

// Changes delivers the netdev's address changes after Open, each once.
// It is closed by Close. A reader that falls changesBuffer changes behind
// loses the next ones (Dropped counts them) and should read Addrs again.
func (d *Netdev) Changes() <-chan AddrChange { return d.changes }

// Dropped is how many address changes a slow reader of Changes lost.
func (d *Netdev) Dropped() uint64 { return d.dropped.Load() }

// Neighbour is the MAC the kernel's neighbour table holds for ip on
// this netdev, if the entry can be sent to. An IPv4-mapped IPv6 address
// (an IPv4 GID) stands for its IPv4 address. Each call dumps the
// netdev's neighbours of that family: callers cache what they learn.
func (d *Netdev) Neighbour(ip netip.Addr) ([6]byte, bool) {
	ip = ip.Unmap().WithZone("")
	d.nlMu.RLock()
	defer d.nlMu.RUnlock()
	if d.closed || !ip.IsValid() {
		return [6]byte{}, false
	}
	family := netlink.FAMILY_V6
	if ip.Is4() {
		family = netlink.FAMILY_V4
	}
	neighs, err := d.nl.NeighList(d.index, family)
	if err != nil {
		return [6]byte{}, false
	}
	for _, n := range neighs {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || a.Unmap() != ip {
			continue
		}
		var mac [6]byte
		if n.State&usableNeighbour == 0 || len(n.HardwareAddr) != len(mac) {
			return mac, false
		}
		copy(mac[:], n.HardwareAddr)
		return mac, true
	}
	return [6]byte{}, false
}

// Resolve has the kernel resolve ip on this netdev now, as it does when
// it has a packet for it: an ARP request or neighbour solicitation goes
// out unless the entry is already fresh. It returns at once; Neighbour
// tells when the answer came. A peer that never answers is no error.
//
// ip is taken as on-link: the kernel solicits it on this netdev
// whatever its routes say, so a peer behind a router is resolved through
// the next hop the caller found for it.
//
// The request is a neighbour "use" (RTM_NEWNEIGH with NTF_USE), which
// makes the kernel create the entry if needed and act as if a packet
// were waiting on it (neigh_event_send): an entry new, failed or stale
// is probed, one being probed is left alone. Without a packet to take
// its source address from, an IPv6 solicitation goes out from the
// netdev's link-local address.
func (d *Netdev) Resolve(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() {
		return d.errorf("resolve: invalid address")
	}
	d.nlMu.RLock()
	defer d.nlMu.RUnlock()
	if d.closed {
		return d.errorf("resolve %s: %w", ip, ErrClosed)
	}
	err := d.nl.NeighSet(&netlink.Neigh{LinkIndex: d.index, IP: net.IP(ip.AsSlice()), Flags: netlink.NTF_USE})
	if err != nil {
		return d.errorf("resolve %s: %w", ip, err)
	}
	return nil
}

// Close ends the subscriptions and releases the namespace. Changes is
// closed when Close returns.
func (d *Netdev) Close() error {
	d.nlMu.Lock()
	if d.closed {
		d.nlMu.Unlock()
		return d.errorf("%w twice", ErrClosed)
	}
	d.closed = true
	d.nl.Close()
	d.nlMu.Unlock()
	close(d.stop)
	<-d.followed
	return d.releaseNamespace()
}

// releaseNamespace closes the namespace's handle, if Open opened one.
func (d *Netdev) releaseNamespace() error {
	if !d.ns.IsOpen() {
		return nil
	}
	return d.ns.Close()
}

// readLink takes the link's MAC, MTU and state from a link message.
func (d *Netdev) readLink(link netlink.Link) {
	attrs := link.Attrs()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(attrs.HardwareAddr) == len(d.mac) {
		copy(d.mac[:], attrs.HardwareAddr)
	}
	if attrs.MTU > 0 {
		d.mtu = attrs.MTU
	}
	d.up = attrs.RawFlags&(unix.IFF_UP|unix.IFF_RUNNING) == unix.IFF_UP|unix.IFF_RUNNING
	d.gone = false
}

// listPrefixes dumps the netdev's usable prefixes. A dump the kernel
// interrupted (the addresses changed under it) is taken again.
func (d *Netdev) listPrefixes() ([]netip.Prefix, error) {
	link := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: d.index, Name: d.name}}
	var err error
	for range 5 {
		var addrs []netlink.Addr
		addrs, err = d.nl.AddrList(link, netlink.FAMILY_ALL)
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var prefixes []netip.Prefix
		for _, a := range addrs {
			if p, ok := usablePrefix(a.IPNet, a.Flags); ok {
				prefixes = append(prefixes, p)
			}
		}
		return prefixes, nil
	}
	return nil, err
}

func usablePrefix(n *net.IPNet, flags int) (netip.Prefix, bool) {
	if n == nil || flags&unusableAddr != 0 {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip, ones), true
}

// addPrefix records a usable prefix, and tells whether its address is
// new to the netdev.
func (d *Netdev) addPrefix(p netip.Prefix) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.prefixes[p]; ok {
		return false
	}
	isNew := !d.hasAddr(p.Addr())
	d.prefixes[p] = struct{}{}
	if isNew {
		if p.Addr().Is4() {
			d.v4 = append(d.v4, p.Addr())
		} else {
			d.v6 = append(d.v6, p.Addr())
		}
	}
	return isNew
}

// removePrefix forgets a prefix, and tells whether its address left the
// netdev with it.
func (d *Netdev) removePrefix(p netip.Prefix) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.prefixes[p]; !ok {
		return false
	}
	delete(d.prefixes, p)
	if d.hasAddr(p.Addr()) {
		return false
	}
	list := &d.v6
	if p.Addr().Is4() {
		list = &d.v4
	}
	for i, a := range *list {
		if a == p.Addr() {
			*list = append((*list)[:i:i], (*list)[i+1:]...)
			break
		}
	}
	return true
}

// hasAddr tells whether a known prefix holds ip; under d.mu.
func (d *Netdev) hasAddr(ip netip.Addr) bool {
	for p := range d.prefixes {
		if p.Addr() == ip {
			return true
		}
	}
	return false
}

// announce hands a change to the reader of Changes, or counts it lost:
// the follow goroutine must not wait on a reader, or the kernel's
// messages would pile up behind it until the subscription overflows.
func (d *Netdev) announce(c AddrChange) {
	select {
	case d.changes <- c:
	default:
		d.dropped.Add(1)
	}
}

func (d *Netdev) applyAddr(u netlink.AddrUpdate) {
	if u.LinkIndex != d.index {
		return
	}
	n := u.LinkAddress
	// A new address still under DAD arrives flagged tentative, and
	// again without the flag once DAD passed; a duplicate, flagged
	// dadfailed. Only the usable form counts as present.
	p, usable := usablePrefix(&n, u.Flags)
	if !usable {
		if p, ok := usablePrefix(&n, 0); ok && d.removePrefix(p) {
			d.announce(AddrChange{Addr: p.Addr(), Added: false})
		}
		return
	}
	if u.NewAddr {
		if d.addPrefix(p) {
			d.announce(AddrChange{Addr: p.Addr(), Added: true})
		}
	} else if d.removePrefix(p) {
		d.announce(AddrChange{Addr: p.Addr(), Added: false})
	}
}

func (d *Netdev) applyLink(u netlink.LinkUpdate) {
	if int(u.Index) != d.index || u.Link == nil {
		return
	}
	if u.Header.Type == unix.RTM_DELLINK {
		// Deleted, or moved to another namespace: its addresses go
		// with it (the kernel reports them one by one).
		d.mu.Lock()
		d.gone = true
		d.mu.Unlock()
		return
	}
	d.readLink(u.Link)
}

// resync brings the known state back to the kernel's after a
// subscription was lost (and messages with it), announcing the
// differences.
func (d *Netdev) resync() {
	d.nlMu.RLock()
	defer d.nlMu.RUnlock()
	if d.closed {
		return
	}
	link, err := d.nl.LinkByIndex(d.index)
	switch {
	case err == nil && link.Attrs().Name == d.name:
		d.readLink(link)
	case err == nil || errors.As(err, &netlink.LinkNotFoundError{}):
		// The index now names nothing, or another netdev.
		d.mu.Lock()
		d.gone = true
		d.mu.Unlock()
	default:
		d.logf("resync link", err)
	}
	prefixes, err := d.listPrefixes()
	if err != nil {
		d.logf("resync addresses", err)
		return
	}
	present := map[netip.Prefix]struct{}{}
	for _, p := range prefixes {
		present[p] = struct{}{}
	}
	d.mu.Lock()
	var lost []netip.Prefix
	for p := range d.prefixes {
		if _, ok := present[p]; !ok {
			lost = append(lost, p)
		}
	}
	d.mu.Unlock()
	for _, p := range lost {
		if d.removePrefix(p) {
			d.announce(AddrChange{Addr: p.Addr(), Added: false})
		}
	}
	for _, p := range prefixes {
		if d.addPrefix(p) {
			d.announce(AddrChange{Addr: p.Addr(), Added: true})
		}
	}
}

func (d *Netdev) logf(what string, err error) {
	if d.log != nil {
		d.log.Warn("netdev: "+what, "netdev", d.name, "netns", d.where, "err", err)
	}
}

// follow applies the kernel's messages until Close. A subscription the
// kernel ends (its socket overflowed: messages were lost) is made again,
// and the state read afresh.
func (d *Netdev) follow(a *addrFeed, l *linkFeed) {
	defer close(d.followed)
	defer close(d.changes)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := resubscribeFirst
	for {
		var addrs <-chan netlink.AddrUpdate
		var links <-chan netlink.LinkUpdate
		if a != nil {
			addrs = a.updates
		}
		if l != nil {
			links = l.updates
		}
		select {
		case <-d.stop:
			if a != nil {
				a.stop()
			}
			if l != nil {
				l.stop()
			}
			return
		case u, ok := <-addrs:
			if ok {
				d.applyAddr(u)
				continue
			}
			a.stop()
			a = nil
			retry.Reset(0)
		case u, ok := <-links:
			if ok {
				d.applyLink(u)
				continue
			}
			l.stop()
			l = nil
			retry.Reset(0)
		case <-retry.C:
			var err error
			if a == nil {
				if a, err = d.subscribeAddrs(); err != nil {
					d.logf("address subscription", err)
				}
			}
			if l == nil {
				if l, err = d.subscribeLinks(); err != nil {
					d.logf("link subscription", err)
				}
			}
			if a == nil || l == nil {
				retry.Reset(backoff)
				backoff = min(2*backoff, resubscribeMax)
				continue
			}
			backoff = resubscribeFirst
			d.resync()
		}
	}
}

// subscriptionBuffer is the receive buffer asked for the subscription
// sockets, to ride out bursts (a namespace's many addresses going away
// at once) without the kernel dropping the subscription; the kernel caps
// it at net.core.rmem_max. A variable, so that a test can make the
// kernel drop one.
var subscriptionBuffer = 1 << 20

// An addrFeed is one address subscription: the netlink library reads
// its socket in a goroutine of its own, into updates, until done closes.
type addrFeed struct {
	updates chan netlink.AddrUpdate
	done    chan struct{}
	stopped atomic.Bool
}

func (d *Netdev) subscribeAddrs() (*addrFeed, error) {
	f := &addrFeed{updates: make(chan netlink.AddrUpdate, 16), done: make(chan struct{})}
	err := netlink.AddrSubscribeWithOptions(f.updates, f.done, netlink.AddrSubscribeOptions{
		Namespace:         d.namespace(),
		ErrorCallback:     d.subscriptionError("address subscription", &f.stopped),
		ReceiveBufferSize: subscriptionBuffer,
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// stop ends the subscription, and drains what the library's goroutine
// still sends, so that it can see its socket closed and return.
func (f *addrFeed) stop() {
	if !f.stopped.Swap(true) {
		close(f.done)
	}
	for range f.updates {
	}
}

// A linkFeed is one link subscription, as an addrFeed.
type linkFeed struct {
	updates chan netlink.LinkUpdate
	done    chan struct{}
	stopped atomic.Bool
}

func (d *Netdev) subscribeLinks() (*linkFeed, error) {
	f := &linkFeed{updates: make(chan netlink.LinkUpdate, 16), done: make(chan struct{})}
	err := netlink.LinkSubscribeWithOptions(f.updates, f.done, netlink.LinkSubscribeOptions{
		Namespace:         d.namespace(),
		ErrorCallback:     d.subscriptionError("link subscription", &f.stopped),
		ReceiveBufferSize: subscriptionBuffer,
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (f *linkFeed) stop() {
	if !f.stopped.Swap(true) {
		close(f.done)
	}
	for range f.updates {
	}
}

// namespace is the netns handle for the subscriptions: nil for the
// current namespace, which the library then leaves alone.
func (d *Netdev) namespace() *netns.NsHandle {
	if !d.ns.IsOpen() {
		return nil
	}
	ns := d.ns
	return &ns
}

// subscriptionError reports the library's errors but those of a
// subscription being stopped (its socket closed under its reader).
func (d *Netdev) subscriptionError(what string, stopped *atomic.Bool) func(error) {
	return func(err error) {
		if !stopped.Load() {
			d.logf(what, err)
		}
	}
}
