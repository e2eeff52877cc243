package perftest

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BWReport is perftest's struct bw_report_data: one bandwidth result, in the
// unit of the test's report format (MiB/s or Gb/s). It is what
// print_report_bw computes, print_full_bw_report prints and xchg_bw_reports
// sends to the peer.
type BWReport struct {
	Size    uint64  // message size in bytes
	Iters   uint64  // iterations over all QPs
	BWPeak  float64 // in the report unit
	BWAvg   float64 // in the report unit
	MsgRate float64 // Mpps
	// Per-port figures of a dual-port run (--report-per-port).
	BWAvgP1, MsgRateP1 float64
	BWAvgP2, MsgRateP2 float64
}

// ExchangeBWReport is xchg_bw_reports. Each field is its own exchange, the
// client writing first each time: size as an 8-byte big-endian unsigned
// long, iterations as 8 bytes big-endian (4 bytes when the remote version
// is below 5.33), then bw_peak, bw_avg and msgRate_avg as big-endian IEEE
// 754 doubles (hton_double byte-swaps the double's bits), and with
// perPort (--report-per-port, both sides) bw_avg_p1, msgRate_avg_p1,
// bw_avg_p2 and msgRate_avg_p2 likewise.
func (c *Conn) ExchangeBWReport(local BWReport, remoteVersion string, perPort bool) (BWReport, error) {
	var rem BWReport
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	f64 := func(v float64) []byte { return u64(math.Float64bits(v)) }

	b, err := c.Exchange(u64(local.Size))
	if err != nil {
		return rem, fmt.Errorf("perftest: exchanging report size: %w", err)
	}
	rem.Size = binary.BigEndian.Uint64(b)

	// perftest passes the version as a float and compares it with the
	// double 5.33, so "5.33" itself (5.3299999 as a float) falls below.
	if float64(float32(ParseVersion(remoteVersion))) >= itersU64Version {
		b, err = c.Exchange(u64(local.Iters))
		if err == nil {
			rem.Iters = binary.BigEndian.Uint64(b)
		}
	} else {
		b, err = c.Exchange(binary.BigEndian.AppendUint32(nil, uint32(local.Iters)))
		if err == nil {
			rem.Iters = uint64(binary.BigEndian.Uint32(b))
		}
	}
	if err != nil {
		return rem, fmt.Errorf("perftest: exchanging report iterations: %w", err)
	}

	doubles := []struct{ l, r *float64 }{
		{&local.BWPeak, &rem.BWPeak},
		{&local.BWAvg, &rem.BWAvg},
		{&local.MsgRate, &rem.MsgRate},
	}
	if perPort {
		doubles = append(doubles,
			struct{ l, r *float64 }{&local.BWAvgP1, &rem.BWAvgP1},
			struct{ l, r *float64 }{&local.MsgRateP1, &rem.MsgRateP1},
			struct{ l, r *float64 }{&local.BWAvgP2, &rem.BWAvgP2},
			struct{ l, r *float64 }{&local.MsgRateP2, &rem.MsgRateP2},
		)
	}
	for _, d := range doubles {
		b, err := c.Exchange(f64(*d.l))
		if err != nil {
			return rem, fmt.Errorf("perftest: exchanging report: %w", err)
		}
		*d.r = math.Float64frombits(binary.BigEndian.Uint64(b))
	}
	return rem, nil
}

// Add is what print_full_bw_report does with a bidirectional run's two
// reports: it prints the sum of the local and the remote rates, with the
// local size and iterations.
func (r BWReport) Add(o BWReport) BWReport {
	r.BWPeak += o.BWPeak
	r.BWAvg += o.BWAvg
	r.MsgRate += o.MsgRate
	r.BWAvgP1 += o.BWAvgP1
	r.MsgRateP1 += o.MsgRateP1
	r.BWAvgP2 += o.BWAvgP2
	r.MsgRateP2 += o.MsgRateP2
	return r
}
