package perftest

import (
	"encoding/json"
	"io"
)

// The JSON forms are softib's own, not perftest's --out_json (which writes
// one pretty-printed document per run to a file): one object per line, so
// that a -a run streams one line per size and tools can read it line by
// line. Bandwidth is always in Gb/s here, whatever the printed unit.

type bwJSON struct {
	Test        string  `json:"test"`
	Transport   string  `json:"transport"`
	Bytes       uint64  `json:"bytes"`
	Iterations  uint64  `json:"iterations"`
	BWPeakGbps  float64 `json:"bw_peak_gbps"`
	BWAvgGbps   float64 `json:"bw_avg_gbps"`
	MsgRateMpps float64 `json:"msg_rate_mpps"`
}

type latJSON struct {
	Test       string  `json:"test"`
	Transport  string  `json:"transport"`
	Bytes      uint64  `json:"bytes"`
	Iterations uint64  `json:"iterations"`
	TMinUs     float64 `json:"t_min_us"`
	TMaxUs     float64 `json:"t_max_us"`
	TTypicalUs float64 `json:"t_typical_us"`
	TAvgUs     float64 `json:"t_avg_us"`
	TStdevUs   float64 `json:"t_stdev_us"`
	TP99Us     float64 `json:"t_p99_us"`
	TP999Us    float64 `json:"t_p999_us"`
}

// ToGbps converts a bandwidth in unit to Gb/s.
func ToGbps(v float64, unit Unit) float64 {
	if unit == UnitGbps {
		return v
	}
	return v * float64(UnitMiBps.factor()) / float64(UnitGbps.factor())
}

// WriteBWJSON writes r, whose rates are in unit, as one JSON line, e.g.
//
//	{"test":"ib_write_bw","transport":"RC","bytes":65536,"iterations":5000,"bw_peak_gbps":97.1,"bw_avg_gbps":96.5,"msg_rate_mpps":0.184}
//
// Infinite or NaN rates (a run that measured no time) cannot be encoded in
// JSON and make it fail.
func WriteBWJSON(w io.Writer, t Test, conn ConnType, r BWReport, unit Unit) error {
	return writeJSONLine(w, bwJSON{
		Test:        t.Name(),
		Transport:   conn.String(),
		Bytes:       r.Size,
		Iterations:  r.Iters,
		BWPeakGbps:  ToGbps(r.BWPeak, unit),
		BWAvgGbps:   ToGbps(r.BWAvg, unit),
		MsgRateMpps: r.MsgRate,
	})
}

// WriteLatJSON writes one latency result as one JSON line, e.g.
//
//	{"test":"ib_send_lat","transport":"UD","bytes":2,"iterations":1000,"t_min_us":1.02,...,"t_p999_us":3.9}
func WriteLatJSON(w io.Writer, t Test, conn ConnType, size, iters uint64, st LatStats) error {
	return writeJSONLine(w, latJSON{
		Test:       t.Name(),
		Transport:  conn.String(),
		Bytes:      size,
		Iterations: iters,
		TMinUs:     st.Min,
		TMaxUs:     st.Max,
		TTypicalUs: st.Typical,
		TAvgUs:     st.Avg,
		TStdevUs:   st.Stdev,
		TP99Us:     st.P99,
		TP999Us:    st.P999,
	})
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
