package perftest

import (
	"fmt"
	"io"
)

// The texts of perftest_parameters.h. The header strings changed from
// "MB/sec" to "MiB/sec" in perftest 6.23 (2024); these are the current ones.
const (
	// ResultLine is RESULT_LINE, the dashed rule around every table.
	ResultLine = "---------------------------------------------------------------------------------------\n"

	resultFmt    = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
	resultFmtG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
)

// FormatBWHeader prints the bandwidth table head as the bw tests' main()
// does before running: RESULT_LINE, then RESULT_FMT (MiB/s, the default) or
// RESULT_FMT_G (--report_gbits), then RESULT_EXT's newline.
func FormatBWHeader(w io.Writer, unit Unit) error {
	h := resultFmt
	if unit == UnitGbps {
		h = resultFmtG
	}
	_, err := io.WriteString(w, ResultLine+h+"\n")
	return err
}

// FormatBWRow prints one result line as print_full_bw_report does, with
// REPORT_FMT
//
//	" %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf"
//
// or, when the average is below 0.1 Gb/s in Gb/s mode, with the more
// precise REPORT_FMT_EXT
//
//	" %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf"
//
// followed by REPORT_EXT's newline. For a bidirectional run pass
// local.Add(remote).
func FormatBWRow(w io.Writer, r BWReport, unit Unit) error {
	var s string
	if r.BWAvg < 0.1 && unit == UnitGbps {
		s = fmt.Sprintf(" %-7d    %d           %s            %s            %s\n",
			r.Size, r.Iters, cFloat(r.BWPeak, 7, 6, true), cFloat(r.BWAvg, 7, 6, true), cFloat(r.MsgRate, 7, 6, true))
	} else {
		s = fmt.Sprintf(" %-7d    %-10d       %s            %s\t\t     %s\n",
			r.Size, r.Iters, cFloat(r.BWPeak, 7, 2, true), cFloat(r.BWAvg, 7, 2, true), cFloat(r.MsgRate, 7, 6, true))
	}
	_, err := io.WriteString(w, s)
	return err
}

// FormatLatHeader prints the latency table head as the lat tests' main()
// does: RESULT_LINE, RESULT_FMT_LAT (which ends in a space), newline.
func FormatLatHeader(w io.Writer) error {
	_, err := io.WriteString(w, ResultLine+resultFmtLat+"\n")
	return err
}

// FormatLatRow prints one latency line as print_report_lat does, with
// REPORT_FMT_LAT
//
//	" %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
//
// and a newline; iters is the iteration count (-n), one more than the
// number of samples.
func FormatLatRow(w io.Writer, size, iters uint64, st LatStats) error {
	f := func(v float64) string { return cFloat(v, 7, 2, true) }
	s := fmt.Sprintf(" %-7d %d          %s        %s      %s  \t       %s     \t%s\t\t%s \t\t%s\n",
		size, iters, f(st.Min), f(st.Max), f(st.Typical), f(st.Avg), f(st.Stdev), f(st.P99), f(st.P999))
	_, err := io.WriteString(w, s)
	return err
}

// FormatResultLine prints the closing RESULT_LINE of a table.
func FormatResultLine(w io.Writer) error {
	_, err := io.WriteString(w, ResultLine)
	return err
}
