// Package verbsd is the daemon: it hosts vHCAs and serves them to clients
// over a unix socket (the control plane, SOCK_SEQPACKET) and shared-memory
// rings (the data plane), as verbsd/abi describes. It owns every client's
// resources and destroys them when the client goes away.
package verbsd

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"github.com/softib/softib/vhca/link/netdev"
	"github.com/softib/softib/vhca/link/pipe"
	"github.com/softib/softib/vhca/link/tap"
	"golang.org/x/sys/unix"
)

// Config configures a Server.
type Config struct {
	Socket  string // abi.DefaultSocket if empty
	Devices []DeviceConfig
	// Group may connect besides root and verbsd's own user; empty: the
	// group "softib" if the host has one.
	Group  string
	Limits Limits
	// Spin is how long the engine keeps polling after its last work
	// before it sleeps (0: defaultSpin, 200 µs; 1 ns: sleep at once).
	Spin time.Duration
	// EngineCPUs, if not empty, are the CPUs the engine's thread may run
	// on: a poll-mode driver's core. With the kernel's packet work (the
	// NAPI threads of the fast path's netdevs) and the clients kept off
	// them, nothing preempts the engine in the middle of a batch.
	EngineCPUs []int
}

// defaultSpin is how long the engine polls after its last work before it
// sleeps on its doorbell. Measured with softib perf send_lat (8 B, two
// processes, 2 cores): sleeping at once, 7.9 µs; polling 200 µs with
// sched_yield and clients that yield too, 2.0 µs; the contention check
// of engine.run keeps a client that never yields from making it worse.
func defaultSpin() time.Duration { return 200 * time.Microsecond }

// Server is a running verbsd.
type Server struct {
	cfg    Config
	limits Limits
	eng    *engine
	ln     *net.UnixListener
	gid    int // the group allowed in, -1 none

	mu       sync.Mutex
	sessions map[*session]chan abi.Event
	conns    map[*net.UnixConn]bool // every connection served, Hello said or not
	wg       sync.WaitGroup
	closing  bool
}

// New makes the devices and the engine; Serve starts serving.
func New(cfg Config) (*Server, error) {
	if cfg.Socket == "" {
		cfg.Socket = abi.DefaultSocket
	}
	if len(cfg.Devices) == 0 {
		cfg.Devices = []DeviceConfig{{Name: "vhca0"}}
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.Spin == 0 {
		cfg.Spin = defaultSpin()
	}
	byName := map[string]*hca{}
	var hcas []*hca
	// Attached devices learn their MAC, MTU and addresses from their
	// netdev: the caller's slice stays as it was.
	cfg.Devices = append([]DeviceConfig(nil), cfg.Devices...)
	for i := range cfg.Devices {
		dc := &cfg.Devices[i]
		if byName[dc.Name] != nil {
			closeLinks(hcas)
			return nil, fmt.Errorf("device %q configured twice", dc.Name)
		}
		var nd *netdev.Netdev
		if dc.Attach != "" {
			var err error
			if nd, err = attachNetdev(dc); err != nil {
				closeLinks(hcas)
				return nil, err
			}
		}
		h, err := newHCA(*dc)
		if err != nil {
			if nd != nil {
				nd.Close()
			}
			closeLinks(hcas)
			return nil, err
		}
		h.nd = nd
		byName[dc.Name] = h
		hcas = append(hcas, h)
	}
	for _, dc := range cfg.Devices {
		if dc.Pipe == "" {
			continue
		}
		a, b := byName[dc.Name], byName[dc.Pipe]
		if b == nil || b == a {
			return nil, fmt.Errorf("device %q: pipe to unknown device %q", dc.Name, dc.Pipe)
		}
		if a.peer != nil && a.peer != b || b.peer != nil && b.peer != a {
			return nil, fmt.Errorf("device %q: a port has one link", dc.Name)
		}
		if a.peer == nil {
			a.pipe, b.pipe = pipe.New(1024, maxFrame)
			a.peer, b.peer = b, a
		}
	}
	var cpus, allowed unix.CPUSet
	if len(cfg.EngineCPUs) > 0 {
		if err := unix.SchedGetaffinity(0, &allowed); err != nil {
			closeLinks(hcas)
			return nil, fmt.Errorf("engine CPUs: %w", err)
		}
	}
	for _, c := range cfg.EngineCPUs {
		if c < 0 || c >= 1024 || !allowed.IsSet(c) {
			closeLinks(hcas)
			return nil, fmt.Errorf("engine CPU %d: verbsd may run on CPUs %s only", c, cpuList(&allowed))
		}
		cpus.Set(c)
	}
	eng, err := newEngine(hcas, cfg.Spin)
	if err == nil && cpus.Count() > 0 {
		eng.cpus = &cpus
	}
	if err != nil {
		closeLinks(hcas)
		return nil, err
	}
	for i, dc := range cfg.Devices {
		if !dc.TAP {
			continue
		}
		if hcas[i].pipe != nil {
			closeLinks(hcas)
			return nil, fmt.Errorf("device %q: a port has one link (pipe or TAP)", dc.Name)
		}
		t, err := tap.Open(tap.Config{Name: dc.Name, MTU: dc.MTU, Netns: dc.Netns})
		if err != nil {
			closeLinks(hcas)
			return nil, err
		}
		hcas[i].tap = t
	}
	for i, dc := range cfg.Devices {
		if dc.Cable == nil {
			continue
		}
		if hcas[i].pipe != nil {
			closeLinks(hcas)
			return nil, fmt.Errorf("device %q: a port has one link (pipe or cable)", dc.Name)
		}
		k, err := openCable(dc.Name, dc.Netns, dc.Cable)
		if err != nil {
			closeLinks(hcas)
			return nil, err
		}
		hcas[i].cable = k
		hcas[i].syncPortState()
	}
	for i, dc := range cfg.Devices {
		on := dc.Uplink
		if dc.Attach != "" {
			on = dc.Attach
		}
		if on == "" {
			continue
		}
		if dc.Uplink != "" && !dc.TAP {
			closeLinks(hcas)
			return nil, fmt.Errorf("device %q: the fast path (xdp=) is a TAP port's: add tap", dc.Name)
		}
		f, err := openFastPath(dc.Name, on, dc.Netns, dc.XDPMode, hcas[i].mac, dc.Addrs, uint32(i), cmp.Or(dc.MTU, 1500))
		if err != nil {
			closeLinks(hcas)
			return nil, err
		}
		hcas[i].fast = f
	}
	s := &Server{cfg: cfg, limits: cfg.Limits, eng: eng, gid: -1, sessions: map[*session]chan abi.Event{},
		conns: map[*net.UnixConn]bool{}}
	eng.async = s.route
	group := cfg.Group
	if group == "" {
		group = "softib"
	}
	if g, err := user.LookupGroup(group); err == nil {
		s.gid, _ = strconv.Atoi(g.Gid)
	} else if cfg.Group != "" {
		return nil, fmt.Errorf("group %q: %w", cfg.Group, err)
	}
	return s, nil
}

// Listen creates the socket (and its directory) and starts the engine.
func (s *Server) Listen() error {
	path := s.cfg.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return fmt.Errorf("%s: another verbsd is serving there", path)
	}
	os.Remove(path)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return err
	}
	// Access is decided per connection by SO_PEERCRED; the socket
	// itself is open to all so that the decision is ours and logged.
	os.Chmod(path, 0o666)
	s.ln = ln
	go s.eng.run()
	for _, h := range s.eng.hcas {
		if h.nd != nil {
			go s.follow(h, h.nd.Changes())
		}
	}
	s.eng.do(func() {
		for _, h := range s.eng.hcas {
			h.announce()
		}
	})
	return nil
}

// closeLinks closes the ports' netdevs: TAPs removed, steering programs
// detached, AF_XDP sockets and netlink subscriptions closed.
func closeLinks(hcas []*hca) {
	for _, h := range hcas {
		if h.tap != nil {
			h.tap.Close()
			h.tap = nil
		}
		if h.fast != nil {
			for i, sk := range h.fast.socks {
				// What the socket did, for whoever tunes the uplink:
				// frames per kick is the batching the kernel saw.
				if x, err := sk.Stats(); err == nil {
					slog.Info("AF_XDP socket at exit", "device", h.name, "queue", i, "sent", x.Sent, "received", x.Received,
						"tx_kicks", x.TxKicks, "rx_kicks", x.RxKicks, "kick_retries", x.KickRetries, "kick_errors", x.KickErrors)
				}
			}
			h.fast.close()
			h.fast = nil
		}
		if h.nd != nil {
			h.nd.Close()
			h.nd = nil
		}
		if h.cable != nil {
			h.cable.Close()
			h.cable = nil
		}
	}
}

// Serve accepts clients until Shutdown.
func (s *Server) Serve() error {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.wg.Add(1)
		s.conns[c] = true
		s.mu.Unlock()
		go s.serve(c)
	}
}

// allowed applies the access rule to the peer's credentials.
func (s *Server) allowed(cred *unix.Ucred) bool {
	if cred.Uid == 0 || int(cred.Uid) == os.Getuid() {
		return true
	}
	if s.gid < 0 {
		return false
	}
	if int(cred.Gid) == s.gid {
		return true
	}
	// Supplementary groups: the kernel tells them through /proc.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cred.Pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, f := range strings.Fields(rest) {
				if g, _ := strconv.Atoi(f); g == s.gid {
					return true
				}
			}
		}
	}
	return false
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return cred, cerr
}

// serve runs one client's connection: the hello, then request after
// request until the client goes, then the clean-up.
func (s *Server) serve(uc *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, uc)
		s.mu.Unlock()
	}()
	c := abi.NewConn(uc)
	defer c.Close()
	sess := newSession(s, c)
	cred, err := peerCred(uc)
	if err != nil {
		return
	}
	sess.pid, sess.uid = cred.Pid, cred.Uid
	log := slog.With("pid", cred.Pid, "uid", cred.Uid)
	h, _, fds, err := c.Recv()
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return
	}
	if h.Version != abi.Version {
		c.Send(abi.Header{Op: h.Op, Seq: h.Seq, Status: int32(unix.EPROTO)},
			fmt.Sprintf("client speaks ABI version %d; this verbsd speaks version %d", h.Version, abi.Version))
		log.Warn("client of another ABI version refused", "version", h.Version)
		return
	}
	if h.Op != abi.OpHello {
		c.Send(abi.Header{Op: h.Op, Seq: h.Seq, Status: int32(unix.EPROTO)}, "the first message must be Hello")
		return
	}
	if !s.allowed(cred) {
		c.Send(abi.Header{Op: h.Op, Seq: h.Seq, Status: int32(unix.EACCES)},
			fmt.Sprintf("uid %d may not use verbsd: root, verbsd's user and the group allowed only", cred.Uid))
		log.Warn("client refused by the access rule")
		return
	}
	events := sess.evq
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.sessions[sess] = events
	s.mu.Unlock()
	if err := c.Send(abi.Header{Op: abi.OpHello, Seq: h.Seq},
		abi.HelloReply{Devices: uint32(len(s.eng.hcas)), MaxEntry: abi.MaxRingEntrySz}, s.eng.bellFD()); err != nil {
		s.end(sess)
		return
	}
	done := make(chan struct{})
	go sess.writeEvents(events, done)
	for {
		h, body, fds, err := c.Recv()
		if err != nil {
			break
		}
		var r reply
		if h.Version != abi.Version {
			r.err = refuse(unix.EPROTO, "message of ABI version %d", h.Version)
			for _, fd := range fds {
				unix.Close(fd)
			}
		} else if err := s.eng.do(func() { r = sess.verb(s.eng, h.Op, body, fds) }); err != nil {
			r.err = err
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
		// A destination behind the TAP whose MAC is being asked for:
		// try again while the ARP reply may come (about a second, as
		// the kernel's address resolution for RoCE waits).
		for try := 0; errors.Is(r.err, errResolving) && try < 100; try++ {
			time.Sleep(10 * time.Millisecond)
			if err := s.eng.do(func() { r = sess.verb(s.eng, h.Op, body, nil) }); err != nil {
				r.err = err
			}
		}
		sess.answer(h, &r)
	}
	close(done)
	s.end(sess)
}

// answer sends a verb's reply and closes the descriptors it passed.
func (sess *session) answer(h abi.Header, r *reply) {
	sess.sendMu.Lock()
	defer sess.sendMu.Unlock()
	out := abi.Header{Op: h.Op, Seq: h.Seq}
	if r.err != nil {
		errno, msg := errnoOf(r.err)
		out.Status = int32(errno)
		sess.conn.Send(out, msg)
		return
	}
	sess.conn.Send(out, r.body, r.fds...)
	for _, fd := range r.fds {
		unix.Close(fd)
	}
}

func (sess *session) writeEvents(events chan abi.Event, done chan struct{}) {
	for {
		select {
		case ev := <-events:
			sess.sendMu.Lock()
			sess.conn.Send(abi.Header{Op: abi.OpEvent}, ev)
			sess.sendMu.Unlock()
		case <-done:
			return
		}
	}
}

// end destroys everything a client made, after it went away.
func (s *Server) end(sess *session) {
	s.eng.do(func() { sess.destroyAll(s.eng) })
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
}

// route passes a device's asynchronous event to the session owning its
// object; port and device events go to every session on the device.
func (s *Server) route(h *hca, ev vhca.Event) {
	e := s.eng
	switch {
	case ev.QP != nil:
		if r := e.qpOf[ev.QP]; r != nil {
			r.s.sendEvent(abi.Event{Type: uint32(ev.Type), Handle: r.handle})
		}
	case ev.CQ != nil:
		if c := e.cqOf[ev.CQ]; c != nil {
			c.s.sendEvent(abi.Event{Type: uint32(ev.Type), Handle: c.handle})
		}
	case ev.SRQ != nil:
		if r := e.srqOf[ev.SRQ]; r != nil {
			r.s.sendEvent(abi.Event{Type: uint32(ev.Type), Handle: r.handle})
		}
	default:
		s.mu.Lock()
		for sess := range s.sessions {
			if sess.h == h {
				select {
				case s.sessions[sess] <- abi.Event{Type: uint32(ev.Type), Port: uint32(ev.Port)}:
				default:
				}
			}
		}
		s.mu.Unlock()
	}
}

// Shutdown stops serving: every client gets a device-fatal event, its
// resources are destroyed and its connection closed; then the engine
// stops and the socket is removed.
func (s *Server) Shutdown() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	var list []*session
	for sess := range s.sessions {
		list = append(list, sess)
	}
	var conns []*net.UnixConn
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
	for _, sess := range list {
		sess.sendMu.Lock()
		sess.conn.Send(abi.Header{Op: abi.OpEvent}, abi.Event{Type: uint32(vhca.EventDeviceFatal)})
		sess.sendMu.Unlock()
		// Closing the read side ends the session's loop, which cleans up.
		sess.conn.Unix().CloseRead()
	}
	// The connections yet to say Hello (or refused): ending their read
	// side ends them too.
	for _, c := range conns {
		c.CloseRead()
	}
	s.wg.Wait()
	s.eng.do(func() { s.eng.quit = true })
	<-s.eng.stopped
	closeLinks(s.eng.hcas)
	unix.Close(s.eng.bell)
	s.eng.cores.close()
	os.Remove(s.cfg.Socket)
}
