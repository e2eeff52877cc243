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
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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
		if _, err := c.Read(buf); err != nil {
			return err
		}
		rtts = append(rtts, time.Since(t0))
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	fmt.Fprintf(w, "udp_lat: %d round trips of %d bytes: half round trip typical %.2f us, min %.2f us, p99 %.2f us\n",
		*iters, *size, rtts[len(rtts)/2].Seconds()*1e6/2, rtts[0].Seconds()*1e6/2, rtts[len(rtts)*99/100].Seconds()*1e6/2)
	return nil
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

// mmsghdr is struct mmsghdr { struct msghdr msg_hdr; unsigned int msg_len; }
// with its padding (to 64 bytes on amd64 and arm64); x/sys/unix has the
// type, laid out for each architecture, but no sendmmsg or recvmmsg.
type mmsghdr = unix.Mmsghdr

// errRestartSys is ERESTARTSYS, which recvmmsg sometimes leaks to user
// space when a signal (Go's preemption) interrupts it: try again.
const errRestartSys = unix.Errno(512)

// newMmsgs returns n mmsghdrs, each with one buffer of size bytes (its
// iovec), and with a sockaddr to fill if names.
func newMmsgs(n, size int, names bool) ([]mmsghdr, [][]byte, []unix.RawSockaddrAny) {
	hs := make([]mmsghdr, n)
	iovs := make([]unix.Iovec, n)
	slab := make([]byte, n*size)
	bufs := make([][]byte, n)
	var sas []unix.RawSockaddrAny
	if names {
		sas = make([]unix.RawSockaddrAny, n)
	}
	for i := range hs {
		bufs[i] = slab[i*size : (i+1)*size : (i+1)*size]
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(size)
		hs[i].Hdr.Iov = &iovs[i]
		hs[i].Hdr.SetIovlen(1)
		if names {
			hs[i].Hdr.Name = (*byte)(unsafe.Pointer(&sas[i]))
			hs[i].Hdr.Namelen = unix.SizeofSockaddrAny
		}
	}
	return hs, bufs, sas
}

// mmsg makes the sendmmsg or recvmmsg system call trap on fd with hs,
// again if a signal interrupts it.
func mmsg(trap, fd uintptr, hs []mmsghdr) (int, unix.Errno) {
	for {
		n, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), 0, 0, 0)
		runtime.KeepAlive(hs)
		if e == unix.EINTR || e == errRestartSys {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

// sendmmsg sends hs on rc's socket (connected: no addresses) with one
// sendmmsg call if it can, and returns how many of them went, at least
// one: fewer if the socket's buffer filled up (send the rest again).
// When the socket's buffer is full it waits till there is room; when the
// device's queue is (ENOBUFS) it backs off a little and tries again.
func sendmmsg(rc syscall.RawConn, hs []mmsghdr) (int, error) {
	for try := 0; ; try++ {
		var n int
		var errno unix.Errno
		if err := rc.Write(func(fd uintptr) bool {
			n, errno = mmsg(unix.SYS_SENDMMSG, fd, hs)
			return errno != unix.EAGAIN
		}); err != nil {
			return 0, err
		}
		switch {
		case errno == unix.ENOBUFS || errno == 0 && n == 0:
			backoff(try)
		case errno != 0:
			return 0, os.NewSyscallError("sendmmsg", errno)
		default:
			return n, nil
		}
	}
}

// recvmmsg receives into hs on rc's socket with one recvmmsg call: on a
// non-blocking socket (a net.UDPConn's) what there is, up to len(hs),
// waiting for one (till the read deadline) if there is none; on a
// blocking one, len(hs) of them.
func recvmmsg(rc syscall.RawConn, hs []mmsghdr) (int, error) {
	var n int
	var errno unix.Errno
	if err := rc.Read(func(fd uintptr) bool {
		n, errno = mmsg(unix.SYS_RECVMMSG, fd, hs)
		return errno != unix.EAGAIN
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, os.NewSyscallError("recvmmsg", errno)
	}
	return n, nil
}

// backoff waits a little before the try'th retry of a send the device
// had no room for: a yield first, then some microseconds.
func backoff(try int) {
	if try < 8 {
		runtime.Gosched()
		return
	}
	time.Sleep(time.Duration(min(try, 100)) * time.Microsecond)
}

// udpSender sends the first k of its datagrams with sendmmsg, batch a
// call; a batch of 1 is a plain write a datagram.
type udpSender struct {
	c    *net.UDPConn
	rc   syscall.RawConn
	hs   []mmsghdr
	bufs [][]byte
}

func newUDPSender(c *net.UDPConn, batch, size int) (*udpSender, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &udpSender{c: c, rc: rc}
	s.hs, s.bufs, _ = newMmsgs(batch, size, false)
	return s, nil
}

func (s *udpSender) send(k int) error {
	if len(s.hs) == 1 {
		for try := 0; ; try++ {
			_, err := s.c.Write(s.bufs[0])
			if !errors.Is(err, unix.ENOBUFS) {
				return err
			}
			backoff(try)
		}
	}
	for off := 0; off < k; {
		n, err := sendmmsg(s.rc, s.hs[off:k])
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
	hs    []mmsghdr
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
	r.hs, r.bufs, r.names = newMmsgs(batch, 65536, true)
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
	return recvmmsg(r.rc, r.hs)
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
