package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Conn sends and receives control messages on a SOCK_SEQPACKET unix
// socket: one message per packet, file descriptors alongside.
type Conn struct {
	c   *net.UnixConn
	buf []byte
	oob []byte
}

// MaxFDs is the most file descriptors one message carries.
const MaxFDs = 4

// NewConn wraps a connected unixpacket socket.
func NewConn(c *net.UnixConn) *Conn {
	return &Conn{c: c, buf: make([]byte, MaxMsg), oob: make([]byte, unix.CmsgSpace(4*MaxFDs))}
}

// Unix is the socket itself.
func (c *Conn) Unix() *net.UnixConn { return c.c }

// Close closes the socket.
func (c *Conn) Close() error { return c.c.Close() }

// Send writes one message: h, then body (a struct of this package, a
// slice of them, a []byte, or nil), with fds attached.
func (c *Conn) Send(h Header, body any, fds ...int) error {
	h.Version = Version
	b, err := binary.Append(make([]byte, 0, 256), ne, &h)
	if err != nil {
		return err
	}
	switch v := body.(type) {
	case nil:
	case []byte:
		b = append(b, v...)
	case string:
		b = append(b, v...)
	default:
		if b, err = binary.Append(b, ne, v); err != nil {
			return err
		}
	}
	if len(b) > MaxMsg {
		return fmt.Errorf("abi: %s message of %d bytes", h.Op, len(b))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// ErrTruncated says a message or its descriptors did not fit.
var ErrTruncated = errors.New("abi: control message truncated")

// Recv reads one message. The body aliases the Conn's buffer until the
// next Recv. The caller owns the returned descriptors and must close them.
func (c *Conn) Recv() (Header, []byte, []int, error) {
	var h Header
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return h, nil, nil, err
	}
	var fds []int
	if oobn > 0 {
		fds, err = parseRights(c.oob[:oobn])
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 && err == nil {
		err = ErrTruncated
	}
	if err == nil && n == 0 {
		err = net.ErrClosed // an empty packet: the peer closed (SOCK_SEQPACKET EOF)
	}
	if err == nil && n < HeaderSize {
		err = fmt.Errorf("abi: message of %d bytes, shorter than a header", n)
	}
	if err != nil {
		closeAll(fds)
		return h, nil, nil, err
	}
	if _, err := binary.Decode(c.buf[:HeaderSize], ne, &h); err != nil {
		closeAll(fds)
		return h, nil, nil, err
	}
	return h, c.buf[HeaderSize:n], fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level == unix.SOL_SOCKET && msgs[i].Header.Type == unix.SCM_RIGHTS {
			f, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				closeAll(fds)
				return nil, err
			}
			fds = append(fds, f...)
		}
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Decode reads a body of type T, which must be exactly its size.
func Decode(body []byte, v any) error {
	if want := binary.Size(v); len(body) != want {
		return fmt.Errorf("abi: body of %d bytes, want %d", len(body), want)
	}
	_, err := binary.Decode(body, ne, v)
	return err
}

// SetName writes s into a Name.
func SetName(s string) (n Name) {
	copy(n[:len(n)-1], s)
	return n
}

// String is the name up to its first NUL.
func (n Name) String() string {
	for i, c := range n {
		if c == 0 {
			return string(n[:i])
		}
	}
	return string(n[:])
}
