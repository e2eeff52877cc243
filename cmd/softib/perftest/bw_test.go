package perftest

import (
	"strings"
	"testing"
	"time"
)

// The expected values were computed by perftest's print_report_bw
// arithmetic compiled with gcc (cycles_to_units = 10^9, one cycle per
// nanosecond) on the same timestamps; the rows are its printf output.

func bwStamps(n int, post func(i int) int64, comp func(i int, p int64) int64) (p, c []time.Duration) {
	for i := 0; i < n; i++ {
		pi := post(i)
		p = append(p, time.Duration(pi))
		c = append(c, time.Duration(comp(i, pi)))
	}
	return p, c
}

func TestComputeBWKnownAnswers(t *testing.T) {
	p1, c1 := bwStamps(20,
		func(i int) int64 { return 1000 + int64(i)*700 + int64(i%3)*13 },
		func(i int, p int64) int64 { return p + 5000 + int64(i%4)*97 })
	p2, c2 := bwStamps(20,
		func(i int) int64 { return 1000 + int64(i)*70000000 },
		func(i int, p int64) int64 { return p + 90000000 + int64(i) })
	cases := []struct {
		name string
		in   BWInput
		vals string // peak avg msgrate as %.17g
		row  string
	}{
		{"MiB, cq_mod 4", BWInput{Size: 65536, Iters: 10, QPs: 2, PostList: 1, CQMod: 4, Posted: p1, Completed: c1, Unit: UnitMiBps},
			"67204.301075268813 67189.851644807568 1.075037626316921",
			" 65536      20               67204.30            67189.85\t\t     1.075038\n"},
		{"Gb, cq_mod 4", BWInput{Size: 65536, Iters: 10, QPs: 2, PostList: 1, CQMod: 4, Posted: p1, Completed: c1, Unit: UnitGbps},
			"563.7505376344086 563.62932702644594 1.075037626316921",
			" 65536      20               563.75             563.63 \t\t     1.075038\n"},
		{"Gb small, post list 2, cq_mod 3", BWInput{Size: 2, Iters: 10, QPs: 2, PostList: 2, CQMod: 3, Posted: p1, Completed: c1, Unit: UnitGbps},
			"0.017204301075268817 0.017200602021070738 1.075037626316921",
			" 2          20           0.017204            0.017201            1.075038\n"},
		{"slow, cq_mod 1", BWInput{Size: 64, Iters: 10, QPs: 2, PostList: 1, CQMod: 1, Posted: p2, Completed: c2, Unit: UnitGbps},
			"7.2112676056338026e-06 7.2112675091450125e-06 1.4084506853798852e-05",
			" 64         20           0.000007            0.000007            0.000014\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ComputeBW(c.in)
			if err != nil {
				t.Fatal(err)
			}
			want := floats(t, c.vals)
			got := []float64{r.BWPeak, r.BWAvg, r.MsgRate}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("value %d = %.17g, want %.17g", i, got[i], want[i])
				}
			}
			if r.Size != c.in.Size || r.Iters != 20 {
				t.Errorf("size %d iters %d", r.Size, r.Iters)
			}
			row := render(t, func(b *strings.Builder) error { return FormatBWRow(b, r, c.in.Unit) })
			if row != c.row {
				t.Errorf("row:\n got %q\nwant %q", row, c.row)
			}
		})
	}
}

func TestComputeBWNoPeak(t *testing.T) {
	// One stamp each: 1 MiB in 1 ms over 1000 messages of 1 KiB.
	in := BWInput{Size: 1024, Iters: 1024, QPs: 1, NoPeak: true, Unit: UnitMiBps,
		Posted: []time.Duration{0}, Completed: []time.Duration{time.Millisecond}}
	r, err := ComputeBW(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.BWPeak != 0 || r.BWAvg != 1000 || r.MsgRate != 1.024 {
		t.Errorf("%+v", r)
	}
}

func TestComputeBWErrors(t *testing.T) {
	if _, err := ComputeBW(BWInput{Size: 1, Iters: 4, QPs: 1, Posted: ns(1, 2), Completed: ns(3, 4)}); err == nil {
		t.Error("too few timestamps accepted")
	}
	if _, err := ComputeBW(BWInput{Size: 1, Iters: 1, QPs: 0}); err == nil {
		t.Error("zero QPs accepted")
	}
}

func TestReportAdd(t *testing.T) {
	a := BWReport{Size: 8, Iters: 10, BWPeak: 1, BWAvg: 2, MsgRate: 3}
	b := BWReport{Size: 9, Iters: 11, BWPeak: 10, BWAvg: 20, MsgRate: 30}
	got := a.Add(b)
	if got != (BWReport{Size: 8, Iters: 10, BWPeak: 11, BWAvg: 22, MsgRate: 33}) {
		t.Errorf("%+v", got)
	}
}

func TestAllSizes(t *testing.T) {
	s := WriteBW.AllSizes(ConnRC, MTU4096, 65536)
	if len(s) != 23 || s[0] != 2 || s[22] != 1<<23 {
		t.Errorf("write_bw -a sizes %v", s)
	}
	s = SendLat.AllSizes(ConnUD, MTU1024, 2)
	if len(s) != 10 || s[len(s)-1] != 1024 {
		t.Errorf("send_lat UD -a sizes %v", s)
	}
	if s := AtomicBW.AllSizes(ConnRC, MTU4096, 8); len(s) != 1 || s[0] != 8 {
		t.Errorf("atomic sizes %v", s)
	}
}
