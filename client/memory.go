package client

import (
	"encoding/binary"
	"syscall"
	"unsafe"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

func binarySize(v any) int { return binary.Size(v) }

// Buffer is registrable memory: a memfd the program and verbsd both map,
// so that the vHCA's DMA is a copy into or out of the same pages. B is
// the memory; register all of it or any part with PD.RegMR.
type Buffer struct {
	B   []byte
	fd  int
	ctx *Context
}

var pageSize = unix.Getpagesize()

// Alloc makes a Buffer of at least n bytes (rounded up to whole pages),
// zeroed. The memfd is sealed against shrinking, as verbsd requires.
func (ctx *Context) Alloc(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, invalid("Alloc", "buffer of %d bytes", n)
	}
	size := (n + pageSize - 1) &^ (pageSize - 1)
	fd, err := unix.MemfdCreate("softib-buffer", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, &Error{Op: "Alloc", Errno: errnoOf(err), Msg: err.Error()}
	}
	fail := func(err error) (*Buffer, error) {
		unix.Close(fd)
		return nil, &Error{Op: "Alloc", Errno: errnoOf(err), Msg: err.Error()}
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail(err)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	buf := &Buffer{B: b[:n], fd: fd, ctx: ctx}
	ctx.objMu.Lock()
	ctx.buffers = append(ctx.buffers, buf)
	ctx.objMu.Unlock()
	return buf, nil
}

// Free unmaps the buffer. Regions registered on it stay valid in verbsd
// (which has its own mapping) until deregistered.
func (b *Buffer) Free() error {
	if b.B == nil {
		return invalid("Free", "buffer already freed") // its fd's number may be another's by now
	}
	ctx := b.ctx
	ctx.objMu.Lock()
	for i, x := range ctx.buffers {
		if x == b {
			ctx.buffers = append(ctx.buffers[:i], ctx.buffers[i+1:]...)
			break
		}
	}
	ctx.objMu.Unlock()
	err := unix.Munmap(b.B[:cap(b.B)])
	unix.Close(b.fd)
	b.B = nil
	return err
}

// find locates the buffer holding all of p, and p's offset in it.
func (ctx *Context) find(p []byte) (*Buffer, uint64, bool) {
	if len(p) == 0 {
		return nil, 0, false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	ctx.objMu.Lock()
	defer ctx.objMu.Unlock()
	for _, b := range ctx.buffers {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(b.B)))
		if start >= base && start+uintptr(len(p)) <= base+uintptr(cap(b.B)) {
			return b, uint64(start - base), true
		}
	}
	return nil, 0, false
}

// PD is a protection domain (ibv_pd).
type PD struct {
	ctx    *Context
	handle uint32
}

// AllocPD makes a protection domain.
func (ctx *Context) AllocPD() (*PD, error) {
	var h abi.Handle
	if _, err := ctx.call(abi.OpAllocPD, nil, &h); err != nil {
		return nil, err
	}
	return &PD{ctx: ctx, handle: h.Handle}, nil
}

// Dealloc frees the PD, which nothing may use any more.
func (pd *PD) Dealloc() error {
	_, err := pd.ctx.call(abi.OpDeallocPD, abi.Handle{Handle: pd.handle}, nil)
	return err
}

// MR is a memory region (ibv_mr). Addr is the address of its first byte
// in this process: the address SGEs and remote addresses use.
type MR struct {
	pd     *PD
	handle uint32
	LKey   uint32
	RKey   uint32
	Addr   uint64
	Buf    []byte
}

// RegMR registers p, which must lie in a Buffer of this context (Alloc).
func (pd *PD) RegMR(p []byte, access vhca.Access) (*MR, error) {
	b, off, ok := pd.ctx.find(p)
	if !ok {
		return nil, ErrNotRegistrable
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))
	var r abi.RegMRReply
	req := abi.RegMR{PD: pd.handle, Access: uint32(access), Offset: off, Length: uint64(len(p)), IOVA: addr}
	if _, err := pd.ctx.call(abi.OpRegMR, req, &r, b.fd); err != nil {
		return nil, err
	}
	return &MR{pd: pd, handle: r.Handle, LKey: r.LKey, RKey: r.RKey, Addr: addr, Buf: p}, nil
}

// Dereg deregisters the region: its keys stop working at once.
func (mr *MR) Dereg() error {
	_, err := mr.pd.ctx.call(abi.OpDeregMR, abi.Handle{Handle: mr.handle}, nil)
	return err
}

// SGE is the whole region as one scatter/gather element.
func (mr *MR) SGE() vhca.SGE {
	return vhca.SGE{Addr: mr.Addr, Length: uint32(len(mr.Buf)), LKey: mr.LKey}
}

// AddrOf is the address of p, a part of the region, as SGEs and remote
// addresses name it.
func (mr *MR) AddrOf(p []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))) }

// AH is an address handle (ibv_ah), for UD sends.
type AH struct {
	pd     *PD
	handle uint32
}

// CreateAH makes an address handle.
func (pd *PD) CreateAH(av vhca.AV) (*AH, error) {
	var h abi.Handle
	if _, err := pd.ctx.call(abi.OpCreateAH, abi.CreateAH{PD: pd.handle, AV: abi.FromAV(&av)}, &h); err != nil {
		return nil, err
	}
	return &AH{pd: pd, handle: h.Handle}, nil
}

// Destroy destroys the address handle.
func (ah *AH) Destroy() error {
	_, err := ah.pd.ctx.call(abi.OpDestroyAH, abi.Handle{Handle: ah.handle}, nil)
	return err
}

func mapShared(fd int, n uint64) ([]byte, error) {
	defer unix.Close(fd)
	if n == 0 || n > 1<<40 {
		return nil, &Error{Op: "map", Errno: syscall.EPROTO, Msg: "ring of impossible size"}
	}
	return unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}
