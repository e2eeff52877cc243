package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Conn is one end of perftest's TCP setup connection. Its methods are the
// protocol's steps; each one is a symmetric exchange of fixed-size
// messages in which the client writes first and the server reads first, as
// ctx_xchg_data_ethernet and ctx_hand_shake do. Session strings the steps
// together in the order each perftest program uses.
type Conn struct {
	nc     net.Conn
	client bool
	// Format is the Dest wire format; both peers must use the same one.
	Format WireFormat
}

// Listener is perftest's server socket (ethernet_server_connect).
type Listener struct {
	ln net.Listener
}

// Listen opens the server socket, e.g. Listen(":18515").
func Listen(addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Listener{ln: ln}, nil
}

// Addr is the listening address; useful with port 0.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// Accept waits for the client. perftest accepts a single client and then
// closes its listening socket; callers wanting that behaviour close the
// Listener after Accept. Cancelling ctx aborts the wait (and closes the
// Listener, the only portable way to interrupt Accept).
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	stop := context.AfterFunc(ctx, func() { l.ln.Close() })
	defer stop()
	nc, err := l.ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return &Conn{nc: nc}, nil
}

// Dial connects to a perftest server as its client does
// (ethernet_client_connect): one attempt, no retry.
func Dial(ctx context.Context, host string, port int) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	return &Conn{nc: nc, client: true}, nil
}

// NewConn wraps an established connection; client tells which side of the
// protocol this end plays (the one that connected, perftest's side with a
// servername).
func NewConn(nc net.Conn, client bool) *Conn { return &Conn{nc: nc, client: client} }

// IsClient reports whether this end writes first.
func (c *Conn) IsClient() bool { return c.client }

// SetDeadline bounds every following step; perftest itself waits forever.
func (c *Conn) SetDeadline(t time.Time) error { return c.nc.SetDeadline(t) }

// Close closes the socket without the closing barrier; see CloseConnection.
func (c *Conn) Close() error { return c.nc.Close() }

// Exchange is ctx_xchg_data_ethernet: send local and receive the peer's
// message of the same size, the client writing first. perftest reads with
// a single read() and fails on a short one; this reads until the message is
// complete, which a well-behaved peer cannot tell apart.
func (c *Conn) Exchange(local []byte) ([]byte, error) {
	return c.exchange(local, len(local))
}

func (c *Conn) exchange(local []byte, remoteSize int) ([]byte, error) {
	remote := make([]byte, remoteSize)
	if c.client {
		if _, err := c.nc.Write(local); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c.nc, remote); err != nil {
			return nil, err
		}
		return remote, nil
	}
	if _, err := io.ReadFull(c.nc, remote); err != nil {
		return nil, err
	}
	if _, err := c.nc.Write(local); err != nil {
		return nil, err
	}
	return remote, nil
}

// ExchangeVersions is exchange_versions: 16 bytes each way, the version
// string NUL-padded. It returns the remote version string.
func (c *Conn) ExchangeVersions(local string) (string, error) {
	b, err := c.Exchange(encodeVersion(local))
	if err != nil {
		return "", fmt.Errorf("perftest: exchanging versions: %w", err)
	}
	return decodeVersion(b), nil
}

// ExchangeSysData is check_sys_data's two exchanges: the cycle buffer
// (page size), then the cache line size, each a 4-byte big-endian int.
// perftest runs it only when the remote version is >= 5.32 and keeps the
// larger of each pair.
func (c *Conn) ExchangeSysData(cycleBuffer, cacheLineSize int32) (remCycleBuffer, remCacheLineSize int32, err error) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(cycleBuffer))
	r, err := c.Exchange(b[:])
	if err != nil {
		return 0, 0, fmt.Errorf("perftest: exchanging page size: %w", err)
	}
	remCycleBuffer = int32(binary.BigEndian.Uint32(r))
	binary.BigEndian.PutUint32(b[:], uint32(cacheLineSize))
	r, err = c.Exchange(b[:])
	if err != nil {
		return 0, 0, fmt.Errorf("perftest: exchanging cache line size: %w", err)
	}
	remCacheLineSize = int32(binary.BigEndian.Uint32(r))
	return remCycleBuffer, remCacheLineSize, nil
}

// ExchangeMTU is check_mtu's exchange for a remote version >= 5.31: the
// ibv_mtu enum as sprintf("%d") text in a 2-byte field, "5\0" for 4096. The
// returned remote MTU is what strtol makes of the text, 0 when unparsable;
// see NegotiateMTU.
func (c *Conn) ExchangeMTU(local MTU) (MTU, error) {
	s := strconv.Itoa(int(local))
	if len(s) != 1 {
		return 0, fmt.Errorf("perftest: MTU enum %d does not fit the 2-byte field", local)
	}
	r, err := c.Exchange([]byte{s[0], 0})
	if err != nil {
		return 0, fmt.Errorf("perftest: exchanging MTU: %w", err)
	}
	n := 0
	for _, ch := range r {
		if ch < '0' || ch > '9' {
			break
		}
		n = n*10 + int(ch-'0')
	}
	return MTU(n), nil
}

// NegotiateMTU is check_mtu's rule: the smaller of both MTUs, ignoring a
// remote value that is not a valid ibv_mtu.
func NegotiateMTU(local, remote MTU) MTU {
	if remote.Valid() && local > remote {
		return remote
	}
	return local
}

// ExchangeParams is negotiate_params' exchange of struct
// perftest_parameters_negotiate; mlx5dv selects the struct size the peer
// was built with (see ParamsSize). It does not compare; see Params.Compare.
func (c *Conn) ExchangeParams(local *Params, mlx5dv bool) (*Params, error) {
	b, err := c.Exchange(local.Marshal(mlx5dv))
	if err != nil {
		return nil, fmt.Errorf("perftest: exchanging negotiation parameters: %w", err)
	}
	p, err := UnmarshalParams(b)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// HandShake is ctx_hand_shake for one destination: send ours, receive
// theirs, in c.Format. perftest also uses it as a barrier, sending QP 0's
// destination and ignoring what comes back.
func (c *Conn) HandShake(local Dest) (Dest, error) {
	msg, err := local.Encode(c.Format)
	if err != nil {
		return Dest{}, err
	}
	r, err := c.Exchange(msg)
	if err != nil {
		return Dest{}, fmt.Errorf("perftest: exchanging destination: %w", err)
	}
	return DecodeDest(r, c.Format)
}

// ExchangeDests is the per-QP loop of the tests' main(): one HandShake per
// QP, in QP order. Both sides must have the same number of QPs (-q).
func (c *Conn) ExchangeDests(local []Dest) ([]Dest, error) {
	remote := make([]Dest, len(local))
	for i := range local {
		d, err := c.HandShake(local[i])
		if err != nil {
			return nil, fmt.Errorf("QP %d: %w", i, err)
		}
		remote[i] = d
	}
	return remote, nil
}

// CloseConnection is ctx_close_connection: a last barrier with QP 0's
// destination, then the socket is closed.
func (c *Conn) CloseConnection(local Dest) error {
	_, err := c.HandShake(local)
	cerr := c.nc.Close()
	if err != nil {
		return err
	}
	return cerr
}
