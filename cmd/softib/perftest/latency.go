package perftest

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// LatStats are the statistics of a latency row, in microseconds.
type LatStats struct {
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

// latMeasureTail is LAT_MEASURE_TAIL: perftest drops the largest two samples
// as outliers before computing the statistics.
const latMeasureTail = 2

// LatSamples turns per-iteration post timestamps into the samples perftest
// measures in a latency test: the time between consecutive posts, one
// sample fewer than iterations (print_report_lat, tst == LAT).
func LatSamples(posted []time.Duration) []time.Duration {
	if len(posted) < 2 {
		return nil
	}
	d := make([]time.Duration, len(posted)-1)
	for i := range d {
		d[i] = posted[i+1] - posted[i]
	}
	return d
}

// ComputeLat is print_report_lat's arithmetic on the samples (see
// LatSamples), with rttFactor the divisor of Test.RTTFactor (2 for the
// ping-pong send and write tests, 1 for read and atomic). perftest's rules,
// kept including their quirks:
//
//   - the samples are sorted and the two largest dropped: the statistics
//     run over the m = len-2 smallest;
//   - t_min is the smallest sample, t_max the largest *kept* one, that is
//     the second largest of all (the array element at index m);
//   - t_typical is the median of the m kept samples in integer cycles
//     (here nanoseconds): the middle one for odd m, the truncated mean of
//     the two middle ones for even m;
//   - t_avg is the mean of the kept samples;
//   - t_stdev is computed from deviations truncated to whole microseconds
//     and squared into a C int (x86-64 turns an overflowing square, beyond
//     ~46 ms of deviation, into INT_MIN, which then yields NaN);
//   - the 99% and 99.9% percentiles are the elements at index
//     ceil(m*0.99) and ceil(m*0.999) of the sorted array.
//
// It needs at least three samples (m >= 1).
func ComputeLat(samples []time.Duration, rttFactor int) (LatStats, error) {
	var st LatStats
	if len(samples) < latMeasureTail+1 {
		return st, fmt.Errorf("perftest: latency needs at least %d samples, have %d", latMeasureTail+1, len(samples))
	}
	if rttFactor < 1 {
		return st, fmt.Errorf("perftest: bad RTT factor %d", rttFactor)
	}
	delta := make([]uint64, len(samples))
	for i, s := range samples {
		delta[i] = uint64(s) // cycles_t is unsigned
	}
	slices.Sort(delta)
	m := len(delta) - latMeasureTail
	q := 1000.0 * float64(rttFactor) // cycles_rtt_quotient: ns per usec * rtt
	us := func(c uint64) float64 { return float64(c) / q }

	var median uint64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}

	var avgSum float64
	for i := 0; i < m; i++ {
		avgSum += us(delta[i])
	}
	avg := avgSum / float64(m)

	var stdevSum float64
	for i := 0; i < m; i++ {
		tempVar := int64(avg - us(delta[i])) // int temp_var: truncation
		stdevSum += float64(cIntSquare(tempVar))
	}

	st.Min = us(delta[0])
	st.Max = us(delta[m])
	st.Typical = us(median)
	st.Avg = avg
	st.Stdev = math.Sqrt(stdevSum / float64(m))
	st.P99 = us(delta[int(math.Ceil(float64(m)*0.99))])
	st.P999 = us(delta[int(math.Ceil(float64(m)*0.999))])
	return st, nil
}

// cIntSquare is "int pow_var = pow(temp_var, 2)" on x86-64: the double
// square converted to a 32-bit int, where cvttsd2si yields INT_MIN for any
// value out of range.
func cIntSquare(v int64) int32 {
	sq := float64(v) * float64(v)
	if sq > math.MaxInt32 {
		return math.MinInt32
	}
	return int32(sq)
}
