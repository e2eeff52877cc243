package client

import (
	"context"
	"testing"
	"time"

	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/verbsdtest"
	"github.com/softib/softib/vhca"
)

// TestArmRacesCompletion: the verbs' way to wait (poll; arm; poll again;
// only then wait for the event) never waits for a completion that came
// while it armed, with an engine that sleeps as soon as it has nothing
// to do (Spin 1 ns): arming rings no doorbell, so the engine must see an
// arm that came in before it sleeps, or the client must see the
// completion it published.
func TestArmRacesCompletion(t *testing.T) {
	_, sock := verbsdtest.Start(t, verbsd.Config{Spin: 1})
	o := &Options{Socket: sock}
	a := newSide(t, o, "vhca0", vhca.QPTypeRC, 1<<16)
	ch, err := a.ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.ctx.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.pd.CreateQP(QPInitAttr{Type: vhca.QPTypeRC, SendCQ: cq, RecvCQ: a.cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	a.qp, a.gid.QPN = qp, qp.Num
	b := newSide(t, o, "vhca1", vhca.QPTypeRC, 1<<16)
	connect(t, a, b)
	wr := SendWR{WRID: 1, Opcode: vhca.WRRDMAWrite, Flags: vhca.SendSignaled,
		SGL: []SGE{{Addr: a.mr.Addr, Length: 8, LKey: a.mr.LKey}}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
	wc := make([]WC, 1)
	got := func() bool {
		n, err := cq.Poll(wc)
		if err != nil || n == 1 && wc[0].Status != vhca.WCSuccess {
			t.Fatalf("poll: %d %+v %v", n, wc[0], err)
		}
		return n == 1
	}
	const rounds = 3000
	deadline := time.Now().Add(20 * time.Second)
	for i := range rounds {
		if time.Now().After(deadline) {
			t.Logf("%d rounds in 20 s", i)
			break
		}
		if _, err := qp.PostSend([]SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		for !got() {
			if err := cq.ReqNotify(false); err != nil {
				t.Fatal(err)
			}
			if got() {
				break
			}
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := ch.GetEvent(c)
			cancel()
			if err != nil {
				t.Fatalf("round %d: armed after polling nothing, no event: %v", i, err)
			}
		}
	}
}
