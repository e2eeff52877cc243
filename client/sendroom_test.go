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
	// Two QPs of a, one CQ for both: their completions interleave, and
	// each must count for its own QP.
	var qps [2]*QP
	var peers [2]*side
	for k := range qps {
		qp, err := a.pd.CreateQP(QPInitAttr{Type: vhca.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq,
			Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
		if err != nil {
			t.Fatal(err)
		}
		if qp.sq.Entries() != 1 {
			t.Fatalf("SQ ring of %d entries, want 1", qp.sq.Entries())
		}
		x := *a
		x.qp, x.gid.QPN, x.gid.PSN = qp, qp.Num, uint32(0x100*k)
		peers[k] = newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
		peers[k].gid.PSN = 0x5555
		connect(t, &x, peers[k])
		qps[k] = qp
	}
	var data [8]byte
	const posts = 200
	for i := range uint64(posts) {
		for k, qp := range qps {
			b := peers[k]
			binary.NativeEndian.PutUint64(data[:], i+1)
			wrs := []SendWR{{WRID: i + 1, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled | vhca.SendInline,
				InlineData: data[:], RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}}
			if _, err := qp.PostSend(wrs); err != nil {
				t.Fatalf("QP %d: post %d, after %d completions: %v", k, i+1, i, err)
			}
			if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess || wc.WRID != i+1 || wc.QPNum != qp.Num {
				t.Fatalf("completion %+v, want QP %d's WRID %d, success", wc, qp.Num, i+1)
			}
			sq, _ := ringsOf(t, qp)
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&sq[128])), uint32(i)) // the consumer index (abi: the ring header)
		}
	}
	for k, b := range peers {
		if got := binary.NativeEndian.Uint64(b.buf.B); got != posts {
			t.Fatalf("QP %d's last WRITE left %d, want %d", k, got, posts)
		}
	}
}
