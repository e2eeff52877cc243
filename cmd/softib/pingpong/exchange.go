package pingpong

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Listen opens the server's listening socket on every local address, as
// pp_server_exch_dest binds getaddrinfo(NULL, port, AI_PASSIVE)'s wildcard
// address. Go's listener sets SO_REUSEADDR and is dual-stack, like C's.
func Listen(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
}

// ServerExchange is the server's address exchange on port: Listen, then
// Serve. See Serve.
func ServerExchange(ctx context.Context, port int, local Dest, connect func(remote Dest) error) (Dest, *Session, error) {
	ln, err := Listen(port)
	if err != nil {
		return Dest{}, nil, fmt.Errorf("pingpong: couldn't listen to port %d: %w", port, err)
	}
	return Serve(ctx, ln, local, connect)
}

// Serve is pp_server_exch_dest on an open listener: it accepts one
// connection and closes ln (one client per run, as in C), reads the
// client's Dest, calls connect with it, and only then sends local. connect,
// if not nil, must bring the QP to RTR and RTS (and, for ud, create the
// AH): the client may send as soon as it has read local. If connect fails,
// the connection is closed without sending local, as in C.
//
// The returned Session's Done receives the client's "done".
func Serve(ctx context.Context, ln net.Listener, local Dest, connect func(remote Dest) error) (Dest, *Session, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	ln.Close()
	if ctxErr := ctx.Err(); ctxErr != nil {
		if err == nil {
			conn.Close()
		}
		return Dest{}, nil, ctxErr
	}
	if err != nil {
		return Dest{}, nil, fmt.Errorf("pingpong: accept failed: %w", err)
	}
	s := &Session{conn: conn, server: true}
	remote, err := withContext(ctx, conn, func() (Dest, error) {
		remote, err := readDest(conn)
		if err != nil {
			return Dest{}, fmt.Errorf("pingpong: couldn't read remote address: %w", err)
		}
		if connect != nil {
			if err := connect(remote); err != nil {
				return Dest{}, fmt.Errorf("pingpong: couldn't connect to remote QP: %w", err)
			}
		}
		if _, err := conn.Write(local.message()); err != nil {
			return Dest{}, fmt.Errorf("pingpong: couldn't send local address: %w", err)
		}
		return remote, nil
	})
	if err != nil {
		conn.Close()
		return Dest{}, nil, err
	}
	return remote, s, nil
}

// ClientExchange is pp_client_exch_dest: it connects to host:port, sends
// local and reads the server's Dest. The returned Session's Done sends
// "done"; call it at once (see Session.Done).
func ClientExchange(ctx context.Context, host string, port int, local Dest) (Dest, *Session, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return Dest{}, nil, fmt.Errorf("pingpong: couldn't connect to %s:%d: %w", host, port, err)
	}
	s := &Session{conn: conn}
	remote, err := withContext(ctx, conn, func() (Dest, error) {
		if _, err := conn.Write(local.message()); err != nil {
			return Dest{}, fmt.Errorf("pingpong: couldn't send local address: %w", err)
		}
		remote, err := readDest(conn)
		if err != nil {
			return Dest{}, fmt.Errorf("pingpong: couldn't read remote address: %w", err)
		}
		return remote, nil
	})
	if err != nil {
		conn.Close()
		return Dest{}, nil, err
	}
	return remote, s, nil
}

// readDest reads one MsgSize-byte address message. C reads it with a single
// read() and gives up on a short one; reading until all 52 bytes are in is
// the robust equivalent, since a C peer writes them in one write().
func readDest(r io.Reader) (Dest, error) {
	var buf [MsgSize]byte
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return Dest{}, err
	}
	return ParseDest(string(buf[:]))
}

// withContext runs f, which does I/O on conn, so that cancelling ctx makes
// that I/O fail instead of blocking for ever.
func withContext(ctx context.Context, conn net.Conn, f func() (Dest, error)) (Dest, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	d, err := f()
	if !stop() {
		// Cancelled while f ran: the expired deadline broke f's I/O or
		// would break the session's, which the caller now closes.
		return Dest{}, ctx.Err()
	}
	return d, err
}
