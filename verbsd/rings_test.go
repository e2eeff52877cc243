package verbsd

import (
	"testing"

	"github.com/softib/softib/verbsd/abi"
)

// TestQPLayout: a QP's rings start 8-byte aligned, inside their mapping,
// apart, the receive ring on a page of its own; and the next entries of
// the send rings of as many QPs as a page has cache lines, all idle at
// the same index, fall in as many different lines of their pages.
func TestQPLayout(t *testing.T) {
	sqBytes, rqBytes := abi.RingSize(64, abi.SendWQESize(1, 64)), abi.RingSize(512, abi.RecvWQESize(1))
	lines := pageSize / 64
	seen := map[int]uint32{}
	for qpn := uint32(1); qpn <= uint32(lines); qpn++ {
		sqOff, rqOff, total := qpLayout(qpn, sqBytes, rqBytes)
		if sqOff%8 != 0 || rqOff%8 != 0 {
			t.Fatalf("QP %d: rings at %d and %d, not 8-byte aligned", qpn, sqOff, rqOff)
		}
		if sqOff+sqBytes > rqOff || rqOff+rqBytes > total || rqOff/pageSize == (sqOff+sqBytes-1)/pageSize {
			t.Fatalf("QP %d: send ring [%d, %d), receive ring [%d, %d), %d bytes: overlapping, outside or sharing a page",
				qpn, sqOff, sqOff+sqBytes, rqOff, rqOff+rqBytes, total)
		}
		next := (sqOff + abi.RingHeaderSize) % pageSize / 64 // the line of entry 0
		if other, ok := seen[next]; ok {
			t.Fatalf("QPs %d and %d: the send rings' first entries in the same line of their pages", other, qpn)
		}
		seen[next] = qpn
	}
	if sqOff, rqOff, total := qpLayout(7, sqBytes, 0); rqOff != 0 || total != sqOff+sqBytes {
		t.Fatalf("QP on an SRQ: receive ring at %d, %d bytes in all; want none and %d", rqOff, total, sqOff+sqBytes)
	}
}
