package perftest

import (
	"errors"
	"fmt"
	"time"
)

// BWInput is what print_report_bw reads from perftest's parameters: the
// post and completion timestamp of every work request, indexed by the
// global work request number across all QPs (perftest's tposted and
// tcompleted arrays), here as time.Duration offsets from any common origin.
// One nanosecond plays the role of one CPU cycle.
type BWInput struct {
	Size     uint64 // message size
	Iters    uint64 // iterations per QP (-n), or the count of a duration run
	QPs      int    // number of QPs
	PostList int    // work requests per post (-l), 1 if zero
	CQMod    int    // completion moderation (-Q), 1 if zero
	// Posted[i] is when work request i was posted, Completed[j] when its
	// completion was polled; perftest stamps a completion only every CQMod
	// requests and at the last, and only those entries are read.
	Posted, Completed []time.Duration
	// NoPeak skips the peak search; then only Completed[0], the end of the
	// run, is read and the peak is 0. perftest sets it for -N, for
	// duration runs (-D), --run_infinitely, more than 20000 iterations,
	// and on the receiving server of a unidirectional send test.
	NoPeak bool
	// Duration marks a duration run (-D): Iters already counts all QPs.
	Duration bool
	// ItersPerPort are the iterations of each port of a dual-port run.
	ItersPerPort [2]uint64
	Unit         Unit
}

// ComputeBW is print_report_bw's arithmetic, kept in perftest's order and
// integer/floating-point split so that the printed digits match:
//
//   - the peak searches, for every first request i (stepping by PostList)
//     and every stamped completion j after it, the smallest per-message time
//     (Completed[j]-Posted[i]) / (j-i+1), in integer cycles, starting from
//     Completed[0]-Posted[0]; peak = size*cycles_per_sec / (that * unit),
//     both products in 64-bit integers;
//   - the average is size*n*cycles_per_sec / ((Completed[n-1]-Posted[0]) *
//     unit) in doubles, n = Iters*QPs, and the message rate
//     n*cycles_per_sec / (that time * 10^6).
//
// The returned report's Iters is n, which is what perftest prints.
func ComputeBW(in BWInput) (BWReport, error) {
	var r BWReport
	postList, cqMod := max(in.PostList, 1), max(in.CQMod, 1)
	if in.QPs < 1 {
		return r, errors.New("perftest: BW report needs at least one QP")
	}
	n := in.Iters
	if !in.Duration {
		n *= uint64(in.QPs)
	}
	if n == 0 {
		return r, errors.New("perftest: BW report of zero iterations")
	}
	need := n
	if in.NoPeak {
		need = 1
	}
	if uint64(len(in.Posted)) < need || uint64(len(in.Completed)) < need {
		return r, fmt.Errorf("perftest: BW report needs %d timestamps, have %d posted and %d completed",
			need, len(in.Posted), len(in.Completed))
	}
	tpost := func(i uint64) uint64 { return uint64(in.Posted[i]) }
	tcomp := func(i uint64) uint64 { return uint64(in.Completed[i]) }

	// cycles_t is unsigned, so a completion stamped before its post wraps
	// around instead of producing a negative time; the uint64 arithmetic
	// keeps that.
	optDelta := tcomp(0) - tpost(0)
	if !in.NoPeak {
		step := uint64(cqMod)
		for i := uint64(0); i < n; i += uint64(postList) {
			for j := roundUp(i+1, step) - 1; j < n; j += step {
				if t := (tcomp(j) - tpost(i)) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
			// The last request is always signalled, stamped or not by
			// the moderation.
			if n%step != 0 {
				j := n - 1
				if t := (tcomp(j) - tpost(i)) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
		}
	}

	const cyclesToUnits = 1e9 // "cycles" (ns) per second
	ff := in.Unit.factor()
	loc := n - 1
	if in.NoPeak {
		loc = 0
	}
	sum := float64(tcomp(loc) - tpost(0))
	tsize := float64(in.Size)

	r.Size = in.Size
	r.Iters = n
	r.BWAvg = tsize * float64(n) * cyclesToUnits / (sum * float64(ff))
	r.MsgRate = float64(n) * cyclesToUnits * 1 / (sum * 1000000)
	r.BWAvgP1 = tsize * float64(in.ItersPerPort[0]) * cyclesToUnits / (sum * float64(ff))
	r.MsgRateP1 = float64(in.ItersPerPort[0]) * cyclesToUnits * 1 / (sum * 1000000)
	r.BWAvgP2 = tsize * float64(in.ItersPerPort[1]) * cyclesToUnits / (sum * float64(ff))
	r.MsgRateP2 = float64(in.ItersPerPort[1]) * cyclesToUnits * 1 / (sum * 1000000)

	var peakUp uint64
	if !in.NoPeak {
		peakUp = in.Size * uint64(cyclesToUnits)
	}
	peakDown := optDelta * uint64(ff)
	r.BWPeak = float64(peakUp) / float64(peakDown)
	return r, nil
}

// roundUp is perftest's ROUND_UP macro.
func roundUp(v, align uint64) uint64 {
	if v%align == 0 {
		return v
	}
	return align * (v/align + 1)
}
