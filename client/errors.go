package client

import (
	"errors"
	"fmt"
	"syscall"
)

// Error is a verb verbsd (or this library) refused: which verb, the errno
// libibverbs would give, and what was wrong. errors.Is(err, syscall.EINVAL)
// and the like work on it.
type Error struct {
	Op    string
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("softib: %s: %s (%s)", e.Op, e.Msg, errnoName(e.Errno))
}

func (e *Error) Unwrap() error { return e.Errno }

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.ENOMEM:
		return "ENOMEM"
	case syscall.EBUSY:
		return "EBUSY"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPROTO:
		return "EPROTO"
	case syscall.ENODEV:
		return "ENODEV"
	case syscall.ESHUTDOWN:
		return "ESHUTDOWN"
	case syscall.EHOSTUNREACH:
		return "EHOSTUNREACH"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	}
	return fmt.Sprintf("errno %d", int(e))
}

// Errors of the fast path, which never asks verbsd.
var (
	// ErrQueueFull: the work queue has no free entry (ENOMEM, as
	// ibv_post_send gives).
	ErrQueueFull = &Error{Op: "post", Errno: syscall.ENOMEM, Msg: "work queue full"}
	// ErrDeviceFatal: verbsd shut down or the connection to it broke;
	// nothing of the context works any more.
	ErrDeviceFatal = &Error{Op: "device", Errno: syscall.ESHUTDOWN, Msg: "device fatal: verbsd is gone"}
	// ErrRingCorrupt: a ring shared with verbsd holds impossible indices.
	ErrRingCorrupt = &Error{Op: "ring", Errno: syscall.EIO, Msg: "ring indices corrupted"}
)

// ErrNotRegistrable says RegMR was given memory that does not come from
// the context's allocator (Context.Alloc): only that memory can be shared
// with verbsd.
var ErrNotRegistrable = errors.New("softib: RegMR: memory not from Context.Alloc (only memfd buffers can be registered)")

func invalid(op, format string, args ...any) error {
	return &Error{Op: op, Errno: syscall.EINVAL, Msg: fmt.Sprintf(format, args...)}
}
