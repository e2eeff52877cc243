package perftest

import (
	"math"
	"strings"
	"testing"
)

func TestWriteBWJSON(t *testing.T) {
	// 12500 MiB/s is 104.8576 Gb/s: 12500 * 2^20 * 8 / 10^9.
	r := BWReport{Size: 65536, Iters: 5000, BWPeak: 12500, BWAvg: 11920.928955078125, MsgRate: 0.190735}
	got := render(t, func(b *strings.Builder) error { return WriteBWJSON(b, WriteBW, ConnRC, r, UnitMiBps) })
	want := `{"test":"ib_write_bw","transport":"RC","bytes":65536,"iterations":5000,"bw_peak_gbps":104.8576,"bw_avg_gbps":100,"msg_rate_mpps":0.190735}` + "\n"
	if got != want {
		t.Errorf("MiB:\n got %s\nwant %s", got, want)
	}
	r = BWReport{Size: 2, Iters: 100, BWPeak: 0.5, BWAvg: 0.25, MsgRate: 15.625}
	got = render(t, func(b *strings.Builder) error { return WriteBWJSON(b, SendBW, ConnUD, r, UnitGbps) })
	want = `{"test":"ib_send_bw","transport":"UD","bytes":2,"iterations":100,"bw_peak_gbps":0.5,"bw_avg_gbps":0.25,"msg_rate_mpps":15.625}` + "\n"
	if got != want {
		t.Errorf("Gb:\n got %s\nwant %s", got, want)
	}
	r.BWPeak = math.Inf(1)
	var b strings.Builder
	if err := WriteBWJSON(&b, SendBW, ConnUD, r, UnitGbps); err == nil {
		t.Error("infinite rate encoded")
	}
}

func TestWriteLatJSON(t *testing.T) {
	st := LatStats{Min: 1.02, Max: 5.5, Typical: 1.1, Avg: 1.125, Stdev: 0, P99: 2.25, P999: 5}
	got := render(t, func(b *strings.Builder) error { return WriteLatJSON(b, ReadLat, ConnRC, 64, 1000, st) })
	want := `{"test":"ib_read_lat","transport":"RC","bytes":64,"iterations":1000,"t_min_us":1.02,"t_max_us":5.5,"t_typical_us":1.1,"t_avg_us":1.125,"t_stdev_us":0,"t_p99_us":2.25,"t_p999_us":5}` + "\n"
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

func TestTestNames(t *testing.T) {
	for test, name := range map[Test]string{WriteBW: "ib_write_bw", ReadBW: "ib_read_bw", SendBW: "ib_send_bw", AtomicBW: "ib_atomic_bw",
		WriteLat: "ib_write_lat", ReadLat: "ib_read_lat", SendLat: "ib_send_lat", AtomicLat: "ib_atomic_lat"} {
		if test.Name() != name {
			t.Errorf("%v: %q", test, test.Name())
		}
	}
	if WriteLat.RTTFactor() != 2 || SendLat.RTTFactor() != 2 || ReadLat.RTTFactor() != 1 || AtomicLat.RTTFactor() != 1 {
		t.Error("RTTFactor")
	}
}
