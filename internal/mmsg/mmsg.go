// Package mmsg is sendmmsg(2) and recvmmsg(2) on a Go socket: many
// datagrams a system call (a system call costs about a microsecond on
// these machines, DESIGN.md), through the socket's RawConn so that Go's
// poller waits when the socket has nothing to give or no room.
package mmsg

import (
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Hdr is struct mmsghdr { struct msghdr msg_hdr; unsigned int msg_len; }
// with its padding (to 64 bytes on amd64 and arm64); x/sys/unix has the
// type, laid out for each architecture, but no sendmmsg or recvmmsg.
type Hdr = unix.Mmsghdr

// errRestartSys is ERESTARTSYS, which recvmmsg sometimes leaks to user
// space when a signal (Go's preemption) interrupts it: try again.
const errRestartSys = unix.Errno(512)

// New returns n headers, each with one buffer of size bytes (its iovec),
// and with a sockaddr to fill if names.
func New(n, size int, names bool) ([]Hdr, [][]byte, []unix.RawSockaddrAny) {
	hs := make([]Hdr, n)
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

// call makes the sendmmsg or recvmmsg system call trap on fd with hs,
// again if a signal interrupts it.
func call(trap, fd uintptr, hs []Hdr) (int, unix.Errno) {
	return callFlags(trap, fd, hs, 0)
}

func callFlags(trap, fd uintptr, hs []Hdr, flags int) (int, unix.Errno) {
	for {
		n, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), uintptr(flags), 0, 0)
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

// Send sends hs on rc's socket (connected: no addresses) with one
// sendmmsg call if it can, and returns how many of them went, at least
// one: fewer if the socket's buffer filled up (send the rest again).
// When the socket's buffer is full it waits till there is room; when the
// device's queue is (ENOBUFS) it backs off a little and tries again.
func Send(rc syscall.RawConn, hs []Hdr) (int, error) {
	for try := 0; ; try++ {
		var n int
		var errno unix.Errno
		if err := rc.Write(func(fd uintptr) bool {
			n, errno = call(unix.SYS_SENDMMSG, fd, hs)
			return errno != unix.EAGAIN
		}); err != nil {
			return 0, err
		}
		switch {
		case errno == unix.ENOBUFS || errno == 0 && n == 0:
			Backoff(try)
		case errno != 0:
			return 0, os.NewSyscallError("sendmmsg", errno)
		default:
			return n, nil
		}
	}
}

// SendNow is Send that never waits: it returns what went, and EAGAIN (as
// the error's errno) if the socket had no room for the first.
func SendNow(fd uintptr, hs []Hdr) (int, unix.Errno) {
	return callFlags(unix.SYS_SENDMMSG, fd, hs, unix.MSG_DONTWAIT)
}

// Recv receives into hs on rc's socket with one recvmmsg call: on a
// non-blocking socket (a net.UDPConn's) what there is, up to len(hs),
// waiting for one (till the read deadline) if there is none; on a
// blocking one, len(hs) of them.
func Recv(rc syscall.RawConn, hs []Hdr) (int, error) {
	var n int
	var errno unix.Errno
	if err := rc.Read(func(fd uintptr) bool {
		n, errno = call(unix.SYS_RECVMMSG, fd, hs)
		return errno != unix.EAGAIN
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, os.NewSyscallError("recvmmsg", errno)
	}
	return n, nil
}

// Backoff waits a little before the try'th retry of a send the device
// had no room for: a yield first, then some microseconds.
func Backoff(try int) {
	if try < 8 {
		runtime.Gosched()
		return
	}
	time.Sleep(time.Duration(min(try, 100)) * time.Microsecond)
}

// RecvNow is one recvmmsg call that never waits: what there is, up to
// len(hs), or EAGAIN.
func RecvNow(fd uintptr, hs []Hdr) (int, unix.Errno) {
	return callFlags(unix.SYS_RECVMMSG, fd, hs, unix.MSG_DONTWAIT)
}
