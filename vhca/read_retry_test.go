package vhca

import (
	"bytes"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestRCLargeReadResponseLoss: a 256 KiB READ at MTU 1024 (256 response
// packets) whose responses are lost in the middle, in a retried stream,
// and at the very end. Each loss makes the requester ask again from the
// first response it lacks (a new READ request for the rest, IBA 1.4
// §9.7.5.1), the responder answers it from its saved resource, and the
// READ completes once, with the right bytes, after which the connection
// goes on working.
func TestRCLargeReadResponseLoss(t *testing.T) {
	const size = 256 << 10
	da, db, a, b := twoDevices(t, QPTypeRC, 2*size, size)
	c := defaultConn()
	c.Timeout, c.RetryCnt = 8, 3 // 1 ms
	connectWith(t, a, b, c)
	s := newXSim(t, da, db)
	base := c.PSNA
	// Drop the n-th occurrence (from 1) of a response PSN.
	drops := map[uint32]int{base + 50: 1, base + 51: 1, base + 130: 2, base + 255: 3}
	seen := map[uint32]int{}
	dropped := 0
	s.filter = func(from int, p *wire.Packet) []Time {
		if from == 1 && p.Info.Operation == wire.OpReadResponse {
			psn := p.BTH().PSN()
			seen[psn]++
			if drops[psn] == seen[psn] {
				dropped++
				return nil
			}
		}
		return deliverOnce
	}
	for i := range b.mem {
		b.mem[i] = byte(i*131 + i>>10)
	}
	postSend(t, a, SendWR{WRID: 7, Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(size, size), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s.must(1e9, "READ", func() bool { return a.scq.Len() > 0 })
	wcs := drain(a.scq)
	if len(wcs) != 1 || wcs[0].WRID != 7 || wcs[0].Status != WCSuccess || wcs[0].Opcode != WCRDMARead || wcs[0].ByteLen != size {
		t.Fatalf("completions %+v", wcs)
	}
	if !bytes.Equal(a.mem[size:], b.mem) {
		t.Fatal("READ data differs from the source")
	}
	if !bytes.Equal(a.mem[:size], make([]byte, size)) {
		t.Fatal("READ wrote outside its SGE")
	}
	if dropped != len(drops) {
		t.Fatalf("%d responses dropped, want %d: the scenario did not happen", dropped, len(drops))
	}
	// Four READ requests: the first and one from each lost PSN.
	reqs := s.sentBy(0, wire.RCRDMAReadRequest)
	wantPSN := []uint32{base, base + 50, base + 130, base + 255}
	if len(reqs) != len(wantPSN) {
		t.Fatalf("%d READ requests, want %d: %+v", len(reqs), len(wantPSN), reqs)
	}
	for i, r := range reqs {
		if r.PSN != wantPSN[i] {
			t.Errorf("READ request %d for PSN %d, want %d", i, r.PSN, wantPSN[i])
		}
	}
	if a.qp.State() != QPStateRTS || b.qp.State() != QPStateRTS {
		t.Fatalf("states %s %s", a.qp.State(), b.qp.State())
	}
	// PSNs continue after the READ's 256.
	postSend(t, a, SendWR{WRID: 8, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 3000), RemoteAddr: b.addr(0), RKey: b.mr.Key})
	s.must(1e9, "WRITE after the READ", func() bool { return a.scq.Len() > 0 })
	if got := summarize(drain(a.scq)); !equalSummaries(got, []wcSummary{{8, WCSuccess}}) {
		t.Fatalf("WRITE after the READ: %+v", got)
	}
	if w := s.sentBy(0, wire.RCRDMAWriteFirst); len(w) != 1 || w[0].PSN != base+256 {
		t.Errorf("WRITE after the READ: %+v, want its first packet at PSN %d", w, base+256)
	}
	if got := b.qp.resp.epsn; got != base+259 {
		t.Errorf("responder expects PSN %d, want %d", got, base+259)
	}
}
