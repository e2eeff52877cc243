package pingpong

import (
	"errors"
	"fmt"
	"io"
	"net"
)

// doneMsg is the client's last message, "done" with its NUL: the C client
// writes sizeof "done" = 5 bytes and the C server insists on reading
// exactly that many.
const doneMsg = "done\x00"

// Session is the TCP connection left open after the address exchange, for
// the final "done" handshake. Callers must call Done (or Close on error)
// exactly once.
type Session struct {
	conn   net.Conn
	server bool
}

// Done completes the exchange as the C programs do and closes the
// connection. On the client it writes "done\x00" and closes, as
// pp_client_exch_dest does right after reading the server's address. On the
// server it reads the 5-byte message and closes, as pp_server_exch_dest
// does right after writing its own address; like C it checks the length
// only, not the text.
//
// A C server waits for this message before it starts its ping-pong loop, so
// a client must call Done as soon as ClientExchange returns, before posting
// its first send.
func (s *Session) Done() error {
	var err error
	if s.server {
		var buf [len(doneMsg)]byte
		_, err = io.ReadFull(s.conn, buf[:])
		if err != nil {
			err = fmt.Errorf("pingpong: couldn't receive \"done\": %w", err)
		}
	} else {
		_, err = io.WriteString(s.conn, doneMsg)
		if err != nil {
			err = fmt.Errorf("pingpong: couldn't send \"done\": %w", err)
		}
	}
	return errors.Join(err, s.conn.Close())
}

// Close abandons the session without the handshake; the peer sees the
// connection close, as a C peer does when its side fails.
func (s *Session) Close() error { return s.conn.Close() }
