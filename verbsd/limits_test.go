package verbsd_test

// Per-client limits: each refuses with ENOMEM and a message naming the
// limit, freeing one object lets the next be made, and the limits are
// each client's own.

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/vhca"
)

func TestPerClientLimits(t *testing.T) {
	lim := verbsd.Limits{QPs: 2, CQs: 2, MRs: 2, SRQs: 1, AHs: 1, PDs: 2, MappedBytes: 1 << 20}
	_, sock := startServer(t, verbsd.Config{Limits: lim})
	open := func(t *testing.T) *client.Context {
		ctx, err := client.Open("vhca0", &client.Options{Socket: sock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
		return ctx
	}
	// full checks that make fails with ENOMEM naming what.
	full := func(t *testing.T, what string, make func() error) {
		t.Helper()
		err := make()
		if !errors.Is(err, syscall.ENOMEM) {
			t.Fatalf("%s beyond the limit: %v, want ENOMEM", what, err)
		}
		if !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("%s beyond the limit: %q does not say which limit", what, err)
		}
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cqCap := client.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}

	ctx := open(t)
	pd, err := ctx.AllocPD()
	must(t, err)
	t.Run("PDs", func(t *testing.T) {
		pd2, err := ctx.AllocPD()
		must(t, err)
		full(t, "PDs", func() error { _, err := ctx.AllocPD(); return err })
		must(t, pd2.Dealloc())
		pd2, err = ctx.AllocPD()
		must(t, err)
		must(t, pd2.Dealloc())
	})
	cq, err := ctx.CreateCQ(8, nil)
	must(t, err)
	t.Run("CQs", func(t *testing.T) {
		cq2, err := ctx.CreateCQ(8, nil)
		must(t, err)
		full(t, "CQs", func() error { _, err := ctx.CreateCQ(8, nil); return err })
		must(t, cq2.Destroy())
		cq2, err = ctx.CreateCQ(8, nil)
		must(t, err)
		must(t, cq2.Destroy())
	})
	t.Run("completion-channels", func(t *testing.T) {
		var chs []*client.CompChannel
		for range lim.CQs {
			ch, err := ctx.CreateCompChannel()
			must(t, err)
			chs = append(chs, ch)
		}
		full(t, "completion channels", func() error { _, err := ctx.CreateCompChannel(); return err })
		must(t, chs[0].Destroy())
		ch, err := ctx.CreateCompChannel()
		must(t, err)
		must(t, ch.Destroy())
		must(t, chs[1].Destroy())
	})
	buf, err := ctx.Alloc(2 << 20)
	must(t, err)
	defer buf.Free()
	t.Run("MRs", func(t *testing.T) {
		mr1, err := pd.RegMR(buf.B[:4096], acc)
		must(t, err)
		mr2, err := pd.RegMR(buf.B[4096:8192], acc)
		must(t, err)
		full(t, "MRs", func() error { _, err := pd.RegMR(buf.B[8192:12288], acc); return err })
		must(t, mr2.Dereg())
		mr2, err = pd.RegMR(buf.B[8192:12288], acc)
		must(t, err)
		must(t, mr1.Dereg())
		must(t, mr2.Dereg())
	})
	t.Run("registered-bytes", func(t *testing.T) {
		full(t, "registered bytes", func() error { _, err := pd.RegMR(buf.B[:1<<20+1], acc); return err })
		mr1, err := pd.RegMR(buf.B[:1<<20-4096], acc)
		must(t, err)
		full(t, "registered bytes", func() error { _, err := pd.RegMR(buf.B[1<<20:1<<20+4097], acc); return err })
		mr2, err := pd.RegMR(buf.B[1<<20:1<<20+4096], acc) // exactly the limit
		must(t, err)
		must(t, mr2.Dereg())
		full(t, "registered bytes", func() error { _, err := pd.RegMR(buf.B[1<<20:1<<20+4097], acc); return err })
		must(t, mr1.Dereg())
		mr1, err = pd.RegMR(buf.B[:1<<20], acc)
		must(t, err)
		must(t, mr1.Dereg())
	})
	t.Run("QPs", func(t *testing.T) {
		a := client.QPInitAttr{Type: vhca.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cqCap}
		qp1, err := pd.CreateQP(a)
		must(t, err)
		qp2, err := pd.CreateQP(a)
		must(t, err)
		full(t, "QPs", func() error { _, err := pd.CreateQP(a); return err })
		must(t, qp2.Destroy())
		qp2, err = pd.CreateQP(a)
		must(t, err)
		must(t, qp1.Destroy())
		must(t, qp2.Destroy())
	})
	t.Run("SRQs", func(t *testing.T) {
		a := client.SRQAttr{MaxWR: 4, MaxSGE: 1}
		srq, err := pd.CreateSRQ(a)
		must(t, err)
		full(t, "SRQs", func() error { _, err := pd.CreateSRQ(a); return err })
		must(t, srq.Destroy())
		srq, err = pd.CreateSRQ(a)
		must(t, err)
		must(t, srq.Destroy())
	})
	t.Run("AHs", func(t *testing.T) {
		g, err := ctx.QueryGID(1, 1)
		must(t, err)
		av := vhca.AV{Port: 1, IsGlobal: true, GRH: vhca.GlobalRoute{DGID: g.GID, SGIDIndex: 1, HopLimit: 64}}
		ah, err := pd.CreateAH(av)
		must(t, err)
		full(t, "AHs", func() error { _, err := pd.CreateAH(av); return err })
		must(t, ah.Destroy())
		ah, err = pd.CreateAH(av)
		must(t, err)
		must(t, ah.Destroy())
	})
	t.Run("each-clients-own", func(t *testing.T) {
		// The first client holds one PD and one CQ; fill its quotas,
		// then another client still has all of its own.
		_, err := ctx.AllocPD()
		must(t, err)
		_, err = ctx.CreateCQ(8, nil)
		must(t, err)
		full(t, "PDs", func() error { _, err := ctx.AllocPD(); return err })
		other := open(t)
		for range lim.PDs {
			_, err := other.AllocPD()
			must(t, err)
		}
		for range lim.CQs {
			_, err := other.CreateCQ(8, nil)
			must(t, err)
		}
		full(t, "PDs", func() error { _, err := other.AllocPD(); return err })
		// A client that goes gives its quota back: a new one has it all.
		ctx.Close()
		again := open(t)
		for range lim.PDs {
			_, err := again.AllocPD()
			must(t, err)
		}
	})
}
