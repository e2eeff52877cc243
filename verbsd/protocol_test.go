package verbsd_test

// Protocol abuse on the control socket: every malformed message is
// refused with the errno and a text saying what was wrong (or, when the
// message cannot even be framed, the connection is closed), descriptors
// a refused message carried are closed, and verbsd keeps serving.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/abi"
	"golang.org/x/sys/unix"
)

// bodies is the request body of every verb (nil: the verb takes none).
var bodies = map[abi.Op]any{
	abi.OpListDevices:        nil,
	abi.OpOpenDevice:         abi.OpenDevice{},
	abi.OpQueryDevice:        nil,
	abi.OpQueryPort:          abi.PortQuery{},
	abi.OpQueryGID:           abi.PortQuery{},
	abi.OpQueryPKey:          abi.PortQuery{},
	abi.OpAllocPD:            nil,
	abi.OpDeallocPD:          abi.Handle{},
	abi.OpRegMR:              abi.RegMR{},
	abi.OpDeregMR:            abi.Handle{},
	abi.OpCreateCompChannel:  nil,
	abi.OpDestroyCompChannel: abi.Handle{},
	abi.OpCreateCQ:           abi.CreateCQ{},
	abi.OpDestroyCQ:          abi.Handle{},
	abi.OpCreateSRQ:          abi.CreateSRQ{},
	abi.OpModifySRQ:          abi.ModifySRQ{},
	abi.OpQuerySRQ:           abi.Handle{},
	abi.OpDestroySRQ:         abi.Handle{},
	abi.OpCreateQP:           abi.CreateQP{},
	abi.OpModifyQP:           abi.ModifyQP{},
	abi.OpQueryQP:            abi.Handle{},
	abi.OpDestroyQP:          abi.Handle{},
	abi.OpCreateAH:           abi.CreateAH{},
	abi.OpDestroyAH:          abi.Handle{},
	abi.OpQueryCounters:      abi.PortQuery{},
	abi.OpAddAddr:            abi.Addr{},
	abi.OpDelAddr:            abi.Addr{},
	abi.OpAttachMcast:        abi.Mcast{},
	abi.OpDetachMcast:        abi.Mcast{},
}

func bodySize(op abi.Op) int {
	if b := bodies[op]; b != nil {
		return binary.Size(b)
	}
	return 0
}

func TestProtocolAbuse(t *testing.T) {
	_, sock := startServer(t, verbsd.Config{})
	base := currentLevels(t)
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}

	t.Run("wrong-version-hello", func(t *testing.T) {
		for _, v := range []uint16{0, abi.Version + 1, 0xFFFF} {
			r := dialRaw(t, sock)
			r.sendRaw(abi.Header{Version: v, Op: abi.OpHello, Seq: 7}, nil)
			h, body, fds, err := r.recv()
			closeFDs(fds)
			if err != nil {
				t.Fatalf("version %d: no reply: %v", v, err)
			}
			msg := string(body)
			if unix.Errno(h.Status) != unix.EPROTO || h.Seq != 7 {
				t.Fatalf("version %d: status %v seq %d (%q), want EPROTO to 7", v, unix.Errno(h.Status), h.Seq, msg)
			}
			if !strings.Contains(msg, fmt.Sprint("version ", v)) || !strings.Contains(msg, fmt.Sprint("version ", abi.Version)) {
				t.Fatalf("version %d: %q does not name both versions", v, msg)
			}
			if len(fds) != 0 {
				t.Fatalf("version %d: refused Hello carried %d descriptors", v, len(fds))
			}
			r.closed("after a refused Hello")
		}
	})
	t.Run("first-not-hello", func(t *testing.T) {
		for _, op := range []abi.Op{abi.OpOpenDevice, abi.OpAllocPD, abi.OpEvent, 0, 999} {
			r := dialRaw(t, sock)
			r.sendRaw(abi.Header{Version: abi.Version, Op: op, Seq: 3}, garbage(bodySize(op)))
			h, body, _, err := r.recv()
			if err != nil {
				t.Fatalf("%v first: no reply: %v", op, err)
			}
			if unix.Errno(h.Status) != unix.EPROTO || !strings.Contains(string(body), "Hello") {
				t.Fatalf("%v first: status %v (%q), want EPROTO naming Hello", op, unix.Errno(h.Status), body)
			}
			r.closed("after a first message that is not Hello")
		}
	})
	t.Run("descriptors-with-hello", func(t *testing.T) {
		p := newPipeProbe(t)
		fds := p.fds(t, 2)
		r := dialRaw(t, sock)
		r.sendRaw(abi.Header{Version: abi.Version, Op: abi.OpHello, Seq: 1}, nil, fds...)
		h, _, rfds, err := r.recv()
		closeFDs(rfds)
		if err != nil || h.Status != 0 {
			t.Fatalf("Hello with descriptors: %v %v", err, unix.Errno(h.Status))
		}
		p.released(t, fds, "Hello")
	})

	// On one connection: every verb with bodies of the wrong length, of
	// the right length with nonsense in them, handles that name
	// nothing, unknown operations and later messages of another ABI
	// version; verbsd answers each and keeps the connection.
	r := dialRaw(t, sock)
	r.hello("")
	t.Run("open-device", func(t *testing.T) {
		r := r.on(t)
		r.refused(unix.EINVAL, abi.OpAllocPD, nil, nil, "before OpenDevice")
		r.refused(unix.EINVAL, abi.OpOpenDevice, garbage(10), nil, "body of 10 bytes")
		r.refused(unix.ENODEV, abi.OpOpenDevice, abi.OpenDevice{Name: abi.SetName("vhca9")}, nil, "vhca9")
		var or abi.OpenDeviceReply
		r.ok(abi.OpOpenDevice, abi.OpenDevice{Name: abi.SetName("vhca0")}, &or)
		r.refused(unix.EBUSY, abi.OpOpenDevice, abi.OpenDevice{Name: abi.SetName("vhca1")}, nil, "one device")
	})
	t.Run("wrong-length-bodies", func(t *testing.T) {
		r := r.on(t)
		for op := range bodies {
			want := bodySize(op)
			for _, n := range []int{0, 1, want - 1, want + 1, want + 8, abi.MaxMsg - abi.HeaderSize} {
				if n == want || n < 0 {
					continue
				}
				var fds []int
				if op == abi.OpRegMR || op == abi.OpCreateCompChannel {
					fds = []int{newEventfd(t)} // the descriptor they take: only the body is wrong
				}
				r.refused(unix.EINVAL, op, garbage(n), fds, fmt.Sprint(n))
				closeFDs(fds)
			}
		}
	})
	t.Run("handles-of-nothing", func(t *testing.T) {
		r := r.on(t)
		var pd abi.Handle
		r.ok(abi.OpAllocPD, nil, &pd)
		var cq abi.CreateCQReply
		closeFDs(r.ok(abi.OpCreateCQ, abi.CreateCQ{CQE: 4}, &cq))
		for _, h := range []uint32{0, 1000, 0xFFFFFFFF} {
			r.refused(unix.EINVAL, abi.OpDeallocPD, abi.Handle{Handle: h}, nil, "no PD")
			r.refused(unix.EINVAL, abi.OpDeregMR, abi.Handle{Handle: h}, nil, "no MR")
			r.refused(unix.EINVAL, abi.OpDestroyCompChannel, abi.Handle{Handle: h}, nil, "no completion channel")
			r.refused(unix.EINVAL, abi.OpDestroyCQ, abi.Handle{Handle: h}, nil, "no CQ")
			r.refused(unix.EINVAL, abi.OpModifySRQ, abi.ModifySRQ{Handle: h}, nil, "no SRQ")
			r.refused(unix.EINVAL, abi.OpQuerySRQ, abi.Handle{Handle: h}, nil, "no SRQ")
			r.refused(unix.EINVAL, abi.OpDestroySRQ, abi.Handle{Handle: h}, nil, "no SRQ")
			r.refused(unix.EINVAL, abi.OpModifyQP, abi.ModifyQP{Handle: h}, nil, "no QP")
			r.refused(unix.EINVAL, abi.OpQueryQP, abi.Handle{Handle: h}, nil, "no QP")
			r.refused(unix.EINVAL, abi.OpDestroyQP, abi.Handle{Handle: h}, nil, "no QP")
			r.refused(unix.EINVAL, abi.OpAttachMcast, abi.Mcast{QP: h, LID: 0xC001, GID: [16]byte{0xff}}, nil, "no QP")
			r.refused(unix.EINVAL, abi.OpDetachMcast, abi.Mcast{QP: h, LID: 0xC001, GID: [16]byte{0xff}}, nil, "no QP")
			r.refused(unix.EINVAL, abi.OpDestroyAH, abi.Handle{Handle: h}, nil, "no AH")
			r.refused(unix.EINVAL, abi.OpCreateAH, abi.CreateAH{PD: h}, nil, "no PD")
			r.refused(unix.EINVAL, abi.OpCreateSRQ, abi.CreateSRQ{PD: h, MaxWR: 4, MaxSGE: 1}, nil, "no PD")
			if h != 0 { // 0: no channel
				r.refused(unix.EINVAL, abi.OpCreateCQ, abi.CreateCQ{CQE: 4, Channel: h}, nil, "no completion channel")
			}
			mfd := newMemfd(t, 4096)
			r.refused(unix.EINVAL, abi.OpRegMR, abi.RegMR{PD: h, Length: 4096}, []int{mfd}, "no PD")
			unix.Close(mfd)
			qp := abi.CreateQP{PD: h, SendCQ: cq.Handle, RecvCQ: cq.Handle, Type: 2, Cap: abi.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
			r.refused(unix.EINVAL, abi.OpCreateQP, qp, nil, "no PD")
			qp.PD, qp.SendCQ = pd.Handle, h
			r.refused(unix.EINVAL, abi.OpCreateQP, qp, nil, "CQ")
			qp.SendCQ, qp.RecvCQ = cq.Handle, h
			r.refused(unix.EINVAL, abi.OpCreateQP, qp, nil, "CQ")
			if h != 0 { // 0: no SRQ
				qp.RecvCQ, qp.SRQ = cq.Handle, h
				r.refused(unix.EINVAL, abi.OpCreateQP, qp, nil, "no SRQ")
			}
		}
	})
	t.Run("unknown-ops", func(t *testing.T) {
		r := r.on(t)
		for _, op := range []abi.Op{0, abi.OpDetachMcast + 1, 99, abi.OpEvent, 0x7FFF, 0xFFFF} {
			r.refused(unix.EOPNOTSUPP, op, garbage(8), nil, "unknown operation")
		}
		// A second Hello is no verb either.
		h, b, fds := r.call(abi.OpHello, nil)
		closeFDs(fds)
		if h.Status == 0 {
			t.Fatalf("a second Hello accepted (%q)", b)
		}
	})
	t.Run("descriptors-where-none-go", func(t *testing.T) {
		r := r.on(t)
		p := newPipeProbe(t)
		fds := p.fds(t, 3)
		r.refused(unix.EINVAL, abi.OpAllocPD, nil, fds[:1], "no file descriptor")
		r.refused(unix.EINVAL, abi.OpCreateCompChannel, nil, fds[1:], "one eventfd")
		p.released(t, fds, "verbs that take no descriptor (or one)")
	})
	t.Run("later-message-of-another-version", func(t *testing.T) {
		r := r.on(t)
		p := newPipeProbe(t)
		fds := p.fds(t, 1)
		r.sendRaw(abi.Header{Version: abi.Version + 1, Op: abi.OpRegMR, Seq: 555}, make([]byte, bodySize(abi.OpRegMR)), fds...)
		h, body, rfds, err := r.recv()
		closeFDs(rfds)
		if err != nil {
			t.Fatalf("no reply: %v", err)
		}
		if unix.Errno(h.Status) != unix.EPROTO || h.Seq != 555 || !strings.Contains(string(body), "version") {
			t.Fatalf("status %v seq %d (%q), want EPROTO to 555 naming the version", unix.Errno(h.Status), h.Seq, body)
		}
		p.released(t, fds, "a message of another ABI version")
	})
	t.Run("nonsense-of-the-right-length", func(t *testing.T) {
		// Random bodies of the right size, every field of them
		// nonsense, a few thousand times: verbsd answers every one
		// (most refused, some done: what a client may do).
		r := r.on(t)
		ops := make([]abi.Op, 0, len(bodies))
		for op := range bodies {
			if op != abi.OpOpenDevice {
				ops = append(ops, op)
			}
		}
		for i := range 3000 {
			op := ops[rng.IntN(len(ops))]
			body := garbage(bodySize(op))
			if i%2 == 0 && len(body) >= 4 {
				// Half of them name a handle that may exist.
				binary.NativeEndian.PutUint32(body, uint32(rng.IntN(8)))
			}
			var fds []int
			switch op {
			case abi.OpRegMR:
				fds = []int{newMemfd(t, 1<<16)}
			case abi.OpCreateCompChannel:
				fds = []int{newEventfd(t)}
			}
			h, b, rfds := r.call(op, body, fds...)
			closeFDs(rfds)
			closeFDs(fds)
			if h.Status != 0 && len(b) == 0 {
				t.Fatalf("%s refused (%v) without a message", op, unix.Errno(h.Status))
			}
		}
	})
	t.Run("still-serving", func(t *testing.T) {
		var pd abi.Handle
		r.on(t).ok(abi.OpAllocPD, nil, &pd)
		checkServes(t, sock)
	})
	r.c.Close()

	// Messages that cannot be framed: verbsd closes the connection (it
	// cannot tell what was asked), closes what they carried, and serves
	// the others.
	t.Run("shorter-than-a-header", func(t *testing.T) {
		for _, n := range []int{1, abi.HeaderSize - 1} {
			r := dialRaw(t, sock)
			r.hello("vhca0")
			p := newPipeProbe(t)
			fds := p.fds(t, 1)
			if _, _, err := r.c.Unix().WriteMsgUnix(garbage(n), unix.UnixRights(fds...), nil); err != nil {
				t.Fatal(err)
			}
			r.closed(fmt.Sprintf("a message of %d bytes", n))
			p.released(t, fds, "a message shorter than a header")
		}
	})
	t.Run("longer-than-the-maximum", func(t *testing.T) {
		r := dialRaw(t, sock)
		r.hello("vhca0")
		b, _ := binary.Append(nil, binary.NativeEndian, &abi.Header{Version: abi.Version, Op: abi.OpAllocPD, Seq: 9})
		b = append(b, garbage(abi.MaxMsg)...)
		if _, _, err := r.c.Unix().WriteMsgUnix(b, nil, nil); err != nil {
			t.Skipf("cannot send a message of %d bytes: %v", len(b), err)
		}
		r.closed("a message longer than MaxMsg")
	})
	t.Run("too-many-descriptors", func(t *testing.T) {
		for _, op := range []abi.Op{abi.OpHello, abi.OpAllocPD, abi.OpRegMR} {
			r := dialRaw(t, sock)
			if op != abi.OpHello {
				r.hello("vhca0")
			}
			p := newPipeProbe(t)
			fds := p.fds(t, abi.MaxFDs+3)
			r.sendRaw(abi.Header{Version: abi.Version, Op: op, Seq: 4}, make([]byte, bodySize(op)), fds...)
			r.closed(fmt.Sprintf("%s with %d descriptors", op, len(fds)))
			p.released(t, fds, "a message with too many descriptors")
		}
	})
	t.Run("end", func(t *testing.T) {
		checkServes(t, sock)
	})
	waitLevels(t, base, 5*time.Second)
}

func newEventfd(t testing.TB) int {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// newMemfd is a memfd verbsd will map.
func newMemfd(t testing.TB, size int64) int {
	fd, err := unix.MemfdCreate("robust-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(fd, size)
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	return fd
}
