package client

import (
	"testing"

	"github.com/softib/softib/vhca"
)

// TestRecvPostedJustBeforeSend: a receive posted an instant before the
// SEND that needs it is there for it, though verbsd moves receives out
// of their rings lazily: the message fetches it (vhca.Device.FetchRecv).
// A receive missed would cost an RNR NAK, which the port counts. Over
// the loopback of one vHCA (the request is turned around in the same
// round that took it) and over the pipe to another (it arrives in the
// round's receive pass).
func TestRecvPostedJustBeforeSend(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{{"loopback", "vhca0", "vhca0"}, {"pipe", "vhca0", "vhca1"}} {
		t.Run(tc.name, func(t *testing.T) {
			o := startVerbsd(t)
			a := newSide(t, o, tc.a, vhca.QPTypeRC, 1<<16)
			b := newSide(t, o, tc.b, vhca.QPTypeRC, 1<<16)
			connect(t, a, b)
			const rounds = 3000
			recv := []RecvWR{{SGL: []SGE{{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}}}}
			send := []SendWR{{Opcode: vhca.WRSend, Flags: vhca.SendSignaled | vhca.SendInline}}
			for i := range rounds {
				recv[0].WRID = uint64(i)
				if _, err := b.qp.PostRecv(recv); err != nil {
					t.Fatal(err)
				}
				send[0].WRID, send[0].InlineData = uint64(i), []byte{byte(i), byte(i >> 8)}
				if _, err := a.qp.PostSend(send); err != nil {
					t.Fatal(err)
				}
				if wc := waitWC(t, a.cq); wc.Status != vhca.WCSuccess || wc.WRID != uint64(i) {
					t.Fatalf("round %d: send completion %+v", i, wc)
				}
				wc := waitWC(t, b.cq)
				if wc.Status != vhca.WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != 2 || b.buf.B[0] != byte(i) || b.buf.B[1] != byte(i>>8) {
					t.Fatalf("round %d: receive completion %+v, data %x", i, wc, b.buf.B[:2])
				}
			}
			for _, s := range []*side{a, b} {
				c, err := s.ctx.QueryCounters(1)
				if err != nil {
					t.Fatal(err)
				}
				if c.RNRNAKsSent != 0 || c.RNRNAKsRcvd != 0 {
					t.Errorf("%s: %d RNR NAKs sent, %d received, want none", s.ctx.Name, c.RNRNAKsSent, c.RNRNAKsRcvd)
				}
			}
		})
	}
}
