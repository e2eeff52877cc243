package verbsd_test

// Shutdown (SIGTERM for the binary) with clients connected: every client
// gets DEVICE_FATAL and its verbs then fail with ErrDeviceFatal, verbsd
// releases everything and removes its socket, whatever state the
// clients' connections are in (a client that never said Hello included).

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
)

// connected are clients of every kind, connected when verbsd goes: two
// with a connected RC pair (one with a WRITE in flight), one raw
// connection that opened a device, one that said Hello only, and one
// that never said anything.
type connected struct {
	a, b         *peer
	opened, said *rawConn
	silent       *rawConn
}

func connectAll(t *testing.T, sock string) *connected {
	// The silent one first: verbsd accepts in order, so once the others
	// are served it has been accepted too (and is not just waiting in
	// the listener's backlog).
	c := &connected{silent: dialRaw(t, sock)}
	c.a, c.b = newPeer(t, sock, "vhca0", 1<<20), newPeer(t, sock, "vhca1", 1<<20)
	connectPair(t, c.a, c.b)
	if wc := c.a.write(t, 0, 4096, c.b.mr.Addr, c.b.mr.RKey); wc.Status != vhca.WCSuccess {
		t.Fatalf("write: %v", wc.Status)
	}
	wr := client.SendWR{WRID: 2, Opcode: vhca.WRRDMAWrite, SGL: []client.SGE{c.a.mr.SGE()}, RemoteAddr: c.b.mr.Addr, RKey: c.b.mr.RKey}
	if _, err := c.a.qp.PostSend([]client.SendWR{wr, wr, wr}); err != nil {
		t.Fatal(err)
	}
	c.opened = dialRaw(t, sock)
	c.opened.hello("vhca0")
	c.said = dialRaw(t, sock)
	c.said.hello("")
	return c
}

// checkFatal checks what the clients saw of verbsd's going.
func (c *connected) checkFatal(t *testing.T) {
	for _, p := range []*peer{c.a, c.b} {
		ev, err := p.ctx.AsyncEvent(ctxTimeout(t, 5*time.Second))
		if err != nil {
			t.Fatalf("no async event within 5 s: %v", err)
		}
		if ev.Type != vhca.EventDeviceFatal {
			t.Fatalf("async event %v, want DEVICE_FATAL", ev.Type)
		}
		if _, err := p.ctx.AllocPD(); !errors.Is(err, client.ErrDeviceFatal) {
			t.Errorf("AllocPD after DEVICE_FATAL: %v", err)
		}
		if _, err := p.ctx.QueryDevice(); !errors.Is(err, client.ErrDeviceFatal) {
			t.Errorf("QueryDevice after DEVICE_FATAL: %v", err)
		}
		if _, err := p.pd.RegMR(p.buf.B[:4096], acc); !errors.Is(err, client.ErrDeviceFatal) {
			t.Errorf("RegMR after DEVICE_FATAL: %v", err)
		}
		wr := client.SendWR{Opcode: vhca.WRSend, SGL: []client.SGE{{Addr: p.mr.Addr, Length: 8, LKey: p.mr.LKey}}}
		if _, err := p.qp.PostSend([]client.SendWR{wr}); !errors.Is(err, client.ErrDeviceFatal) {
			t.Errorf("PostSend after DEVICE_FATAL: %v", err)
		}
		if _, err := p.qp.PostRecv([]client.RecvWR{{SGL: []client.SGE{p.mr.SGE()}}}); !errors.Is(err, client.ErrDeviceFatal) {
			t.Errorf("PostRecv after DEVICE_FATAL: %v", err)
		}
		if err := p.qp.Modify(&client.QPAttr{State: vhca.QPStateError}, vhca.QPAttrState); !errors.Is(err, client.ErrDeviceFatal) {
			t.Errorf("ModifyQP after DEVICE_FATAL: %v", err)
		}
	}
	// The raw connections that said Hello see the event, then the end.
	for _, r := range []*rawConn{c.opened, c.said} {
		r.c.Unix().SetReadDeadline(time.Now().Add(5 * time.Second))
		h, body, fds, err := r.c.Recv()
		closeFDs(fds)
		if err != nil {
			t.Fatalf("raw client: no event: %v", err)
		}
		var ev abi.Event
		if h.Op != abi.OpEvent || abi.Decode(body, &ev) != nil || ev.Type != uint32(vhca.EventDeviceFatal) {
			t.Fatalf("raw client: got %v %x, want a DEVICE_FATAL event", h.Op, body)
		}
		r.closed("after DEVICE_FATAL")
	}
	c.silent.closed("a client that never said Hello, at shutdown")
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func TestShutdownWithClients(t *testing.T) {
	base := currentLevels(t)
	srv, sock := startServer(t, verbsd.Config{})
	c := connectAll(t, sock)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		srv.Shutdown()
		close(done)
	}()
	select {
	case <-done:
		t.Logf("Shutdown took %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return within 5 s")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket still there after Shutdown: %v", err)
	}
	c.checkFatal(t)
	if _, err := client.Open("vhca0", &client.Options{Socket: sock}); err == nil {
		t.Error("a client connected after Shutdown")
	}
	// verbsd holds nothing any more: with the clients' own objects
	// gone, this process is back where it started.
	for _, p := range []*peer{c.a, c.b} {
		p.close()
	}
	for _, r := range []*rawConn{c.opened, c.said, c.silent} {
		r.c.Close()
	}
	waitLevels(t, base, 5*time.Second)
}

func TestSIGTERMWithClients(t *testing.T) {
	d := startDaemon(t, buildVerbsd(t))
	c := connectAll(t, d.sock)
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
		t.Logf("verbsd exited %v after SIGTERM: %v", time.Since(start), d.cmd.ProcessState)
	case <-time.After(5 * time.Second):
		t.Fatal("verbsd did not exit within 5 s of SIGTERM")
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("verbsd exited with status %d, want 0", code)
	}
	if _, err := os.Stat(d.sock); !os.IsNotExist(err) {
		t.Errorf("socket still there after verbsd exited: %v", err)
	}
	c.checkFatal(t)
}
