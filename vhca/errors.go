package vhca

import (
	"errors"
	"fmt"
)

// Errors of the verbs (the errno values libibverbs would give in brackets).
var (
	ErrNoSuchObject  = errors.New("vhca: no such object on this device") // EINVAL
	ErrBusy          = errors.New("vhca: object still in use")           // EBUSY
	ErrInvalid       = errors.New("vhca: invalid argument")              // EINVAL
	ErrQueueFull     = errors.New("vhca: work queue full")               // ENOMEM
	ErrQPState       = errors.New("vhca: QP state does not allow this")  // EINVAL
	ErrKeysExhausted = errors.New("vhca: memory keys exhausted")         // ENOMEM
	ErrNotSupported  = errors.New("vhca: operation not supported")       // EOPNOTSUPP
)

// LimitError says a device limit was reached.
type LimitError struct {
	What string
	Max  int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("vhca: limit of %d %s reached", e.Max, e.What)
}

func errLimit(what string, max int) error { return &LimitError{what, max} }

// notSupported wraps ErrNotSupported with what was asked.
func notSupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNotSupported}, args...)...)
}

// invalid wraps ErrInvalid with what was wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
