package vhca

import "testing"

// TestFetchRecv: a message that finds its QP's receive queue empty asks
// the owner (FetchRecv) for the receives it has not yet posted, and
// takes one it posts then; with nothing posted, it gets an RNR NAK as
// before. A QP on an SRQ is not asked.
func TestFetchRecv(t *testing.T) {
	for _, post := range []bool{true, false} {
		d := inProcessDevice(t, 1)
		x, y := newEndpoint(t, d, QPTypeRC, 1<<16, 1), newEndpoint(t, d, QPTypeRC, 1<<16, 2)
		connect(t, x, y, 100, 200, MTU1024)
		asked := 0
		d.FetchRecv = func(qp *QP) {
			asked++
			if qp != y.qp {
				t.Errorf("FetchRecv for QP %d, want %d", qp.Num, y.qp.Num)
			}
			if post {
				if _, err := d.PostRecv(qp, []RecvWR{{WRID: 42, SGL: []SGE{{Addr: 0x10000, Length: 64, LKey: y.mr.Key}}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		copy(x.mem, "fetched")
		if _, err := d.PostSend(x.qp, []SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: 0x10000, Length: 7, LKey: x.mr.Key}}}}); err != nil {
			t.Fatal(err)
		}
		// One turn of the request only: an RNR NAK's retry waits for
		// its timer.
		turnAround(t, d, true, 10)
		if asked != 1 {
			t.Fatalf("post %v: FetchRecv called %d times, want 1", post, asked)
		}
		wcs := make([]WC, 4)
		n := y.rcq.Poll(wcs)
		rnr := d.Ports[0].Counters.RNRNAKsSent
		if post {
			if n != 1 || wcs[0].WRID != 42 || wcs[0].Status != WCSuccess || wcs[0].ByteLen != 7 || string(y.mem[:7]) != "fetched" {
				t.Fatalf("fetched receive: %d completions %+v, memory %q", n, wcs[:n], y.mem[:7])
			}
			if rnr != 0 {
				t.Fatalf("%d RNR NAKs with a receive fetched", rnr)
			}
			if n := x.scq.Poll(wcs); n != 1 || wcs[0].Status != WCSuccess {
				t.Fatalf("send: %d completions %+v", n, wcs[:n])
			}
		} else if n != 0 || rnr != 1 {
			t.Fatalf("nothing to fetch: %d receive completions, %d RNR NAKs; want 0 and 1", n, rnr)
		}
	}
}
