package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/mmsg"
)

// The kernel's own UDP between the same two hosts, the yardstick for the
// figures softib perf reports across a lab: udp_bw (a blaster: the client
// sends -n datagrams of -s bytes, the server counts what arrives) and
// udp_lat (a ping-pong of -s bytes, half the round trip). Same shape of
// command as the perf tests: the server without a host, the client with.
//
// udp_bw is the kernel's best batched UDP: the client sends with
// sendmmsg(2) and the server receives with recvmmsg(2), -b datagrams a
// call (64 unless told; -b 1 is a plain write or recvfrom a datagram).
func udpCmd(test string, args []string) error { return udpRun(os.Stdout, test, args, nil) }

// maxUDPBatch bounds -b, the datagrams a sendmmsg or recvmmsg call.
const maxUDPBatch = 1024

// udpEnd, the first 8 bytes of a datagram, ends a udp_bw run; the server
// answers it with the same 8 bytes. Data datagrams carry their sequence
// number there instead.
const udpEnd = ^uint64(0)

// udpRun is udpCmd printing to w; a server calls ready, if not nil, with
// the address it listens on once it does (so -p 0 takes a free port).
func udpRun(w io.Writer, test string, args []string, ready func(net.Addr)) error {
	fs := flag.NewFlagSet("perf "+test, flag.ContinueOnError)
	size := fs.Int("s", 8972, "datagram payload bytes")
	iters := fs.Int("n", 100000, "datagrams (udp_bw) or round trips (udp_lat)")
	port := fs.Int("p", 18516, "UDP port")
	batch := 1
	busy := false
	if test == "udp_lat" {
		fs.BoolVar(&busy, "busy", false, "spin on non-blocking receives (both sides), as a busy-polling verbs program does, instead of sleeping in recv")
	}
	if test == "udp_bw" {
		fs.IntVar(&batch, "b", 64, "datagrams a sendmmsg (client) or recvmmsg (server) call, 1..1024; 1 sends and receives one a syscall")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *size < 8 || *size > 65507 {
		return fmt.Errorf("%s: -s %d (8..65507)", test, *size)
	}
	if *iters < 1 {
		return fmt.Errorf("%s: -n %d (at least 1)", test, *iters)
	}
	if batch < 1 || batch > maxUDPBatch {
		return fmt.Errorf("%s: -b %d: datagrams a sendmmsg/recvmmsg call must be 1..%d", test, batch, maxUDPBatch)
	}
	if fs.NArg() == 0 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{Port: *port})
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadBuffer(8 << 20)
		if ready != nil {
			ready(c.LocalAddr())
		}
		if test == "udp_bw" {
			return udpBWServer(w, c, batch, *size)
		}
		buf := make([]byte, 65536)
		for got := 0; got < *iters; got++ {
			if busy {
				if err := udpEchoBusy(c, buf); err != nil {
					return err
				}
				continue
			}
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return err
			}
			c.WriteToUDP(buf[:n], from)
		}
		return nil
	}
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(fs.Arg(0)), Port: *port})
	if err != nil {
		return err
	}
	defer c.Close()
	if test == "udp_bw" {
		return udpBWClient(w, c, batch, *size, *iters)
	}
	buf := make([]byte, 65536)
	msg := buf[:*size]
	rtts := make([]time.Duration, 0, *iters)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for range *iters {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return err
		}
		read := c.Read
		if busy {
			read = func(b []byte) (int, error) { n, _, err := udpRecvBusy(c, b); return n, err }
		}
		if _, err := read(buf); err != nil {
			return err
		}
		rtts = append(rtts, time.Since(t0))
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	mode := ""
	if busy {
		mode = ", busy polling"
	}
	fmt.Fprintf(w, "udp_lat: %d round trips of %d bytes%s: half round trip typical %.2f us, min %.2f us, p99 %.2f us\n",
		*iters, *size, mode, rtts[len(rtts)/2].Seconds()*1e6/2, rtts[0].Seconds()*1e6/2, rtts[len(rtts)*99/100].Seconds()*1e6/2)
	return nil
}

// udpRecvBusy receives a datagram by spinning on non-blocking recvfrom
// calls, never sleeping in the kernel: the ping-pong a busy-polling
// program sees, without the wake-up of a thread that slept (on this VM,
// tens of microseconds when the cores go idle). It gives up after 30 s.
func udpRecvBusy(c *net.UDPConn, buf []byte) (n int, from unix.Sockaddr, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	if rerr := rc.Read(func(fd uintptr) bool {
		for spins := 1; ; spins++ {
			n, from, err = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if err != unix.EAGAIN {
				return true
			}
			if spins%100000 == 0 && time.Now().After(deadline) {
				err = os.ErrDeadlineExceeded
				return true
			}
		}
	}); rerr != nil {
		return 0, nil, rerr
	}
	return n, from, err
}

// udpEchoBusy receives a datagram by spinning (udpRecvBusy) and sends it
// back where it came from.
func udpEchoBusy(c *net.UDPConn, buf []byte) error {
	n, from, err := udpRecvBusy(c, buf)
	if err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	if werr := rc.Write(func(fd uintptr) bool {
		err = unix.Sendto(int(fd), buf[:n], 0, from)
		return err != unix.EAGAIN
	}); werr != nil {
		return werr
	}
	return err
}

// udpBWServer counts the distinct datagrams that arrive until the end
// marker, answers every end marker it sees (lingering a little after the
// first, in case its answer was lost), and reports the rate.
func udpBWServer(w io.Writer, c *net.UDPConn, batch, size int) error {
	r, err := newUDPReceiver(c, batch)
	if err != nil {
		return err
	}
	const (
		idle   = time.Second           // the client went away
		quiet  = 50 * time.Millisecond // no more end markers: done
		linger = 2 * time.Second       // bound on answering end markers
	)
	var (
		seen                      seqSet
		got, bytes, dups, dsize   int
		first, last, armed, ended time.Time
		end                       = binary.BigEndian.AppendUint64(nil, udpEnd)
	)
	report := func(el time.Duration, how string) {
		if dsize == 0 {
			dsize = size
		}
		fmt.Fprintf(w, "udp_bw: %d of the datagrams of %d bytes arrived in %v: %.2f Gb/s, %.3f Mpps (batches of %d)%s\n",
			got, dsize, el.Round(time.Millisecond), rate(float64(bytes)*8, el)/1e9, rate(float64(got), el)/1e6, batch, how)
		if dups > 0 {
			fmt.Fprintf(w, "udp_bw: and %d duplicates\n", dups)
		}
	}
	for {
		n, err := r.recv()
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return err
			}
			if ended.IsZero() {
				report(last.Sub(first), " (no end marker: the client went quiet)")
			}
			return nil
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		last = now
		for i := range n {
			m := r.msg(i)
			if len(m) < 8 {
				continue
			}
			seq := binary.BigEndian.Uint64(m)
			if seq == udpEnd {
				c.WriteToUDPAddrPort(end, r.from(i))
				if ended.IsZero() {
					ended = now
					report(now.Sub(first), "")
				}
				continue
			}
			if !ended.IsZero() {
				continue // late: the run is over
			}
			if seen.add(seq) {
				got++
				bytes += len(m)
				dsize = len(m)
			} else {
				dups++
			}
		}
		switch {
		case !ended.IsZero():
			if now.Sub(ended) > linger {
				return nil
			}
			c.SetReadDeadline(now.Add(quiet))
		case now.Sub(armed) > idle/10: // not a timer update a batch
			c.SetReadDeadline(now.Add(idle))
			armed = now
		}
	}
}

// udpBWClient sends iters datagrams of size bytes, batch a call, then the
// end marker until the server answers it (every 10 ms, for up to 2 s).
func udpBWClient(w io.Writer, c *net.UDPConn, batch, size, iters int) error {
	c.SetWriteBuffer(4 << 20)
	s, err := newUDPSender(c, batch, size)
	if err != nil {
		return err
	}
	start := time.Now()
	for sent := 0; sent < iters; {
		k := min(batch, iters-sent)
		for j := range k {
			binary.BigEndian.PutUint64(s.bufs[j], uint64(sent+j))
		}
		if err := s.send(k); err != nil {
			return err
		}
		sent += k
	}
	el := time.Since(start)
	answered := udpEndRun(c)
	fmt.Fprintf(w, "udp_bw: sent %d datagrams of %d bytes in %v: %.2f Gb/s, %.3f Mpps offered (batches of %d)\n",
		iters, size, el.Round(time.Millisecond), rate(float64(iters)*float64(size)*8, el)/1e9, rate(float64(iters), el)/1e6, batch)
	if !answered {
		return fmt.Errorf("udp_bw: no answer to the end marker from %v", c.RemoteAddr())
	}
	return nil
}

// udpEndRun sends the end marker every 10 ms until the server answers
// it, for up to 2 s; it reports whether the server did.
func udpEndRun(c *net.UDPConn) bool {
	end := binary.BigEndian.AppendUint64(nil, udpEnd)
	buf := make([]byte, 65536)
	defer c.SetReadDeadline(time.Time{})
	for stop := time.Now().Add(2 * time.Second); time.Now().Before(stop); {
		next := time.Now().Add(10 * time.Millisecond)
		c.Write(end)
		c.SetReadDeadline(next)
		for {
			n, err := c.Read(buf)
			if err == nil {
				if n >= 8 && binary.BigEndian.Uint64(buf) == udpEnd {
					return true
				}
				continue
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				time.Sleep(time.Until(next)) // refused: the server is not (yet, or any more) there
			}
			break
		}
	}
	return false
}

// rate is x a second over el, 0 over no time.
func rate(x float64, el time.Duration) float64 {
	if el <= 0 {
		return 0
	}
	return x / el.Seconds()
}

// seqSet is the set of sequence numbers seen, a bit each; numbers beyond
// maxSeq (a 32 MiB bitmap) are taken as new without looking.
type seqSet struct{ w []uint64 }

const maxSeq = 1 << 28

// add adds seq and reports whether it was new.
func (s *seqSet) add(seq uint64) bool {
	if seq >= maxSeq {
		return true
	}
	i := int(seq >> 6)
	if i >= len(s.w) {
		s.w = append(s.w, make([]uint64, max(i+1, 2*len(s.w))-len(s.w))...)
	}
	b := uint64(1) << (seq & 63)
	if s.w[i]&b != 0 {
		return false
	}
	s.w[i] |= b
	return true
}

// udpSender sends the first k of its datagrams with sendmmsg, batch a
// call; a batch of 1 is a plain write a datagram.
type udpSender struct {
	c    *net.UDPConn
	rc   syscall.RawConn
	hs   []mmsg.Hdr
	bufs [][]byte
}

func newUDPSender(c *net.UDPConn, batch, size int) (*udpSender, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &udpSender{c: c, rc: rc}
	s.hs, s.bufs, _ = mmsg.New(batch, size, false)
	return s, nil
}

func (s *udpSender) send(k int) error {
	if len(s.hs) == 1 {
		for try := 0; ; try++ {
			_, err := s.c.Write(s.bufs[0])
			if !errors.Is(err, unix.ENOBUFS) {
				return err
			}
			mmsg.Backoff(try)
		}
	}
	for off := 0; off < k; {
		n, err := mmsg.Send(s.rc, s.hs[off:k])
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// udpReceiver receives up to batch datagrams at once with recvmmsg; a
// batch of 1 is a plain recvfrom a datagram.
type udpReceiver struct {
	c     *net.UDPConn
	rc    syscall.RawConn
	hs    []mmsg.Hdr
	bufs  [][]byte
	names []unix.RawSockaddrAny
	from1 netip.AddrPort
}

func newUDPReceiver(c *net.UDPConn, batch int) (*udpReceiver, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &udpReceiver{c: c, rc: rc}
	r.hs, r.bufs, r.names = mmsg.New(batch, 65536, true)
	return r, nil
}

// recv receives what has arrived, up to a batch, waiting for the first
// till the read deadline, and returns how many.
func (r *udpReceiver) recv() (int, error) {
	if len(r.hs) == 1 {
		n, from, err := r.c.ReadFromUDPAddrPort(r.bufs[0])
		if err != nil {
			return 0, err
		}
		r.hs[0].Len, r.from1 = uint32(n), from
		return 1, nil
	}
	for i := range r.hs {
		r.hs[i].Hdr.Namelen = unix.SizeofSockaddrAny
	}
	return mmsg.Recv(r.rc, r.hs)
}

// msg is the i'th datagram recv received.
func (r *udpReceiver) msg(i int) []byte { return r.bufs[i][:r.hs[i].Len] }

// from is where the i'th datagram recv received came from.
func (r *udpReceiver) from(i int) netip.AddrPort {
	if len(r.hs) == 1 {
		return r.from1
	}
	return sockaddrAddrPort(&r.names[i])
}

// sockaddrAddrPort is the address and port of an AF_INET or AF_INET6
// sockaddr, the zero AddrPort for another.
func sockaddrAddrPort(sa *unix.RawSockaddrAny) netip.AddrPort {
	switch sa.Addr.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), port)
	case unix.AF_INET6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:])
		a := netip.AddrFrom16(p.Addr)
		if p.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(p.Scope_id), 10))
		}
		return netip.AddrPortFrom(a, port)
	}
	return netip.AddrPort{}
}
