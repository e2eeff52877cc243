package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/verbsdtest"
	"github.com/softib/softib/vhca"
)

// UD multicast through the MFT reaches every member and no one else:
//
//	vHCA a (LID 10) ─┐          sends to the group; one of its QPs is a member
//	vHCA b (LID 11) ─┤ s1       two member QPs
//	vHCA c (LID 12) ─┤ MFT 0xC001 → 1,2,3
//	vHCA d (LID 13) ─┘          no member, not in the MFT
//
// s1 replicates each datagram to b's and c's ports, never back out of
// a's, its input port; a's member QP gets it from a's own port, as an
// HCA loops multicast back to its attached QPs.

const (
	testMLID = 0xC001
	testQKey = 0x11111111
	mcSlot   = 1024
)

var testMGID = [16]byte{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: 1}

// mcQP is a UD QP of one vHCA with its CQ and a buffer of receive slots.
type mcQP struct {
	name string
	ctx  *client.Context
	pd   *client.PD
	cq   *client.CQ
	qp   *client.QP
	buf  *client.Buffer
	mr   *client.MR
	got  []client.WC
}

func newMcQP(t *testing.T, ctx *client.Context, name string, recvs int) *mcQP {
	t.Helper()
	q := &mcQP{name: name, ctx: ctx}
	var err error
	if q.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if q.cq, err = ctx.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	if q.buf, err = ctx.Alloc(256 * mcSlot); err != nil {
		t.Fatal(err)
	}
	if q.mr, err = q.pd.RegMR(q.buf.B, vhca.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	q.qp, err = q.pd.CreateQP(client.QPInitAttr{Type: vhca.QPTypeUD, SendCQ: q.cq, RecvCQ: q.cq,
		Cap: client.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.qp.Connect(client.Path{QKey: testQKey}); err != nil {
		t.Fatal(err)
	}
	for i := range recvs {
		if _, err := q.qp.PostRecv([]client.RecvWR{{WRID: uint64(i), SGL: []client.SGE{q.slot(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

func (q *mcQP) slot(i int) client.SGE {
	return client.SGE{Addr: q.mr.Addr + uint64(i%256*mcSlot), Length: mcSlot, LKey: q.mr.LKey}
}

// poll adds what the CQ holds to q.got.
func (q *mcQP) poll(t *testing.T) {
	var wc [32]client.WC
	for {
		n, err := q.cq.Poll(wc[:])
		if err != nil {
			t.Fatalf("%s: Poll: %v", q.name, err)
		}
		q.got = append(q.got, wc[:n]...)
		if n < len(wc) {
			return
		}
	}
}

// mcPayload is datagram i: its number, then bytes that depend on it.
func mcPayload(b []byte, i int) {
	for k := range b {
		b[k] = byte(i*7 + k)
	}
	binary.LittleEndian.PutUint32(b, uint32(i))
}

func mcSize(i int) int { return 64 + i%200 }

func TestUDMulticastFabric(t *testing.T) {
	if os.Getenv("CI") == "" && testing.Short() {
		t.Skip("a fabric of loops: not in -short")
	}
	ad := addrs(t, 8) // cable ends a–s1, b–s1, c–s1, d–s1
	s1 := startSwitch(t, fmt.Sprintf("switch s1 lid=1 ports=4\n"+
		"port 1 local=%s peer=%s\nport 2 local=%s peer=%s\nport 3 local=%s peer=%s\nport 4 local=%s peer=%s\n"+
		"lft 10 1\nlft 11 2\nlft 12 3\nlft 13 4\nmft %#x 1,2,3\n", ad[1], ad[0], ad[3], ad[2], ad[5], ad[4], ad[7], ad[6], testMLID))
	var devs []verbsd.DeviceConfig
	for i, name := range []string{"a", "b", "c", "d"} {
		devs = append(devs, verbsd.DeviceConfig{Name: name,
			Cable: &verbsd.CableConfig{Local: ad[2*i], Peer: ad[2*i+1], LID: uint16(10 + i)}})
	}
	_, sock := verbsdtest.Start(t, verbsd.Config{Devices: devs})
	ctxs := map[string]*client.Context{}
	for _, name := range []string{"a", "b", "c", "d"} {
		ctx, err := client.Open(name, &client.Options{Socket: sock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
		ctxs[name] = ctx
	}
	waitActive(t, s1, ctxs)

	const n, m = 100, 40 // datagrams before and after b's QPs leave
	sender := newMcQP(t, ctxs["a"], "a's sender", 0)
	aMember := newMcQP(t, ctxs["a"], "a's member", n+m)
	b1, b2 := newMcQP(t, ctxs["b"], "b1", n+m), newMcQP(t, ctxs["b"], "b2", n+m)
	c1 := newMcQP(t, ctxs["c"], "c1", n+m)
	d1 := newMcQP(t, ctxs["d"], "d1", n+m)
	for _, q := range []*mcQP{aMember, b1, b2, c1} {
		if err := q.qp.AttachMcast(testMGID, testMLID); err != nil {
			t.Fatalf("%s: AttachMcast: %v", q.name, err)
		}
	}
	ah, err := sender.pd.CreateAH(client.AV{Port: 1, DLID: testMLID})
	if err != nil {
		t.Fatal(err)
	}

	// sendRange sends datagrams first..last-1 to the group and waits for
	// their send completions.
	sendRange := func(first, last int) {
		t.Helper()
		for i := first; i < last; i++ {
			sge := sender.slot(i)
			sge.Length = uint32(mcSize(i))
			mcPayload(sender.buf.B[i%256*mcSlot:][:sge.Length], i)
			if _, err := sender.qp.PostSend([]client.SendWR{{WRID: uint64(i), Opcode: vhca.WRSend, Flags: vhca.SendSignaled,
				SGL: []client.SGE{sge}, AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: testQKey}}); err != nil {
				t.Fatalf("PostSend %d: %v", i, err)
			}
			// A few in flight at a time: the send queue has room
			// for them all, the point is not to race the pollers.
			for i-len(sender.got) >= 32 {
				sender.poll(t)
			}
		}
		for deadline := time.Now().Add(10 * time.Second); len(sender.got) < last && time.Now().Before(deadline); {
			sender.poll(t)
			time.Sleep(100 * time.Microsecond)
		}
		if len(sender.got) != last {
			t.Fatalf("%d of %d sends completed", len(sender.got), last)
		}
		for _, wc := range sender.got {
			if wc.Status != vhca.WCSuccess || wc.Opcode != vhca.WCSend {
				t.Fatalf("send completion %+v", wc)
			}
		}
	}
	// expect waits for q to have received datagrams first..last-1 and
	// checks them: each once, in order, whole.
	expect := func(q *mcQP, first, last int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(q.got) < last && time.Now().Before(deadline); {
			q.poll(t)
			time.Sleep(200 * time.Microsecond)
		}
		q.poll(t)
		if len(q.got) != last {
			t.Fatalf("%s: %d datagrams received, want %d", q.name, len(q.got), last)
		}
		for k := first; k < last; k++ {
			wc := q.got[k]
			if wc.Status != vhca.WCSuccess || wc.WRID != uint64(k) || wc.SrcQP != sender.qp.Num || wc.SLID != 10 ||
				wc.ByteLen != uint32(40+mcSize(k)) {
				t.Fatalf("%s: completion %d: %+v, want datagram %d from QP %d, LID 10", q.name, k, wc, k, sender.qp.Num)
			}
			b := q.buf.B[k%256*mcSlot+40:][:mcSize(k)]
			want := make([]byte, mcSize(k))
			mcPayload(want, k)
			if string(b) != string(want) {
				t.Fatalf("%s: datagram %d: carries %d, or wrong bytes", q.name, k, binary.LittleEndian.Uint32(b))
			}
		}
	}
	nothing := func(qs ...*mcQP) {
		t.Helper()
		time.Sleep(100 * time.Millisecond) // what is still in flight arrives
		for _, q := range qs {
			q.poll(t)
			if len(q.got) != 0 {
				t.Fatalf("%s: not a member, received %d datagrams: %+v", q.name, len(q.got), q.got[0])
			}
		}
	}

	sendRange(0, n)
	for _, q := range []*mcQP{aMember, b1, b2, c1} {
		expect(q, 0, n)
	}
	nothing(d1)
	st := s1.counters(t)
	mcXmit := map[int]uint64{}
	for _, p := range st.Ports {
		mcXmit[p.Port] = p.Counters.PortMulticastXmitPkts
		if p.Port == 1 && p.Counters.PortMulticastRcvPkts != n {
			t.Errorf("s1 port 1 (a): PortMulticastRcvPkts %d, want %d", p.Counters.PortMulticastRcvPkts, n)
		}
	}
	if mcXmit[1] != 0 || mcXmit[2] != n || mcXmit[3] != n || mcXmit[4] != 0 {
		t.Errorf("s1 PortMulticastXmitPkts by port %v, want 1:0 (the input port) 2:%d 3:%d 4:0 (no member)", mcXmit, n, n)
	}
	if c, err := ctxs["d"].QueryCounters(1); err != nil || c.RcvPackets != 0 {
		t.Errorf("d received %d packets (%v), want none", c.RcvPackets, err)
	}

	// An attached QP is not destroyed (EBUSY); b's QPs leave the group,
	// and b hears no more of it though its port is still in the MFT.
	if err := b1.qp.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("Destroy of an attached QP: %v, want EBUSY", err)
	}
	before, err := ctxs["b"].QueryCounters(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []*mcQP{b1, b2} {
		if err := q.qp.DetachMcast(testMGID, testMLID); err != nil {
			t.Fatalf("%s: DetachMcast: %v", q.name, err)
		}
	}
	sendRange(n, n+m)
	expect(aMember, n, n+m)
	expect(c1, n, n+m)
	time.Sleep(100 * time.Millisecond)
	for _, q := range []*mcQP{b1, b2} {
		q.poll(t)
		if len(q.got) != n {
			t.Fatalf("%s: %d datagrams after leaving the group (%d before)", q.name, len(q.got)-n, n)
		}
	}
	nothing(d1)
	after, err := ctxs["b"].QueryCounters(1)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.NoQP - before.NoQP; got != m {
		t.Errorf("b: %d datagrams for no QP after leaving, want %d (its port still in the MFT)", got, m)
	}
	if err := b1.qp.Destroy(); err != nil {
		t.Fatalf("Destroy after DetachMcast: %v", err)
	}
	t.Logf("%d + %d datagrams to %#x: a's member, b1, b2, c1 got each once and in order (b's until they left), d none; s1 multicast xmit %v",
		n, m, testMLID, mcXmit)
}

// waitActive waits for the switch's ports and the vHCAs' ports to be
// Active: datagrams sent before the links are up are lost.
func waitActive(t *testing.T, sw *loop, ctxs map[string]*client.Context) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		up := true
		for _, p := range sw.counters(t).Ports {
			up = up && p.Logical == "Active"
		}
		for _, ctx := range ctxs {
			a, err := ctx.QueryPort(1)
			up = up && err == nil && a.State == vhca.PortActive
		}
		if up {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("links not Active within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
