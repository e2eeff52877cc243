package verbsd_test

// Helpers shared by verbsd's robustness tests: an in-process verbsd, the
// daemon's resource levels as the kernel counts them, a raw control
// connection for the tests that break the protocol, and the child-process
// mode of this test binary (TestMain) that plays a client to be killed.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/verbsd/verbsdtest"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// Environment of the child mode: what to be, where verbsd is, which
// device, and (mode "peer") the parent's QP and memory to connect to.
const (
	envChild  = "SOFTIB_TEST_CHILD"
	envSocket = "SOFTIB_TEST_SOCKET"
	envDevice = "SOFTIB_TEST_DEVICE"
	envRemote = "SOFTIB_TEST_REMOTE"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// startServer runs a verbsd in the test process (verbsdtest.Start).
func startServer(t testing.TB, cfg verbsd.Config) (*verbsd.Server, string) {
	t.Helper()
	return verbsdtest.Start(t, cfg)
}

func twoDevices() []verbsd.DeviceConfig { return verbsdtest.TwoDevices() }

// levels are the resources of this process the daemon's clients cost:
// open descriptors (sockets among them: a client's connection), mappings
// of memfds, and goroutines.
type levels struct{ fds, sockets, memfds, goroutines int }

func currentLevels(t testing.TB) levels {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var l levels
	for _, e := range ents {
		l.fds++
		if s, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.HasPrefix(s, "socket:") {
			l.sockets++
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	l.memfds = bytes.Count(maps, []byte("/memfd:"))
	l.goroutines = runtime.NumGoroutine()
	return l
}

func (l levels) within(want levels) bool {
	return l.fds <= want.fds && l.sockets <= want.sockets && l.memfds <= want.memfds && l.goroutines <= want.goroutines
}

// waitLevels polls until the levels are back at (or below) want, and
// fails if they are not within the time given. It returns how long
// they took.
func waitLevels(t testing.TB, want levels, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := currentLevels(t)
		if got.within(want) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("resources not released within %v: %+v, want at most %+v", within, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// acc is the access every test region grants.
const acc = vhca.AccessLocalWrite | vhca.AccessRemoteWrite | vhca.AccessRemoteRead | vhca.AccessRemoteAtomic

// peer is one client's set of objects for a transfer.
type peer struct {
	ctx *client.Context
	pd  *client.PD
	cq  *client.CQ
	qp  *client.QP
	buf *client.Buffer
	mr  *client.MR
	ep  client.Endpoint

	once sync.Once
}

// newPeer opens dev and makes a PD, a CQ, an RC QP and a registered
// buffer of size bytes. The context is closed at cleanup.
func newPeer(t testing.TB, sock, dev string, size int) *peer {
	t.Helper()
	p, err := makePeer(sock, dev, size, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// close closes the context and frees the buffer (which a closed context
// leaves mapped: it is the program's memory).
func (p *peer) close() {
	p.once.Do(func() {
		p.ctx.Close()
		p.buf.Free()
	})
}

func makePeer(sock, dev string, size, depth int) (*peer, error) {
	ctx, err := client.Open(dev, &client.Options{Socket: sock})
	if err != nil {
		return nil, err
	}
	p := &peer{ctx: ctx}
	fail := func(err error) (*peer, error) {
		ctx.Close()
		if p.buf != nil {
			p.buf.Free()
		}
		return nil, err
	}
	if p.pd, err = ctx.AllocPD(); err != nil {
		return fail(err)
	}
	if p.cq, err = ctx.CreateCQ(2*depth, nil); err != nil {
		return fail(err)
	}
	if p.buf, err = ctx.Alloc(size); err != nil {
		return fail(err)
	}
	if p.mr, err = p.pd.RegMR(p.buf.B, acc); err != nil {
		return fail(err)
	}
	p.qp, err = p.pd.CreateQP(client.QPInitAttr{Type: vhca.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: client.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	if err != nil {
		return fail(err)
	}
	g, err := ctx.QueryGID(1, 1)
	if err != nil {
		return fail(err)
	}
	p.ep = client.Endpoint{QPN: p.qp.Num, PSN: p.qp.Num * 0x101 & 0xFFFFFF, GID: g.GID}
	return p, nil
}

// connectTo takes p's QP to RTS towards remote. timeout and retry are
// the RC timer attributes (0: the defaults).
func (p *peer) connectTo(remote client.Endpoint, timeout, retry uint8) error {
	return p.qp.Connect(client.Path{GIDIndex: 1, MTU: vhca.MTU4096, Access: acc, LocalPSN: p.ep.PSN,
		Remote: remote, Timeout: timeout, RetryCnt: retry})
}

func connectPair(t testing.TB, a, b *peer) {
	t.Helper()
	if err := a.connectTo(b.ep, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.connectTo(a.ep, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// waitWC polls cq until it has a completion, failing after 10 s.
func waitWC(t testing.TB, cq *client.CQ) client.WC {
	t.Helper()
	wc, err := pollWC(cq, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

func pollWC(cq *client.CQ, within time.Duration) (client.WC, error) {
	var wc [1]client.WC
	deadline := time.Now().Add(within)
	for spin := 0; time.Now().Before(deadline); spin++ {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return client.WC{}, err
		}
		if n == 1 {
			return wc[0], nil
		}
		if spin > 1000 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return client.WC{}, fmt.Errorf("no completion within %v", within)
}

// noWC checks that cq stays empty for a while.
func noWC(t testing.TB, cq *client.CQ, d time.Duration) {
	t.Helper()
	var wc [1]client.WC
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if n, _ := cq.Poll(wc[:]); n > 0 {
			t.Fatalf("unexpected completion %+v", wc[0])
		}
	}
}

// write posts an RDMA WRITE of n bytes from p's region at off to
// remote address addr (rkey) and waits for its completion.
func (p *peer) write(t testing.TB, off, n int, addr uint64, rkey uint32) client.WC {
	t.Helper()
	wr := client.SendWR{WRID: 0x77, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
		SGL: []client.SGE{{Addr: p.mr.Addr + uint64(off), Length: uint32(n), LKey: p.mr.LKey}}, RemoteAddr: addr, RKey: rkey}
	if _, err := p.qp.PostSend([]client.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	return waitWC(t, p.cq)
}

// checkServes proves the daemon still serves: two new clients connect
// RC QPs and one RDMA WRITEs 64 KiB into the other.
func checkServes(t testing.TB, sock string) {
	t.Helper()
	a := newPeer(t, sock, "vhca0", 1<<16)
	b := newPeer(t, sock, "vhca1", 1<<16)
	connectPair(t, a, b)
	for i := range a.buf.B {
		a.buf.B[i] = byte(i*31 + 5)
	}
	if wc := a.write(t, 0, len(a.buf.B), b.mr.Addr, b.mr.RKey); wc.Status != vhca.WCSuccess {
		t.Fatalf("verbsd no longer serves: write completion %v", wc.Status)
	}
	if !bytes.Equal(a.buf.B, b.buf.B) {
		t.Fatal("verbsd no longer serves: written data differs")
	}
	a.close()
	b.close()
}

// rawConn is a control connection driven message by message, for the
// tests that do what the client library never does.
type rawConn struct {
	t   testing.TB
	c   *abi.Conn
	seq *uint32
}

// on is r reporting to t (a subtest).
func (r *rawConn) on(t testing.TB) *rawConn {
	c := *r
	c.t = t
	return &c
}

func dialRaw(t testing.TB, sock string) *rawConn {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawConn{t: t, c: abi.NewConn(uc), seq: new(uint32)}
	t.Cleanup(func() { r.c.Close() })
	return r
}

// sendRaw writes one message with a header of any version and a body of
// any bytes.
func (r *rawConn) sendRaw(h abi.Header, body []byte, fds ...int) {
	r.t.Helper()
	b, err := binary.Append(nil, binary.NativeEndian, &h)
	if err != nil {
		r.t.Fatal(err)
	}
	b = append(b, body...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := r.c.Unix().WriteMsgUnix(b, oob, nil); err != nil {
		r.t.Fatal(err)
	}
}

// recv reads the next reply, skipping events; err is the connection's
// error (io.EOF and the like when verbsd closed it).
func (r *rawConn) recv() (abi.Header, []byte, []int, error) {
	r.c.Unix().SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		h, body, fds, err := r.c.Recv()
		if err != nil {
			return h, nil, nil, err
		}
		if h.Op == abi.OpEvent && h.Seq == 0 && h.Status == 0 {
			closeFDs(fds) // an event, not a reply (verbsd echoes the op, so a refused Op 100 is a reply)
			continue
		}
		return h, append([]byte(nil), body...), fds, nil
	}
}

// call sends op with body (a struct of abi, []byte or nil) and returns
// the reply, failing on a broken connection or a reply to another
// request.
func (r *rawConn) call(op abi.Op, body any, fds ...int) (abi.Header, []byte, []int) {
	r.t.Helper()
	*r.seq++
	seq := *r.seq
	if err := r.c.Send(abi.Header{Op: op, Seq: seq}, body, fds...); err != nil {
		r.t.Fatalf("%s: %v", op, err)
	}
	h, b, rfds, err := r.recv()
	if err != nil {
		r.t.Fatalf("%s: no reply: %v", op, err)
	}
	if h.Seq != seq {
		r.t.Fatalf("%s: reply to request %d, want %d", op, h.Seq, seq)
	}
	return h, b, rfds
}

// ok calls op, fails unless it succeeds, and decodes the reply into out.
func (r *rawConn) ok(op abi.Op, body any, out any, fds ...int) []int {
	r.t.Helper()
	h, b, rfds := r.call(op, body, fds...)
	if h.Status != 0 {
		r.t.Fatalf("%s: %v: %s", op, unix.Errno(h.Status), b)
	}
	if out != nil {
		if err := abi.Decode(b, out); err != nil {
			r.t.Fatalf("%s reply: %v", op, err)
		}
	}
	return rfds
}

// refused calls op and fails unless verbsd answers errno with a
// message containing every one of words; it returns the message.
func (r *rawConn) refused(errno unix.Errno, op abi.Op, body any, fds []int, words ...string) string {
	r.t.Helper()
	h, b, rfds := r.call(op, body, fds...)
	closeFDs(rfds)
	msg := string(b)
	if unix.Errno(h.Status) != errno {
		r.t.Fatalf("%s: status %v (%q), want %v", op, unix.Errno(h.Status), msg, errno)
	}
	if msg == "" {
		r.t.Fatalf("%s: refused with %v and no message", op, errno)
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			r.t.Fatalf("%s: message %q does not say %q", op, msg, w)
		}
	}
	return msg
}

// hello does the handshake and opens dev.
func (r *rawConn) hello(dev string) {
	r.t.Helper()
	var hr abi.HelloReply
	closeFDs(r.ok(abi.OpHello, nil, &hr))
	if dev != "" {
		var or abi.OpenDeviceReply
		r.ok(abi.OpOpenDevice, abi.OpenDevice{Name: abi.SetName(dev)}, &or)
	}
}

// closed waits for verbsd to close the connection, failing if a reply
// or nothing comes instead.
func (r *rawConn) closed(what string) {
	r.t.Helper()
	h, b, fds, err := r.recv()
	closeFDs(fds)
	if err == nil {
		r.t.Fatalf("%s: verbsd answered %s status %v (%q) and kept the connection", what, h.Op, unix.Errno(h.Status), b)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		r.t.Fatalf("%s: verbsd neither answered nor closed the connection", what)
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// pipeProbe is a pipe whose write end is handed to verbsd: once every
// copy of it is closed, reading the read end gives EOF. It tells whether
// verbsd closed the descriptors a message carried.
type pipeProbe struct {
	r, w *os.File
}

func newPipeProbe(t testing.TB) *pipeProbe {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return &pipeProbe{r: r, w: w}
}

// fds returns n duplicates of the write end (the caller sends them).
func (p *pipeProbe) fds(t testing.TB, n int) []int {
	t.Helper()
	var fds []int
	for range n {
		fd, err := unix.Dup(int(p.w.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	return fds
}

// released closes this side's copies and fails unless verbsd closed its
// own within 5 s.
func (p *pipeProbe) released(t testing.TB, sent []int, what string) {
	t.Helper()
	closeFDs(sent)
	p.w.Close()
	p.r.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := p.r.Read(b[:]); err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("%s: verbsd kept a descriptor the message carried (read: %v)", what, err)
	}
}

// child is a client process: this test binary in child mode.
type child struct {
	cmd   *exec.Cmd
	out   *bufio.Reader
	stdin interface{ Write([]byte) (int, error) }
}

// startChild runs this binary as a client of mode on dev; extra are more
// environment variables.
func startChild(t testing.TB, mode, sock, dev string, extra ...string) *child {
	t.Helper()
	cmd := childCmd(mode, sock, dev, extra...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &child{cmd: cmd, out: bufio.NewReader(out), stdin: in}
}

func childCmd(mode, sock, dev string, extra ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envSocket+"="+sock, envDevice+"="+dev)
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stderr = os.Stderr
	return cmd
}

// line reads the child's next line of output; a line "error: ..." or
// the end of its output fails the test.
func (c *child) line(t testing.TB) []string {
	t.Helper()
	s, err := c.out.ReadString('\n')
	if err != nil {
		c.kill()
		t.Fatalf("child ended without saying more: %v", err)
	}
	if strings.HasPrefix(s, "error:") {
		c.kill()
		t.Fatalf("child: %s", s)
	}
	return strings.Fields(s)
}

// kill SIGKILLs the child and waits for it to be gone.
func (c *child) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

// The child modes. "min": open the device, make a PD, a registered
// buffer, a CQ and a QP, say "ready" and wait to be killed. "peer": the
// same, then connect the QP to the parent's ($SOFTIB_TEST_REMOTE: QPN,
// PSN, GID in hex, address and rkey of the parent's region), say
// "ready QPN PSN GID", wait for "go" on stdin, RDMA WRITE a pattern into
// the parent's region, post receives and one more WRITE left in flight,
// say "posted" and wait to be killed. The end of stdin ends the child:
// a dead parent leaves no child behind.
func runChild(mode string) int {
	fail := func(err error) int {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	sock, dev := os.Getenv(envSocket), os.Getenv(envDevice)
	depth := 4
	if mode == "peer" {
		depth = 64
	}
	p, err := makePeer(sock, dev, 1<<16, depth)
	if err != nil {
		return fail(err)
	}
	in := bufio.NewReader(os.Stdin)
	switch mode {
	case "min":
		fmt.Println("ready")
	case "peer":
		f := strings.Fields(os.Getenv(envRemote))
		if len(f) != 5 {
			return fail(fmt.Errorf("%s=%q", envRemote, os.Getenv(envRemote)))
		}
		var remote client.Endpoint
		qpn, _ := strconv.ParseUint(f[0], 10, 32)
		psn, _ := strconv.ParseUint(f[1], 10, 32)
		gid, _ := hex.DecodeString(f[2])
		addr, _ := strconv.ParseUint(f[3], 10, 64)
		rkey, _ := strconv.ParseUint(f[4], 10, 32)
		remote.QPN, remote.PSN = uint32(qpn), uint32(psn)
		copy(remote.GID[:], gid)
		if err := p.connectTo(remote, 0, 0); err != nil {
			return fail(err)
		}
		fmt.Printf("ready %d %d %x\n", p.ep.QPN, p.ep.PSN, p.ep.GID[:])
		if s, err := in.ReadString('\n'); err != nil || s != "go\n" {
			return fail(fmt.Errorf("no go: %q %v", s, err))
		}
		for i := range p.buf.B {
			p.buf.B[i] = byte(i*13 + 7)
		}
		wr := client.SendWR{WRID: 1, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
			SGL: []client.SGE{{Addr: p.mr.Addr, Length: 4096, LKey: p.mr.LKey}}, RemoteAddr: addr, RKey: uint32(rkey)}
		if _, err := p.qp.PostSend([]client.SendWR{wr}); err != nil {
			return fail(err)
		}
		wc, err := pollWC(p.cq, 10*time.Second)
		if err != nil {
			return fail(err)
		}
		if wc.Status != vhca.WCSuccess {
			return fail(fmt.Errorf("write completion: %v", wc.Status))
		}
		for i := range 8 {
			rwr := client.RecvWR{WRID: uint64(100 + i), SGL: []client.SGE{{Addr: p.mr.Addr + 4096, Length: 4096, LKey: p.mr.LKey}}}
			if _, err := p.qp.PostRecv([]client.RecvWR{rwr}); err != nil {
				return fail(err)
			}
		}
		wr.WRID, wr.SGL[0].Length = 2, uint32(len(p.buf.B))
		if _, err := p.qp.PostSend([]client.SendWR{wr}); err != nil {
			return fail(err)
		}
		fmt.Println("posted")
	default:
		return fail(fmt.Errorf("unknown child mode %q", mode))
	}
	in.WriteTo(io.Discard) // until the parent kills us or goes
	return 0
}

// buildVerbsd builds cmd/verbsd into a temporary directory.
func buildVerbsd(t testing.TB) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			t.Skip("no go command to build cmd/verbsd")
		}
	}
	bin := filepath.Join(t.TempDir(), "verbsd")
	cmd := exec.Command(gobin, "build", "-o", bin, "github.com/softib/softib/cmd/verbsd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/verbsd: %v\n%s", err, out)
	}
	return bin
}

// daemon is the verbsd binary running.
type daemon struct {
	cmd    *exec.Cmd
	sock   string
	exited chan struct{} // closed when it has exited (cmd.ProcessState set)
}

// startDaemon runs bin with two piped devices on a socket in a temporary
// directory, and waits until it accepts clients. It is killed at cleanup
// if still running.
func startDaemon(t testing.TB, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{sock: filepath.Join(t.TempDir(), "verbsd.sock"), exited: make(chan struct{})}
	args = append([]string{"-socket", d.sock, "-device", "vhca0,addr=10.0.0.1,pipe=vhca1", "-device", "vhca1,addr=10.0.0.2"}, args...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stderr = os.Stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
	})
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unixpacket", d.sock); err == nil {
			c.Close()
			return d
		}
		select {
		case <-d.exited:
			t.Fatalf("verbsd exited at start: %v", d.cmd.ProcessState)
		default:
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("verbsd does not accept clients within 10 s")
		}
	}
}
