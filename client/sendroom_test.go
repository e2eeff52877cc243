package client

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/softib/softib/vhca"
)

// TestPostIntoCompletedEntry: with a one-entry SQ, as perftest's latency
// tests make, a program posts again as soon as it polls its send
// completion, and PostSend knows the entry is free from the completions
// polled (abi: send completions count consumed entries), not from the
// ring's consumer index. The test makes that index stale after each
// completion, one entry behind, as if verbsd's store of it had not
// reached this core yet: every post still goes, and every WRITE lands.
func TestPostIntoCompletedEntry(t *testing.T) {
	o := startVerbsd(t)
	a := newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
	b := newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
	b.gid.PSN = 0x5555
	qp, err := a.pd.CreateQP(QPInitAttr{Type: vhca.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	a.qp, a.gid.QPN = qp, qp.Num
	connect(t, a, b)
	sq, _ := ringsOf(t, qp)
	if qp.sq.Entries() != 1 {
		t.Fatalf("SQ ring of %d entries, want 1", qp.sq.Entries())
	}
	cons := (*uint32)(unsafe.Pointer(&sq[128])) // the consumer index (abi: the ring header)
	var data [8]byte
	wrs := []SendWR{{Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled | vhca.SendInline,
		RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}}
	const posts = 200
	for i := range uint64(posts) {
		binary.NativeEndian.PutUint64(data[:], i+1)
		wrs[0].WRID, wrs[0].InlineData = i+1, data[:]
		if _, err := qp.PostSend(wrs); err != nil {
			t.Fatalf("post %d, after %d completions: %v", i+1, i, err)
		}
		if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess || wc.WRID != i+1 {
			t.Fatalf("completion %+v, want WRID %d, success", wc, i+1)
		}
		atomic.StoreUint32(cons, uint32(i))
	}
	if got := binary.NativeEndian.Uint64(b.buf.B); got != posts {
		t.Fatalf("the last WRITE left %d, want %d", got, posts)
	}
}
