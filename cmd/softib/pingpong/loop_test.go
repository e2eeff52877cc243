package pingpong

import (
	"math/rand/v2"
	"testing"
)

// side is one program in a simulated run: its Loop, its CQ and the
// receives it has posted.
type side struct {
	loop   *Loop
	cq     []uint64
	posted int
	sent   int
}

// post models ibv_post_send: the send completes on s, the message consumes
// a receive of peer and completes there.
func (s *side) post(t *testing.T, peer *side) {
	if peer.posted == 0 {
		t.Fatal("message arrived with no receive posted (RNR)")
	}
	s.sent++
	peer.posted--
	s.cq = append(s.cq, SendWRID)
	peer.cq = append(peer.cq, RecvWRID)
}

// TestLoopPingPong runs a client and a server Loop against each other with
// random CQ polling order and checks that each side sends and receives
// exactly iters messages and never runs out of posted receives.
func TestLoopPingPong(t *testing.T) {
	for _, c := range []struct{ iters, rxDepth uint32 }{
		{1, 1}, {1000, 500}, {10, 1}, {10, 2}, {100, 3}, {7, 500},
	} {
		rng := rand.New(rand.NewPCG(uint64(c.iters), uint64(c.rxDepth)))
		client := &side{loop: NewLoop(c.iters, c.rxDepth, true), posted: int(c.rxDepth)}
		server := &side{loop: NewLoop(c.iters, c.rxDepth, false), posted: int(c.rxDepth)}
		client.post(t, server) // the client's first send, before the clock starts

		for steps := 0; !client.loop.Finished() || !server.loop.Finished(); steps++ {
			if steps > 10*int(c.iters)+10 {
				t.Fatalf("%+v: no progress", c)
			}
			s, peer := client, server
			if rng.IntN(2) == 0 {
				s, peer = server, client
			}
			// ibv_poll_cq(cq, 2, wc): up to two completions at a time.
			n := min(len(s.cq), 1+rng.IntN(2))
			wcs := s.cq[:n]
			s.cq = s.cq[n:]
			for _, wrID := range wcs {
				st, err := s.loop.Complete(wrID)
				if err != nil {
					t.Fatal(err)
				}
				s.posted += st.Repost
				if s.posted > int(c.rxDepth) {
					t.Fatalf("%+v: %d receives posted, more than rx-depth", c, s.posted)
				}
				if st.Send {
					s.post(t, peer)
				}
			}
		}
		for name, s := range map[string]*side{"client": client, "server": server} {
			sent, recvd := s.loop.Counts()
			if sent != int(c.iters) || recvd != int(c.iters) || s.sent != int(c.iters) || len(s.cq) != 0 {
				t.Errorf("%+v %s: scnt %d rcnt %d, posted %d sends, %d completions left; want %d each",
					c, name, sent, recvd, s.sent, len(s.cq), c.iters)
			}
		}
	}
}

// TestLoopRepost: receives are re-posted in one batch once only one is
// left, topping the queue back up to rx-depth.
func TestLoopRepost(t *testing.T) {
	l := NewLoop(100, 4, false)
	var reposts []int
	for range 9 {
		st, err := l.Complete(RecvWRID)
		if err != nil {
			t.Fatal(err)
		}
		reposts = append(reposts, st.Repost)
		if st.Send {
			if _, err := l.Complete(SendWRID); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []int{0, 0, 3, 0, 0, 3, 0, 0, 3}
	for i := range want {
		if reposts[i] != want[i] {
			t.Fatalf("reposts = %v, want %v", reposts, want)
		}
	}
}

func TestLoopSendWaitsForBoth(t *testing.T) {
	l := NewLoop(10, 10, true) // first send already posted
	if st, _ := l.Complete(SendWRID); st.Send {
		t.Error("sent again before the answer arrived")
	}
	if st, _ := l.Complete(RecvWRID); !st.Send {
		t.Error("did not send after send completion and answer")
	}
	if st, _ := l.Complete(RecvWRID); st.Send {
		t.Error("sent again before the previous send completed")
	}
	if _, err := l.Complete(7); err == nil {
		t.Error("accepted an unknown wr_id")
	}
}
