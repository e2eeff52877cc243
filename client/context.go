package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// Options say where verbsd is.
type Options struct {
	// Socket is verbsd's control socket; empty: $SOFTIB_SOCKET, else
	// abi.DefaultSocket.
	Socket string
}

func (o *Options) socket() string {
	if o != nil && o.Socket != "" {
		return o.Socket
	}
	if s := os.Getenv("SOFTIB_SOCKET"); s != "" {
		return s
	}
	return abi.DefaultSocket
}

// DeviceInfo names a device verbsd hosts (ibv_get_device_list).
type DeviceInfo struct {
	Name     string
	NodeGUID uint64
}

// Context is an open device (ibv_context): one connection to verbsd.
// Its methods are safe for concurrent use; a QP's PostSend, a QP's
// PostRecv and a CQ's Poll each take a lock of their own queue only.
type Context struct {
	Name  string
	Ports int

	conn    *abi.Conn
	mu      sync.Mutex // one request at a time
	seq     uint32
	replies chan message
	events  chan AsyncEvent
	dead    chan struct{}
	fatal   atomic.Bool
	closed  atomic.Bool
	bell    int
	one     [8]byte

	objMu   sync.Mutex
	qps     map[uint32]*QP
	cqs     map[uint32]*CQ
	srqs    map[uint32]*SRQ
	buffers []*Buffer
}

type message struct {
	h    abi.Header
	body []byte
	fds  []int
}

// AsyncEvent is an asynchronous event (ibv_async_event): the object it
// concerns is set, or Port for a port event.
type AsyncEvent struct {
	Type vhca.EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port int
}

func dial(o *Options) (*abi.Conn, int, error) {
	path := o.socket()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, -1, &Error{Op: "connect", Errno: errnoOf(err), Msg: "cannot reach verbsd at " + path + ": is it running? (" + err.Error() + ")"}
	}
	c := abi.NewConn(uc)
	if err := c.Send(abi.Header{Op: abi.OpHello, Seq: 1}, nil); err != nil {
		c.Close()
		return nil, -1, err
	}
	h, body, fds, err := c.Recv()
	if err == nil {
		err = replyError("Hello", h, body)
	}
	if err == nil && len(fds) != 1 {
		err = &Error{Op: "Hello", Errno: syscall.EPROTO, Msg: "verbsd sent no doorbell"}
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		c.Close()
		return nil, -1, err
	}
	return c, fds[0], nil
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

func replyError(op string, h abi.Header, body []byte) error {
	if h.Status == 0 {
		return nil
	}
	return &Error{Op: op, Errno: syscall.Errno(h.Status), Msg: string(body)}
}

// Devices lists the devices verbsd hosts.
func Devices(o *Options) ([]DeviceInfo, error) {
	c, bell, err := dial(o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer unix.Close(bell)
	if err := c.Send(abi.Header{Op: abi.OpListDevices, Seq: 2}, nil); err != nil {
		return nil, err
	}
	h, body, fds, err := c.Recv()
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return nil, err
	}
	if err := replyError("ListDevices", h, body); err != nil {
		return nil, err
	}
	var e abi.DeviceEntry
	size := binarySize(&e)
	var list []DeviceInfo
	for len(body) >= size {
		abi.Decode(body[:size], &e)
		list = append(list, DeviceInfo{Name: e.Name.String(), NodeGUID: e.NodeGUID})
		body = body[size:]
	}
	return list, nil
}

// Open opens a device by name; "" opens the first one (with no
// arguments, verbsd serves one, vhca0).
func Open(name string, o *Options) (*Context, error) {
	if name == "" {
		list, err := Devices(o)
		if err != nil {
			return nil, err
		}
		if len(list) == 0 {
			return nil, &Error{Op: "open", Errno: syscall.ENODEV, Msg: "verbsd hosts no device"}
		}
		name = list[0].Name
	}
	c, bell, err := dial(o)
	if err != nil {
		return nil, err
	}
	ctx := &Context{
		Name: name, conn: c, bell: bell, replies: make(chan message, 1), events: make(chan AsyncEvent, 1024),
		dead: make(chan struct{}), qps: map[uint32]*QP{}, cqs: map[uint32]*CQ{}, srqs: map[uint32]*SRQ{},
	}
	ctx.one[0] = 1
	ctx.seq = 1
	go ctx.read()
	var rep abi.OpenDeviceReply
	if _, err := ctx.call(abi.OpOpenDevice, abi.OpenDevice{Name: abi.SetName(name)}, &rep); err != nil {
		ctx.Close()
		return nil, err
	}
	ctx.Ports = int(rep.Ports)
	return ctx, nil
}

// Err is ErrDeviceFatal once the device is gone (verbsd ended, or sent
// the device-fatal event), else nil: a loop that only polls CQs, which
// go quiet rather than fail, asks it now and then.
func (ctx *Context) Err() error {
	if ctx.fatal.Load() {
		return ErrDeviceFatal
	}
	return nil
}

// read receives replies and events until the connection ends.
func (ctx *Context) read() {
	defer close(ctx.dead)
	for {
		h, body, fds, err := ctx.conn.Recv()
		if err != nil {
			ctx.fatal.Store(true)
			ctx.pushEvent(AsyncEvent{Type: vhca.EventDeviceFatal})
			return
		}
		if h.Op == abi.OpEvent {
			var ev abi.Event
			if abi.Decode(body, &ev) == nil {
				ctx.onEvent(&ev)
			}
			continue
		}
		ctx.replies <- message{h: h, body: append([]byte(nil), body...), fds: fds}
	}
}

func (ctx *Context) onEvent(ev *abi.Event) {
	a := AsyncEvent{Type: vhca.EventType(ev.Type), Port: int(ev.Port)}
	ctx.objMu.Lock()
	switch a.Type {
	case vhca.EventCQErr:
		a.CQ = ctx.cqs[ev.Handle]
	case vhca.EventSRQErr, vhca.EventSRQLimitReached:
		a.SRQ = ctx.srqs[ev.Handle]
	case vhca.EventDeviceFatal, vhca.EventPortActive, vhca.EventPortErr, vhca.EventLIDChange,
		vhca.EventPKeyChange, vhca.EventSMChange, vhca.EventClientReregister, vhca.EventGIDChange:
	default:
		a.QP = ctx.qps[ev.Handle]
	}
	ctx.objMu.Unlock()
	if a.Type == vhca.EventDeviceFatal {
		ctx.fatal.Store(true)
	}
	ctx.pushEvent(a)
}

func (ctx *Context) pushEvent(a AsyncEvent) {
	select {
	case ctx.events <- a:
	default: // a program that never reads its events loses the oldest news, not its replies
	}
}

// AsyncEvent waits for the next asynchronous event (ibv_get_async_event).
func (ctx *Context) AsyncEvent(c context.Context) (AsyncEvent, error) {
	select {
	case a := <-ctx.events:
		return a, nil
	case <-c.Done():
		return AsyncEvent{}, c.Err()
	}
}

// call sends a request and waits for its reply, decoding the body into
// out (if not nil) and returning the descriptors the reply carries.
func (ctx *Context) call(op abi.Op, req any, out any, fds ...int) ([]int, error) {
	ctx.mu.Lock()
	defer ctx.mu.Unlock()
	if ctx.fatal.Load() {
		return nil, ErrDeviceFatal
	}
	ctx.seq++
	if err := ctx.conn.Send(abi.Header{Op: op, Seq: ctx.seq}, req, fds...); err != nil {
		return nil, &Error{Op: op.String(), Errno: errnoOf(err), Msg: err.Error()}
	}
	var m message
	select {
	case m = <-ctx.replies:
	case <-ctx.dead:
		return nil, ErrDeviceFatal
	}
	if err := replyError(op.String(), m.h, m.body); err != nil {
		closeFDs(m.fds)
		return nil, err
	}
	if out != nil {
		if err := abi.Decode(m.body, out); err != nil {
			closeFDs(m.fds)
			return nil, &Error{Op: op.String(), Errno: syscall.EPROTO, Msg: err.Error()}
		}
	}
	return m.fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// ringBell wakes verbsd after a ring said it is asleep.
func (ctx *Context) ringBell() { unix.Write(ctx.bell, ctx.one[:]) }

// Close closes the device: verbsd destroys everything the context made.
func (ctx *Context) Close() error {
	if ctx.closed.Swap(true) {
		// Its descriptors' numbers may be another's by now.
		return invalid("Close", "context already closed")
	}
	err := ctx.conn.Close()
	<-ctx.dead
	unix.Close(ctx.bell)
	ctx.objMu.Lock()
	defer ctx.objMu.Unlock()
	for _, q := range ctx.qps {
		q.unmap()
	}
	for _, c := range ctx.cqs {
		c.unmap()
	}
	for _, s := range ctx.srqs {
		s.unmap()
	}
	clear(ctx.qps)
	clear(ctx.cqs)
	clear(ctx.srqs)
	return err
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (ctx *Context) QueryDevice() (vhca.DeviceAttr, error) {
	var a abi.DeviceAttr
	if _, err := ctx.call(abi.OpQueryDevice, nil, &a); err != nil {
		return vhca.DeviceAttr{}, err
	}
	return a.VHCA(), nil
}

// PortAttr is what ibv_query_port tells, plus the port's MAC on Ethernet.
type PortAttr struct {
	vhca.PortAttr
	MAC    [6]byte
	Netdev string // the port's netdev (its TAP, or the one it attaches to), empty if none
	// Paths are the ways RoCEv2 can go through the port (DataPathTAP,
	// DataPathXDP, or both: a TAP port with a fast path), Path the one in use.
	Paths, Path DataPath
}

// DataPath is a way a port's RoCEv2 frames go: through its TAP netdev, or
// through AF_XDP (the fast path, package ebpf).
type DataPath uint8

const (
	DataPathTAP DataPath = abi.PathTAP
	DataPathXDP DataPath = abi.PathXDP
)

func (p DataPath) String() string {
	switch p {
	case 0:
		return "none"
	case DataPathTAP:
		return "tap"
	case DataPathXDP:
		return "xdp"
	case DataPathTAP | DataPathXDP:
		return "tap,xdp"
	}
	return fmt.Sprintf("DataPath(%d)", uint8(p))
}

// SetPath chooses the path of a port that has two (root or verbsd's
// user): softib perf --path measures the TAP path and the fast path on
// one set-up.
func (ctx *Context) SetPath(port int, p DataPath) error {
	_, err := ctx.call(abi.OpSetPath, abi.SetPath{Port: uint32(port), Path: uint32(p)}, nil)
	return err
}

// QueryPort returns a port's attributes (ports count from 1).
func (ctx *Context) QueryPort(port int) (PortAttr, error) {
	var a abi.PortAttr
	if _, err := ctx.call(abi.OpQueryPort, abi.PortQuery{Port: uint32(port)}, &a); err != nil {
		return PortAttr{}, err
	}
	return PortAttr{PortAttr: vhca.PortAttr{
		State: vhca.PortState(a.State), MaxMTU: vhca.MTU(a.MaxMTU), ActiveMTU: vhca.MTU(a.ActiveMTU),
		GIDTblLen: int(a.GIDTblLen), PKeyTblLen: int(a.PKeyTblLen), LID: a.LID, SMLID: a.SMLID, LMC: a.LMC,
		LinkLayer: vhca.LinkLayer(a.LinkLayer), MaxMsgSize: a.MaxMsgSize,
	}, MAC: a.MAC, Netdev: a.Netdev.String(), Paths: DataPath(a.Paths), Path: DataPath(a.Path)}, nil
}

// QueryGID returns a GID table entry (ibv_query_gid, with its type).
func (ctx *Context) QueryGID(port, index int) (vhca.GIDEntry, error) {
	var g abi.GIDEntry
	if _, err := ctx.call(abi.OpQueryGID, abi.PortQuery{Port: uint32(port), Index: uint32(index)}, &g); err != nil {
		return vhca.GIDEntry{}, err
	}
	return vhca.GIDEntry{GID: g.GID, Type: vhca.GIDType(g.Type)}, nil
}

// QueryPKey returns a P_Key table entry (ibv_query_pkey).
func (ctx *Context) QueryPKey(port, index int) (uint16, error) {
	var k abi.PKey
	if _, err := ctx.call(abi.OpQueryPKey, abi.PortQuery{Port: uint32(port), Index: uint32(index)}, &k); err != nil {
		return 0, err
	}
	return uint16(k.PKey), nil
}

// QueryCounters returns a port's counters.
func (ctx *Context) QueryCounters(port int) (abi.Counters, error) {
	var c abi.Counters
	_, err := ctx.call(abi.OpQueryCounters, abi.PortQuery{Port: uint32(port)}, &c)
	return c, err
}

// AddAddr gives port an IP address at run time (root or verbsd's user):
// its GID (RoCEv2) appears in the table, at the index returned.
func (ctx *Context) AddAddr(port int, a netip.Addr) (int, error) {
	var h abi.Handle
	if _, err := ctx.call(abi.OpAddAddr, abi.Addr{Port: uint32(port), IP: a.As16()}, &h); err != nil {
		return 0, err
	}
	return int(h.Handle), nil
}

// DelAddr takes an address away: its GID entries become empty.
func (ctx *Context) DelAddr(port int, a netip.Addr) error {
	_, err := ctx.call(abi.OpDelAddr, abi.Addr{Port: uint32(port), IP: a.As16()}, nil)
	return err
}
