package pingpong

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

var (
	serverDest = Dest{LID: 0x0002, QPN: 0x000123, PSN: 0x654321, GID: gid("fe80::1")}
	clientDest = Dest{LID: 0x0003, QPN: 0x000456, PSN: 0x0abcde, GID: gid("::ffff:10.0.0.1")}
)

func listen(t *testing.T) (net.Listener, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type result struct {
	remote Dest
	err    error
}

// TestExchange runs both Go sides against each other, Done included.
func TestExchange(t *testing.T) {
	ctx := testContext(t)
	ln, port := listen(t)

	var connected Dest
	srv := make(chan result, 1)
	go func() {
		remote, s, err := Serve(ctx, ln, serverDest, func(d Dest) error {
			connected = d
			return nil
		})
		if err == nil {
			err = s.Done()
		}
		srv <- result{remote, err}
	}()

	remote, s, err := ClientExchange(ctx, "127.0.0.1", port, clientDest)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	if remote != serverDest {
		t.Errorf("client got %+v, want %+v", remote, serverDest)
	}
	r := <-srv
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.remote != clientDest || connected != clientDest {
		t.Errorf("server got %+v, connected to %+v; want %+v", r.remote, connected, clientDest)
	}
	// One client per run: Serve closed the listener, as C does.
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("listener still accepting after the exchange")
	}
}

// TestServeBytes plays a C client byte by byte against Serve and checks
// that the server connects its QP before it answers.
func TestServeBytes(t *testing.T) {
	ctx := testContext(t)
	ln, port := listen(t)
	release := make(chan struct{})
	srv := make(chan result, 1)
	go func() {
		remote, s, err := Serve(ctx, ln, serverDest, func(Dest) error {
			<-release
			return nil
		})
		if err == nil {
			err = s.Done()
		}
		srv <- result{remote, err}
	}()

	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := "0003:000456:0abcde:00000000000000000000ffff0a000001\x00"
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}

	// Nothing may arrive while the server is still connecting its QP.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var one [1]byte
	if n, err := c.Read(one[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("before connect returned: read %d, %v; want a timeout", n, err)
	}
	close(release)

	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, MsgSize)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if got, want := string(buf), "0002:000123:654321:fe800000000000000000000000000001\x00"; got != want {
		t.Errorf("server sent %q, want %q", got, want)
	}
	if _, err := io.WriteString(c, "done\x00"); err != nil {
		t.Fatal(err)
	}
	r := <-srv
	if r.err != nil || r.remote != clientDest {
		t.Errorf("Serve = %+v, %v; want %+v", r.remote, r.err, clientDest)
	}
	// The server closes after "done": the client reads EOF.
	if n, err := c.Read(one[:]); n != 0 || err != io.EOF {
		t.Errorf("after done: read %d, %v; want EOF", n, err)
	}
}

// TestClientExchangeBytes plays a C server byte by byte against
// ClientExchange.
func TestClientExchangeBytes(t *testing.T) {
	ctx := testContext(t)
	ln, port := listen(t)
	defer ln.Close()
	type seen struct {
		msg, done string
		eof       bool
		err       error
	}
	srv := make(chan seen, 1)
	go func() {
		var s seen
		c, err := ln.Accept()
		if err != nil {
			srv <- seen{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		if _, s.err = io.ReadFull(c, buf[:MsgSize]); s.err != nil {
			srv <- s
			return
		}
		s.msg = string(buf[:MsgSize])
		if _, s.err = io.WriteString(c, "0002:000123:654321:fe800000000000000000000000000001\x00"); s.err != nil {
			srv <- s
			return
		}
		// C reads up to a whole message here and wants exactly 5 bytes.
		n, err := c.Read(buf)
		s.done, s.err = string(buf[:n]), err
		_, err = c.Read(buf)
		s.eof = err == io.EOF
		srv <- s
	}()

	remote, sess, err := ClientExchange(ctx, "127.0.0.1", port, clientDest)
	if err != nil {
		t.Fatal(err)
	}
	if remote != serverDest {
		t.Errorf("client got %+v, want %+v", remote, serverDest)
	}
	if err := sess.Done(); err != nil {
		t.Fatal(err)
	}
	s := <-srv
	if s.err != nil {
		t.Fatal(s.err)
	}
	if want := "0003:000456:0abcde:00000000000000000000ffff0a000001\x00"; s.msg != want {
		t.Errorf("client sent %q, want %q", s.msg, want)
	}
	if s.done != "done\x00" || !s.eof {
		t.Errorf("client ended with %q, eof %v; want \"done\\x00\" then EOF", s.done, s.eof)
	}
}

// TestServeConnectError: when the QP cannot be connected the C server
// closes without sending its address, and the client sees the failure.
func TestServeConnectError(t *testing.T) {
	ctx := testContext(t)
	ln, port := listen(t)
	boom := errors.New("boom")
	srv := make(chan error, 1)
	go func() {
		_, _, err := Serve(ctx, ln, serverDest, func(Dest) error { return boom })
		srv <- err
	}()
	if _, _, err := ClientExchange(ctx, "127.0.0.1", port, clientDest); err == nil {
		t.Error("ClientExchange succeeded against a failing server")
	}
	if err := <-srv; !errors.Is(err, boom) {
		t.Errorf("Serve = %v, want %v", err, boom)
	}
}

// TestServeShortMessage: a message that is cut short is an error, as C's
// "Couldn't read remote address".
func TestServeShortMessage(t *testing.T) {
	ctx := testContext(t)
	ln, port := listen(t)
	srv := make(chan error, 1)
	go func() {
		_, _, err := Serve(ctx, ln, serverDest, nil)
		srv <- err
	}()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "0003:000456:0abcde")
	c.Close()
	if err := <-srv; err == nil {
		t.Error("Serve accepted a short message")
	}
}

// TestServerDoneNeedsDone: the server's Done fails if the client closes
// without "done", as C's read() != sizeof "done" check does.
func TestServerDoneNeedsDone(t *testing.T) {
	ctx := testContext(t)
	ln, port := listen(t)
	srv := make(chan error, 1)
	go func() {
		_, s, err := Serve(ctx, ln, serverDest, nil)
		if err == nil {
			err = s.Done()
		}
		srv <- err
	}()
	_, s, err := ClientExchange(ctx, "127.0.0.1", port, clientDest)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := <-srv; err == nil {
		t.Error("server Done succeeded without \"done\"")
	}
}

func TestServeCancel(t *testing.T) {
	ln, _ := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	srv := make(chan error, 1)
	go func() {
		_, _, err := Serve(ctx, ln, serverDest, nil)
		srv <- err
	}()
	cancel()
	select {
	case err := <-srv:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Serve = %v, want %v", err, context.Canceled)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve ignored cancellation")
	}
}

func TestServerExchangePort(t *testing.T) {
	// ServerExchange listens on the wildcard address; find a free port
	// first, then let it listen there.
	ln, port := listen(t)
	ln.Close()
	ctx := testContext(t)
	srv := make(chan result, 1)
	go func() {
		remote, s, err := ServerExchange(ctx, port, serverDest, nil)
		if err == nil {
			err = s.Done()
		}
		srv <- result{remote, err}
	}()
	var (
		remote Dest
		s      *Session
		err    error
	)
	for range 100 { // until the server is listening
		if remote, s, err = ClientExchange(ctx, "localhost", port, clientDest); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Done(); err != nil {
		t.Fatal(err)
	}
	if r := <-srv; r.err != nil || r.remote != clientDest || remote != serverDest {
		t.Errorf("got server %+v, %v and client %+v", r.remote, r.err, remote)
	}
}
