package verbsd

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Shared memory: the rings verbsd makes, and the client memory it maps
// for memory regions. Both are memfds. A memfd its owner can shrink would
// let a client turn verbsd's next copy into a SIGBUS, so verbsd maps only
// memfds sealed against shrinking (F_SEAL_SHRINK), and seals its own.

var pageSize = unix.Getpagesize()

// mapping is a region of a memfd mapped into verbsd.
type mapping struct {
	whole []byte // the mapping, page aligned
	b     []byte // the part asked for
}

func (m *mapping) Bytes() []byte { return m.b }

// Release unmaps the region (vhca.Memory: the device is done with it).
func (m *mapping) Release() {
	if m.whole != nil {
		unix.Munmap(m.whole)
		m.whole, m.b = nil, nil
	}
}

// errNotRegistrable says the memory handed to RegMR is not a buffer of
// the client's allocator.
var errNotRegistrable = errors.New("not a registrable buffer: memory regions must come from the client's memfd allocator (a memfd sealed with F_SEAL_SHRINK)")

// mapClientMemory maps [off, off+n) of a client's memfd, checking that
// the fd is a memfd that cannot shrink and holds the range.
func mapClientMemory(fd int, off, n uint64) (*mapping, error) {
	if n == 0 {
		return nil, fmt.Errorf("memory region of 0 bytes")
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, errNotRegistrable
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if off+n < off || off+n > uint64(st.Size) {
		return nil, fmt.Errorf("memory region [%d, %d) beyond the %d-byte memfd", off, off+n, st.Size)
	}
	start := off &^ uint64(pageSize-1)
	length := off + n - start
	if length > 1<<46 {
		return nil, fmt.Errorf("memory region of %d bytes", n)
	}
	b, err := unix.Mmap(fd, int64(start), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the memory region: %w", err)
	}
	return &mapping{whole: b, b: b[off-start:]}, nil
}

// newSharedMemory makes a sealed memfd of n bytes and maps it; the caller
// hands the fd to the client and closes it.
func newSharedMemory(name string, n int) (*mapping, int, error) {
	n = (n + pageSize - 1) &^ (pageSize - 1)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, err
	}
	fail := func(err error) (*mapping, int, error) {
		unix.Close(fd)
		return nil, -1, err
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return fail(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail(err)
	}
	b, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	return &mapping{whole: b, b: b}, fd, nil
}
