package perftest

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The expected values were computed by perftest's print_report_lat
// arithmetic compiled with gcc on x86-64 (cycles_to_units = 1000, so one
// cycle is one nanosecond), from post timestamps whose differences are the
// samples below; the rows are its printf(REPORT_FMT_LAT) output.

func ns(v ...int64) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x)
	}
	return d
}

func floats(t *testing.T, s string) []float64 {
	t.Helper()
	var out []float64
	for _, f := range strings.Fields(s) {
		if f == "-nan" {
			out = append(out, math.Copysign(math.NaN(), -1))
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b) && math.Signbit(a) == math.Signbit(b)
	}
	return a == b
}

func TestComputeLatKnownAnswers(t *testing.T) {
	cases := []struct {
		name    string
		samples []time.Duration
		rtt     int
		size    uint64
		vals    string // min max typical avg stdev p99 p99.9, as %.17g
		row     string
	}{
		{
			"odd m, two outliers dropped, rtt 2",
			ns(2100, 2050, 1990, 2500, 2003, 1999, 50000, 2001, 2600, 1000000, 2222), 2, 2,
			"0.995 25 1.0249999999999999 1.081388888888889 0 25 25",
			" 2       12          0.99           25.00        1.02     \t       1.08        \t0.00   \t\t25.00   \t\t25.00  \n",
		},
		{
			"odd m, rtt 1",
			ns(2100, 2050, 1990, 2500, 2003, 1999, 50000, 2001, 2600, 1000000, 2222), 1, 64,
			"1.99 50 2.0499999999999998 2.1627777777777779 0 50 50",
			" 64      12          1.99           50.00        2.05     \t       2.16        \t0.00   \t\t50.00   \t\t50.00  \n",
		},
		{
			"m = 5",
			ns(3001, 3000, 2999, 7777, 3500, 3100, 3333), 2, 8,
			"1.4995000000000001 1.75 1.5004999999999999 1.5432999999999999 0 1.75 1.75",
			" 8       8          1.50           1.75         1.50     \t       1.54        \t0.00   \t\t1.75    \t\t1.75   \n",
		},
		{
			"even m = 4, truncated mean median",
			ns(3001, 3000, 2999, 7777, 3500, 3100), 2, 8,
			"1.4995000000000001 1.75 1.5 1.5125 0 1.75 1.75",
			" 8       7          1.50           1.75         1.50     \t       1.51        \t0.00   \t\t1.75    \t\t1.75   \n",
		},
		{
			"stdev square overflows int",
			ns(1000, 1000, 200000000, 300000000, 400000000), 1, 8,
			"1 300000 1 66667.333333333328 -nan 300000 300000",
			" 8       6          1.00           300000.00      1.00     \t       66667.33     \t-nan   \t\t300000.00 \t\t300000.00\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := ComputeLat(c.samples, c.rtt)
			if err != nil {
				t.Fatal(err)
			}
			got := []float64{st.Min, st.Max, st.Typical, st.Avg, st.Stdev, st.P99, st.P999}
			want := floats(t, c.vals)
			for i := range want {
				if !sameFloat(got[i], want[i]) {
					t.Errorf("stat %d = %.17g, want %.17g", i, got[i], want[i])
				}
			}
			iters := uint64(len(c.samples) + 1)
			row := render(t, func(b *strings.Builder) error { return FormatLatRow(b, c.size, iters, st) })
			if row != c.row {
				t.Errorf("row:\n got %q\nwant %q", row, c.row)
			}
		})
	}
}

func TestLatSamples(t *testing.T) {
	got := LatSamples(ns(10, 25, 27, 100))
	want := ns(15, 2, 73)
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if LatSamples(ns(1)) != nil {
		t.Error("one timestamp gave samples")
	}
}

func TestComputeLatErrors(t *testing.T) {
	if _, err := ComputeLat(ns(1, 2), 1); err == nil {
		t.Error("two samples accepted")
	}
	if _, err := ComputeLat(ns(1, 2, 3), 0); err == nil {
		t.Error("rtt factor 0 accepted")
	}
}

func TestLatPercentileIndexing(t *testing.T) {
	// 1002 samples 1..1002 us: m = 1000 kept, p99 is element ceil(990) =
	// 990 -> 991 us, p99.9 element 999 -> 1000 us, max element 1000 ->
	// 1001 us, median of the even m the mean of elements 499 and 500.
	s := make([]time.Duration, 1002)
	for i := range s {
		s[len(s)-1-i] = time.Duration(i+1) * time.Microsecond // unsorted input
	}
	st, err := ComputeLat(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Min != 1 || st.Max != 1001 || st.P99 != 991 || st.P999 != 1000 || st.Typical != 500.5 || st.Avg != 500.5 {
		t.Errorf("%+v", st)
	}
}
