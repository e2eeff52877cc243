package vhca

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// mcastSwitch joins native IB devices (port 1 each) as a switch does: a
// packet to a device's LID goes to that device; a packet to a multicast
// LID goes to every device its MFT entry names but the one it came from,
// since a switch never sends a packet back out of its input port. Time
// stands still: UD has no timers.
type mcastSwitch struct {
	devs []*Device
	mft  map[uint16][]int // device indices by MLID
	buf  []byte
	// got counts the frames each device was handed.
	got []int
}

func newMcastSwitch(devs ...*Device) *mcastSwitch {
	return &mcastSwitch{devs: devs, mft: map[uint16][]int{}, buf: make([]byte, 16384), got: make([]int, len(devs))}
}

// run moves frames until no device has any to send.
func (s *mcastSwitch) run() {
	type frame struct {
		to int
		b  []byte
	}
	for {
		var queue []frame
		for i, d := range s.devs {
			for n, _ := d.Transmit(1, s.buf); n != 0; n, _ = d.Transmit(1, s.buf) {
				dlid := wire.LRH(s.buf).DLID()
				if !isMulticastLID(dlid) {
					for k, e := range s.devs {
						if e.Ports[0].LID == dlid {
							queue = append(queue, frame{k, bytes.Clone(s.buf[:n])})
						}
					}
					continue
				}
				for _, k := range s.mft[dlid] {
					if k != i {
						queue = append(queue, frame{k, bytes.Clone(s.buf[:n])})
					}
				}
			}
		}
		if len(queue) == 0 {
			return
		}
		for _, f := range queue {
			s.got[f.to]++
			s.devs[f.to].Receive(1, 1, f.b)
		}
	}
}

// mgid is a multicast GID of the IPoIB form (ff12:401b::/32), group n.
func mgid(n byte) wire.GID {
	return wire.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, n}
}

func attach(t testing.TB, e *endpoint, gid wire.GID, lid uint16) {
	t.Helper()
	if err := e.d.AttachMcast(e.qp, gid, lid); err != nil {
		t.Fatalf("AttachMcast: %v", err)
	}
}

func detach(t testing.TB, e *endpoint, gid wire.GID, lid uint16) {
	t.Helper()
	if err := e.d.DetachMcast(e.qp, gid, lid); err != nil {
		t.Fatalf("DetachMcast: %v", err)
	}
}

// TestUDMulticast: UD datagrams sent to a multicast group through a switch
// that replicates them by its MFT reach every QP attached to the group,
// each exactly once and in order — on the sender's own device too, by the
// port's loopback, since the switch does not send them back — and no
// other QP. Each member's Q_Key is checked on its own; a QP in two
// groups with one MLID gets a datagram once; with a GRH, the DGID names
// the group. Detaching stops the delivery; a member without a receive WQE
// drops the datagram and counts it; a QP still attached cannot be
// destroyed.
func TestUDMulticast(t *testing.T) {
	const (
		mlid = 0xC001
		qkey = 0x1234
		slot = 2048
		n    = 5
	)
	da, db, dc, dd := ibDevice(t, 1, nil), ibDevice(t, 2, nil), ibDevice(t, 3, nil), ibDevice(t, 4, nil)
	sw := newMcastSwitch(da, db, dc, dd)
	sw.mft[mlid] = []int{0, 1, 2} // d's port is no member
	ep := func(d *Device, k byte, qk uint32) *endpoint {
		e := newEndpoint(t, d, QPTypeUD, 64*slot, k)
		udEndpoint(t, e, qk)
		for i := range 64 {
			postRecv(t, e, RecvWR{WRID: uint64(i), SGL: e.sge(uint64(i*slot), slot)})
		}
		return e
	}
	sender, aMember := ep(da, 1, qkey), ep(da, 1, qkey)
	b1, b2, bQKey, bNone := ep(db, 2, qkey), ep(db, 2, qkey), ep(db, 2, qkey+1), ep(db, 2, qkey)
	c1, cOther := ep(dc, 3, qkey), ep(dc, 3, qkey)
	d1 := ep(dd, 4, qkey)
	for _, e := range []*endpoint{aMember, b1, b2, bQKey, c1} {
		attach(t, e, mgid(1), mlid)
	}
	attach(t, b1, mgid(1), mlid) // again: nothing changes (rxe: no error)
	attach(t, c1, mgid(2), mlid) // a second group on the same MLID
	attach(t, cOther, mgid(2), mlid)

	// sendN sends k datagrams, message i carrying i as immediate data and
	// 100+i bytes, and runs the fabric.
	next := 0
	sendN := func(ah *AH, k int) {
		for range k {
			i := next
			next++
			size, off := uint32(100+i), i%64*slot
			for j := range size {
				sender.mem[off+int(j)] = byte(i*31 + int(j))
			}
			postSend(t, sender, SendWR{WRID: uint64(i), Opcode: WRSendWithImm, Imm: uint32(i), Flags: SendSignaled,
				SGL: sender.sge(uint64(off), size), AH: ah, RemoteQPN: mcastQPN, RemoteQKey: qkey})
		}
		sw.run()
		for _, wc := range drain(sender.scq) {
			if wc.Status != WCSuccess {
				t.Fatalf("send completion %+v", wc)
			}
		}
	}
	// expect checks that e received exactly the datagrams first..last-1,
	// in order, each in its own receive WQE.
	expect := func(name string, e *endpoint, first, last int, grh bool) {
		t.Helper()
		rc := drain(e.rcq)
		if len(rc) != last-first {
			t.Fatalf("%s: %d receive completions, want %d: %+v", name, len(rc), last-first, rc)
		}
		for k, wc := range rc {
			i := first + k
			size := uint32(100 + i)
			if wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.Imm != uint32(i) || wc.Flags&WCWithImm == 0 ||
				wc.SrcQP != sender.qp.Num || wc.QPNum != e.qp.Num || wc.ByteLen != grhAreaLen+size ||
				wc.SLID != da.Ports[0].LID || (wc.Flags&WCWithGRH != 0) != grh {
				t.Fatalf("%s: completion %d: %+v, want datagram %d", name, k, wc, i)
			}
			buf := e.mem[wc.WRID*slot:]
			if off := i % 64 * slot; !bytes.Equal(buf[grhAreaLen:grhAreaLen+size], sender.mem[off:off+int(size)]) {
				t.Fatalf("%s: datagram %d: wrong content", name, i)
			}
			if grh && wire.GRH(buf[:grhAreaLen]).DGID() != mgid(1) {
				t.Fatalf("%s: datagram %d: GRH area's DGID %x, want the group's", name, i, wire.GRH(buf[:grhAreaLen]).DGID())
			}
		}
	}
	none := func(name string, es ...*endpoint) {
		t.Helper()
		for _, e := range es {
			if rc := drain(e.rcq); len(rc) != 0 {
				t.Fatalf("%s: QP %d received %d datagrams: %+v", name, e.qp.Num, len(rc), rc)
			}
		}
	}

	// By MLID alone (no GRH): the members of both groups on the MLID.
	ah, err := da.CreateAH(sender.pd, AV{Port: 1, DLID: mlid, SL: 2})
	if err != nil {
		t.Fatal(err)
	}
	sendN(ah, n)
	for name, e := range map[string]*endpoint{"a's member": aMember, "b1": b1, "b2": b2, "c1": c1, "c's group 2 member": cOther} {
		expect(name, e, 0, n, false)
	}
	none("not attached", sender, bNone, d1)
	none("other Q_Key", bQKey)
	if got := db.Ports[0].Counters.RcvQKeyDrops; got != n {
		t.Errorf("b: RcvQKeyDrops %d, want %d", got, n)
	}
	if sw.got[0] != 0 || sw.got[3] != 0 || sw.got[1] != n || sw.got[2] != n {
		t.Errorf("frames handed to a, b, c, d: %v, want [0 %d %d 0]", sw.got, n, n)
	}
	if got := dd.Ports[0].Counters.RcvPackets; got != 0 {
		t.Errorf("d, no member: %d packets received", got)
	}

	// With a GRH, the DGID names the group: group 2's member hears
	// nothing of group 1.
	gah, err := da.CreateAH(sender.pd, AV{Port: 1, DLID: mlid, IsGlobal: true, GRH: GlobalRoute{DGID: mgid(1), HopLimit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	sendN(gah, n)
	for name, e := range map[string]*endpoint{"a's member": aMember, "b1": b1, "b2": b2, "c1": c1} {
		expect(name, e, n, 2*n, true)
	}
	none("group 2 only, GRH to group 1", cOther)
	none("not attached", sender, bNone, d1, bQKey)

	// b's QPs leave the group: b still gets the frames (its port is in
	// the MFT) but has no QP for them.
	noQP := db.Ports[0].Counters.RcvNoQP
	for _, e := range []*endpoint{b1, b2, bQKey} {
		detach(t, e, mgid(1), mlid)
	}
	sendN(ah, 3)
	none("b after detach", b1, b2, bQKey, bNone)
	expect("a's member", aMember, 2*n, 2*n+3, false)
	expect("c1", c1, 2*n, 2*n+3, false)
	expect("c's group 2 member", cOther, 2*n, 2*n+3, false)
	if got := db.Ports[0].Counters.RcvNoQP - noQP; got != 3 {
		t.Errorf("b after detach: RcvNoQP grew by %d, want 3", got)
	}

	// A member without a receive WQE drops the datagram and counts it.
	for range 64 - (2*n + 3) {
		sendN(ah, 1)
		drain(c1.rcq)
	}
	noQP = dc.Ports[0].Counters.RcvNoQP
	sendN(ah, 1)
	none("c1 without receive WQEs", c1)
	if got := dc.Ports[0].Counters.RcvNoQP - noQP; got != 1 {
		t.Errorf("c1 without receive WQEs: RcvNoQP grew by %d, want 1", got)
	}

	// A QP attached cannot be destroyed (as the kernel refuses it);
	// once detached from everything, it can.
	if err := dc.DestroyQP(c1.qp); !errors.Is(err, ErrBusy) {
		t.Fatalf("DestroyQP of an attached QP: %v, want ErrBusy", err)
	}
	dc.DetachAllMcast(c1.qp)
	if err := dc.DetachMcast(c1.qp, mgid(1), mlid); !errors.Is(err, ErrInvalid) {
		t.Errorf("DetachMcast after DetachAllMcast: %v, want ErrInvalid", err)
	}
	if err := dc.DestroyQP(c1.qp); err != nil {
		t.Fatalf("DestroyQP after detaching: %v", err)
	}
	if len(dc.mcast) != 1 || len(dc.mcast[0].qps) != 1 || dc.mcast[0].qps[0] != cOther.qp {
		t.Errorf("c's groups after c1 left: %+v, want group 2 with its other member", dc.mcast)
	}
}

// TestMcastAttachRefused: what ibv_attach_mcast and ibv_detach_mcast
// refuse: a QP not UD, a GID or LID not multicast, a group's MLID
// changed, a detach of a QP not attached; a RoCE port does not do
// multicast (EOPNOTSUPP).
func TestMcastAttachRefused(t *testing.T) {
	d := ibDevice(t, 1, nil)
	ud, rc := newEndpoint(t, d, QPTypeUD, 4096, 1), newEndpoint(t, d, QPTypeRC, 4096, 1)
	for _, c := range []struct {
		name string
		qp   *QP
		gid  wire.GID
		lid  uint16
		want error
	}{
		{"RC QP", rc.qp, mgid(1), 0xC001, ErrInvalid},
		{"unicast GID", ud.qp, ibGID(7), 0xC001, ErrInvalid},
		{"unicast LID", ud.qp, mgid(1), 0x11, ErrInvalid},
		{"permissive LID", ud.qp, mgid(1), 0xFFFF, ErrInvalid},
		{"no QP", &QP{Num: 99}, mgid(1), 0xC001, ErrNoSuchObject},
	} {
		if err := d.AttachMcast(c.qp, c.gid, c.lid); !errors.Is(err, c.want) {
			t.Errorf("%s: AttachMcast: %v, want %v", c.name, err, c.want)
		}
	}
	if len(d.mcast) != 0 {
		t.Fatalf("groups after refused attaches: %+v", d.mcast)
	}
	if err := d.DetachMcast(ud.qp, mgid(1), 0xC001); !errors.Is(err, ErrInvalid) {
		t.Errorf("DetachMcast of a QP not attached: %v, want ErrInvalid", err)
	}
	attach(t, ud, mgid(1), 0xC001)
	if err := d.AttachMcast(ud.qp, mgid(1), 0xC002); !errors.Is(err, ErrInvalid) {
		t.Errorf("AttachMcast to a group with another MLID: %v, want ErrInvalid", err)
	}
	if err := d.DetachMcast(ud.qp, mgid(1), 0xC002); !errors.Is(err, ErrInvalid) {
		t.Errorf("DetachMcast with another MLID: %v, want ErrInvalid", err)
	}
	detach(t, ud, mgid(1), 0xC001)
	if len(d.mcast) != 0 || ud.qp.mcastGroups != 0 {
		t.Fatalf("groups after the last member left: %+v (QP in %d)", d.mcast, ud.qp.mcastGroups)
	}

	e := testDevice(t, 2) // RoCEv2
	roce := newEndpoint(t, e, QPTypeUD, 4096, 2)
	if err := e.AttachMcast(roce.qp, mgid(1), 0xC001); !errors.Is(err, ErrNotSupported) {
		t.Errorf("AttachMcast on a RoCE port: %v, want ErrNotSupported", err)
	}
}

// TestMcastNoAllocation: receiving a multicast datagram for several
// attached QPs, and sending one to a group with a member on the sending
// port (the loopback), allocate nothing.
func TestMcastNoAllocation(t *testing.T) {
	const mlid, qkey = 0xC00A, 7
	da, db := ibDevice(t, 1, nil), ibDevice(t, 2, nil)
	sender, local := newEndpoint(t, da, QPTypeUD, 1<<16, 1), newEndpoint(t, da, QPTypeUD, 1<<16, 1)
	var members []*endpoint
	for range 3 {
		members = append(members, newEndpoint(t, db, QPTypeUD, 1<<16, 2))
	}
	for _, e := range append([]*endpoint{sender, local}, members...) {
		udEndpoint(t, e, qkey)
		for range 400 {
			postRecv(t, e, RecvWR{SGL: e.sge(0, 1024)})
		}
	}
	attach(t, local, mgid(9), mlid)
	for _, e := range members {
		attach(t, e, mgid(9), mlid)
	}
	ah, err := da.CreateAH(sender.pd, AV{Port: 1, DLID: mlid})
	if err != nil {
		t.Fatal(err)
	}
	wrs := []SendWR{{Opcode: WRSend, SGL: sender.sge(0, 256), AH: ah, RemoteQPN: mcastQPN, RemoteQKey: qkey}}
	buf := make([]byte, 8192)
	var frame []byte
	send := func() {
		if _, err := da.PostSend(sender.qp, wrs); err != nil {
			t.Fatal(err)
		}
		n, _ := da.Transmit(1, buf)
		if n == 0 {
			t.Fatal("nothing sent")
		}
		frame = buf[:n]
	}
	if a := testing.AllocsPerRun(100, send); a != 0 {
		t.Errorf("sending to a group with a local member: %.1f allocations per datagram", a)
	}
	if got := local.rcq.Len(); got != 101 {
		t.Fatalf("the local member received %d datagrams, want 101", got)
	}
	if a := testing.AllocsPerRun(100, func() { db.Receive(1, 1, frame) }); a != 0 {
		t.Errorf("receiving for %d members: %.1f allocations per datagram", len(members), a)
	}
	for i, e := range members {
		if got := e.rcq.Len(); got != 101 {
			t.Errorf("member %d: %d datagrams, want 101", i, got)
		}
	}
}
