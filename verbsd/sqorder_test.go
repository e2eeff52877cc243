package verbsd

import (
	"testing"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
)

// consumedFirst is a CQ ring that checks, as the device publishes each
// completion into it, that no more send completions of its QP have been
// published than the QP's SQ entries consumed (abi: send completions
// count consumed entries).
type consumedFirst struct {
	*cqRing
	t         *testing.T
	sq        *abi.Ring // the client's end of the QP's SQ
	published uint32    // entries the client published into sq
	entry     *vhca.WC
	sends     uint32
	statuses  []vhca.WCStatus
}

func (c *consumedFirst) Entry() *vhca.WC {
	c.entry = c.cqRing.Entry()
	return c.entry
}

func (c *consumedFirst) Publish() {
	if c.entry.Opcode&vhca.WCRecv == 0 {
		c.sends++
		c.statuses = append(c.statuses, c.entry.Status)
		if consumed := c.published - uint32(c.sq.Unconsumed()); consumed < c.sends {
			c.t.Errorf("send completion %d (status %v) published with %d SQ entries consumed", c.sends, c.entry.Status, consumed)
		}
	}
	c.cqRing.Publish()
}

// TestSendCompletionsAfterConsume: whatever completes a send WQE, a
// success, a WQE refused or one flushed, its SQ entry is consumed before
// the completion is in the CQ ring, so a client may count its send
// completions as consumed entries and post into them at once.
func TestSendCompletionsAfterConsume(t *testing.T) {
	cap := vhca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	e, _, mr, sides := newEnginePair(t, cap)
	x, y := sides[0], sides[1]
	check := &consumedFirst{cqRing: x.c, t: t, sq: x.sq}
	x.r.qp.SendCQ.Ring = check
	for range 4 {
		w := abi.RecvWQE(y.rq.Slot(0))
		w.SetWRID(7)
		w.SetNumSGE(1)
		w.SGE(0).Set(0x10000, 64, mr.Key)
		y.rq.Publish(1)
	}
	post := func(ops ...vhca.WROpcode) {
		for k, op := range ops {
			w := abi.SendWQE(x.sq.Slot(k))
			w.SetWRID(uint64(check.published) + 1)
			w.SetOpcode(uint8(op))
			w.SetFlags(uint16(vhca.SendSignaled | vhca.SendInline))
			w.SetInlineLen(8)
			copy(w.Inline(), "8 bytes!")
		}
		x.sq.Publish(len(ops))
		check.published += uint32(len(ops))
		e.step()
	}
	post(vhca.WRSend)                      // taken at once (SendNow)
	post(vhca.WRSend, vhca.WROpcode(0xEE)) // posted, then refused: the first is flushed
	post(vhca.WRSend)                      // into a QP in error: flushed
	want := []vhca.WCStatus{vhca.WCSuccess, vhca.WCWRFlushErr, vhca.WCLocQPOpErr, vhca.WCWRFlushErr}
	if len(check.statuses) != len(want) {
		t.Fatalf("send completions %v, want %v", check.statuses, want)
	}
	for i := range want {
		if check.statuses[i] != want[i] {
			t.Fatalf("send completions %v, want %v", check.statuses, want)
		}
	}
}
