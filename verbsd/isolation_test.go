package verbsd_test

// Two clients must not see each other's memory: a key of another client
// fails as a local protection error whatever the verb, memory the client
// does not own cannot be registered, and verbsd maps only memfds sealed
// against shrinking, and only the part of them that exists.

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

func TestOtherClientsKeys(t *testing.T) {
	_, sock := startServer(t, verbsd.Config{})
	// A owns the secret; B (on the same device, so in the same key
	// space) and its RC peer C try to get at it with A's L_Key.
	a := newPeer(t, sock, "vhca0", 1<<16)
	secret := bytes.Repeat([]byte("A's secret bytes"), len(a.buf.B)/16)
	copy(a.buf.B, secret)
	foreign := client.SGE{Addr: a.mr.Addr, Length: 4096, LKey: a.mr.LKey}

	pair := func(t *testing.T) (b, c *peer) {
		b = newPeer(t, sock, "vhca0", 1<<16)
		c = newPeer(t, sock, "vhca1", 1<<16)
		connectPair(t, b, c)
		return b, c
	}
	zero := make([]byte, 1<<16)
	untouched := func(t *testing.T, c *peer) {
		t.Helper()
		if !bytes.Equal(a.buf.B, secret) {
			t.Fatal("A's region was written")
		}
		if c != nil && !bytes.Equal(c.buf.B, zero) {
			t.Fatalf("A's bytes reached the peer: %q...", c.buf.B[:32])
		}
	}
	wantLocProt := func(t *testing.T, wc client.WC, wrid uint64) {
		t.Helper()
		if wc.WRID != wrid || wc.Status != vhca.WCLocProtErr {
			t.Fatalf("completion %+v (status %v), want LOC_PROT_ERR for WR %d", wc, wc.Status, wrid)
		}
	}

	t.Run("write-from", func(t *testing.T) {
		b, c := pair(t)
		wr := client.SendWR{WRID: 1, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
			SGL: []client.SGE{foreign}, RemoteAddr: c.mr.Addr, RKey: c.mr.RKey}
		if _, err := b.qp.PostSend([]client.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		wantLocProt(t, waitWC(t, b.cq), 1)
		untouched(t, c)
	})
	t.Run("send-from", func(t *testing.T) {
		b, c := pair(t)
		if _, err := c.qp.PostRecv([]client.RecvWR{{WRID: 9, SGL: []client.SGE{c.mr.SGE()}}}); err != nil {
			t.Fatal(err)
		}
		wr := client.SendWR{WRID: 2, Opcode: vhca.WRSend, Flags: vhca.SendSignaled, SGL: []client.SGE{foreign}}
		if _, err := b.qp.PostSend([]client.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		wantLocProt(t, waitWC(t, b.cq), 2)
		noWC(t, c.cq, 20*time.Millisecond)
		untouched(t, c)
	})
	t.Run("receive-into", func(t *testing.T) {
		b, c := pair(t)
		if _, err := b.qp.PostRecv([]client.RecvWR{{WRID: 3, SGL: []client.SGE{foreign}}}); err != nil {
			t.Fatal(err)
		}
		for i := range 4096 {
			c.buf.B[i] = 0xCC
		}
		wr := client.SendWR{WRID: 4, Opcode: vhca.WRSend, Flags: vhca.SendSignaled,
			SGL: []client.SGE{{Addr: c.mr.Addr, Length: 4096, LKey: c.mr.LKey}}}
		if _, err := c.qp.PostSend([]client.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		wantLocProt(t, waitWC(t, b.cq), 3)
		if wc := waitWC(t, c.cq); wc.Status == vhca.WCSuccess {
			t.Fatalf("the sender's SEND into A's memory succeeded: %+v", wc)
		}
		untouched(t, nil)
	})
	t.Run("read-into", func(t *testing.T) {
		b, c := pair(t)
		for i := range 4096 {
			c.buf.B[i] = 0xCC
		}
		wr := client.SendWR{WRID: 5, Opcode: vhca.WRRDMARead, Flags: vhca.SendSignaled,
			SGL: []client.SGE{foreign}, RemoteAddr: c.mr.Addr, RKey: c.mr.RKey}
		if _, err := b.qp.PostSend([]client.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		wantLocProt(t, waitWC(t, b.cq), 5)
		untouched(t, nil)
	})
	t.Run("own-key-foreign-address", func(t *testing.T) {
		b, c := pair(t)
		wr := client.SendWR{WRID: 6, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
			SGL: []client.SGE{{Addr: a.mr.Addr, Length: 4096, LKey: b.mr.LKey}}, RemoteAddr: c.mr.Addr, RKey: c.mr.RKey}
		if _, err := b.qp.PostSend([]client.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		wantLocProt(t, waitWC(t, b.cq), 6)
		untouched(t, c)
	})
	t.Run("register-foreign-memory", func(t *testing.T) {
		b := newPeer(t, sock, "vhca0", 4096)
		if _, err := b.pd.RegMR(make([]byte, 4096), acc); !errors.Is(err, client.ErrNotRegistrable) {
			t.Fatalf("RegMR of a Go slice: %v, want ErrNotRegistrable", err)
		}
		if _, err := b.pd.RegMR(a.buf.B, acc); !errors.Is(err, client.ErrNotRegistrable) {
			t.Fatalf("RegMR of another context's buffer: %v, want ErrNotRegistrable", err)
		}
	})
	t.Run("foreign-handles", func(t *testing.T) {
		// A's handles are its connection's: another connection naming
		// them names nothing, and A keeps working.
		r := dialRaw(t, sock)
		r.hello("vhca0")
		for h := uint32(0); h < 16; h++ {
			for _, op := range []abi.Op{abi.OpDestroyQP, abi.OpDestroyCQ, abi.OpDeregMR, abi.OpDeallocPD} {
				r.on(t).refused(unix.EINVAL, op, abi.Handle{Handle: h}, nil, "no ", "handle")
			}
		}
		c := newPeer(t, sock, "vhca1", 4096)
		if err := c.connectTo(a.ep, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := a.connectTo(c.ep, 0, 0); err != nil {
			t.Fatal(err)
		}
		wr := client.SendWR{WRID: 7, Opcode: vhca.WRRDMARead, Flags: vhca.SendSignaled,
			SGL: []client.SGE{c.mr.SGE()}, RemoteAddr: a.mr.Addr, RKey: a.mr.RKey}
		if _, err := c.qp.PostSend([]client.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, c.cq); wc.Status != vhca.WCSuccess || !bytes.Equal(c.buf.B, secret[:4096]) {
			t.Fatalf("A's region after another connection's destroys: %v", wc.Status)
		}
	})
}

// TestRegMRChecksTheMemfd sends RegMR requests the client library never
// would: descriptors that are not memfds, memfds that could shrink,
// ranges beyond the memfd.
func TestRegMRChecksTheMemfd(t *testing.T) {
	_, sock := startServer(t, verbsd.Config{})
	base := currentLevels(t)
	r := dialRaw(t, sock)
	r.hello("vhca0")
	var pd abi.Handle
	r.ok(abi.OpAllocPD, nil, &pd)
	reg := func(off, n uint64) abi.RegMR {
		return abi.RegMR{PD: pd.Handle, Access: uint32(vhca.AccessLocalWrite), Offset: off, Length: n, IOVA: 0x10000}
	}
	memfd := func(t *testing.T, size int64, flags int, seals int) int {
		t.Helper()
		fd, err := unix.MemfdCreate("robust-test", unix.MFD_CLOEXEC|flags)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Ftruncate(fd, size); err != nil {
			t.Fatal(err)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	}
	sealed := func(t *testing.T, size int64) int {
		return memfd(t, size, unix.MFD_ALLOW_SEALING, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	}

	t.Run("pipe", func(t *testing.T) {
		p := newPipeProbe(t)
		fds := p.fds(t, 1)
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), fds, "memfd", "F_SEAL_SHRINK")
		p.released(t, fds, "RegMR of a pipe")
	})
	t.Run("dev-zero", func(t *testing.T) {
		f, err := os.OpenFile("/dev/zero", os.O_RDWR, 0)
		if err != nil {
			t.Skip(err)
		}
		defer f.Close()
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), []int{int(f.Fd())}, "memfd")
	})
	t.Run("unsealed", func(t *testing.T) {
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), []int{memfd(t, 8192, unix.MFD_ALLOW_SEALING, 0)}, "F_SEAL_SHRINK")
	})
	t.Run("not-sealable", func(t *testing.T) {
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), []int{memfd(t, 8192, 0, 0)}, "F_SEAL_SHRINK")
	})
	t.Run("sealed-against-growing-only", func(t *testing.T) {
		fd := memfd(t, 8192, unix.MFD_ALLOW_SEALING, unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), []int{fd}, "F_SEAL_SHRINK")
	})
	t.Run("beyond-the-end", func(t *testing.T) {
		fd := sealed(t, 8192)
		for _, c := range []struct{ off, n uint64 }{
			{0, 8193}, {4096, 4097}, {8192, 1}, {1 << 40, 4096}, {^uint64(0) - 4095, 8192},
		} {
			r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(c.off, c.n), []int{fd}, "beyond")
		}
		// A length no client may map fails on its limit first.
		r.on(t).refused(unix.ENOMEM, abi.OpRegMR, reg(4096, ^uint64(0)), []int{fd}, "limit")
	})
	t.Run("empty", func(t *testing.T) {
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 0), []int{sealed(t, 4096)}, "0 bytes")
	})
	t.Run("sealed-against-writing", func(t *testing.T) {
		fd := memfd(t, 8192, unix.MFD_ALLOW_SEALING, unix.F_SEAL_SHRINK|unix.F_SEAL_WRITE)
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), []int{fd}, "mapping")
	})
	t.Run("two-memfds", func(t *testing.T) {
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), []int{sealed(t, 4096), sealed(t, 4096)}, "one memfd")
	})
	t.Run("none", func(t *testing.T) {
		r.on(t).refused(unix.EINVAL, abi.OpRegMR, reg(0, 4096), nil, "one memfd")
	})
	t.Run("good", func(t *testing.T) {
		// The same path with a proper memfd works: what the cases
		// above refuse is the memory, not the request.
		var mr abi.RegMRReply
		r.on(t).ok(abi.OpRegMR, reg(4096, 4096), &mr, sealed(t, 8192))
		r.on(t).ok(abi.OpDeregMR, abi.Handle{Handle: mr.Handle}, nil)
	})
	r.c.Close()
	waitLevels(t, base, 5*time.Second)
}
