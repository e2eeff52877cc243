package perftest

import (
	"math"
	"strings"
	"testing"
)

// The expected lines were produced by glibc printf with perftest's own
// format macros (REPORT_FMT, REPORT_FMT_EXT, REPORT_FMT_LAT, BASIC_ADDR_FMT,
// READ_FMT, RDMA_FMT, XRC_FMT, PERF_GID_FMT) and the same arguments.

func render(t *testing.T, f func(b *strings.Builder) error) string {
	t.Helper()
	var b strings.Builder
	if err := f(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestFormatBWHeader(t *testing.T) {
	rule := "---------------------------------------------------------------------------------------\n"
	got := render(t, func(b *strings.Builder) error { return FormatBWHeader(b, UnitMiBps) })
	want := rule + " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
	if got != want {
		t.Errorf("MiB header:\n got %q\nwant %q", got, want)
	}
	got = render(t, func(b *strings.Builder) error { return FormatBWHeader(b, UnitGbps) })
	want = rule + " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	if got != want {
		t.Errorf("Gb header:\n got %q\nwant %q", got, want)
	}
}

func TestFormatBWRow(t *testing.T) {
	negNaN := math.Copysign(math.NaN(), -1)
	cases := []struct {
		name string
		r    BWReport
		unit Unit
		want string
	}{
		{"MiB", BWReport{Size: 65536, Iters: 5000, BWPeak: 11234.56789, BWAvg: 11200.125, MsgRate: 0.179202}, UnitMiBps,
			" 65536      5000             11234.57            11200.12\t\t     0.179202\n"},
		{"Gb small uses REPORT_FMT_EXT", BWReport{Size: 2, Iters: 5000, BWPeak: 0.0512345678, BWAvg: 0.0498765432, MsgRate: 3.117}, UnitGbps,
			" 2          5000           0.051235            0.049877            3.117000\n"},
		{"inf and nan", BWReport{Size: 8388608, Iters: 20000, BWPeak: math.Inf(1), BWAvg: negNaN, MsgRate: 123456.5}, UnitGbps,
			" 8388608    20000            inf                -nan   \t\t     123456.500000\n"},
	}
	for _, c := range cases {
		got := render(t, func(b *strings.Builder) error { return FormatBWRow(b, c.r, c.unit) })
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestFormatLat(t *testing.T) {
	got := render(t, func(b *strings.Builder) error { return FormatLatHeader(b) })
	want := "---------------------------------------------------------------------------------------\n" +
		" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	if got != want {
		t.Errorf("header:\n got %q\nwant %q", got, want)
	}
	st := LatStats{Min: 1.23, Max: 45.678, Typical: 1.5, Avg: 1.6049, Stdev: 0, P99: 2.345, P999: 10}
	got = render(t, func(b *strings.Builder) error { return FormatLatRow(b, 2, 1000, st) })
	want = " 2       1000          1.23           45.68        1.50     \t       1.60        \t0.00   \t\t2.35    \t\t10.00  \n"
	if got != want {
		t.Errorf("row:\n got %q\nwant %q", got, want)
	}
}

func TestFormatDest(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0xa1b2c3, RKey: 0x1234abcd, VAddr: 0x7f0012345000, GID: gidV4}
	got := render(t, func(b *strings.Builder) error {
		return FormatDest(b, Local, d, DestPrint{Verb: VerbWrite, ShowGID: true})
	})
	want := " local address: LID 0000 QPN 0x0011 PSN 0xa1b2c3 RKey 0x1234abcd VAddr 0x007f0012345000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:02\n"
	if got != want {
		t.Errorf("write/GID:\n got %q\nwant %q", got, want)
	}

	d = Dest{LID: 1, QPN: 3, PSN: 1, OutReads: 16, RKey: 0x1fff, SRQN: 5}
	got = render(t, func(b *strings.Builder) error {
		return FormatDest(b, Remote, d, DestPrint{Verb: VerbRead, ConnType: ConnXRC})
	})
	want = " remote address: LID 0x01 QPN 0x0003 PSN 0x0001 OUT 0x10 RKey 0x001fff VAddr 0000000000000000 SRQn 0x000005\n"
	if got != want {
		t.Errorf("read/XRC:\n got %q\nwant %q", got, want)
	}

	// Send and atomic tests print neither keys nor addresses.
	got = render(t, func(b *strings.Builder) error {
		return FormatDest(b, Local, Dest{LID: 0x2a, QPN: 0x123, PSN: 0x456}, DestPrint{Verb: VerbSend})
	})
	want = " local address: LID 0x2a QPN 0x0123 PSN 0x0456\n"
	if got != want {
		t.Errorf("send:\n got %q\nwant %q", got, want)
	}
}

func TestFormatTestInfo(t *testing.T) {
	ti := TestInfo{
		Test: WriteBW, Device: "softib0", NumQPs: 1, Transport: "IB", ConnType: ConnRC,
		HaveRO: true, HaveTDAPI: true, Client: true, TxDepth: 128, CQMod: 1, CQEPoll: 16,
		MTUBytes: 4096, LinkType: "Ethernet", GIDIndex: 3, GIDIndex2: -1, NUMANode: -1,
	}
	got := render(t, func(b *strings.Builder) error { return FormatTestInfo(b, ti) })
	want := ResultLine +
		"                    RDMA_Write BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : softib0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: ON\t\tLock-free      : OFF\n" +
		" ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF\n" +
		" TX depth        : 128\n" +
		" CQ Moderation   : 1\n" +
		" CQE Poll Batch  : 16\n" +
		" Mtu             : 4096[B]\n" +
		" Link type       : Ethernet\n" +
		" GID index       : 3\n" +
		" Max inline data : 0[B]\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		ResultLine
	if got != want {
		t.Errorf("write_bw client:\n got %q\nwant %q", got, want)
	}

	// A send latency server on IB, built without RO and TD support.
	ti = TestInfo{
		Test: SendLat, Device: "softib0", NumQPs: 1, Transport: "IB", ConnType: ConnUD,
		RxDepth: 512, MTUBytes: 2048, LinkType: "IB", GIDIndex: -1, GIDIndex2: -1,
		InlineSize: 236, NUMANode: 0,
	}
	got = render(t, func(b *strings.Builder) error { return FormatTestInfo(b, ti) })
	want = ResultLine +
		"                    Send Latency Test\n" +
		" Dual-port       : OFF\t\tDevice         : softib0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : UD\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: Unsupported\t\tLock-free\t: Unsupported\n" +
		" ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF\n" +
		" RX depth        : 512\n" +
		" Mtu             : 2048[B]\n" +
		" Link type       : IB\n" +
		" Max inline data : 236[B]\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		" NUMA node       : 0\n" +
		ResultLine
	if got != want {
		t.Errorf("send_lat server:\n got %q\nwant %q", got, want)
	}

	// Atomic bidirectional: atomic type in the title, outstanding reads.
	ti = TestInfo{
		Test: AtomicBW, AtomicType: AtomicFetchAndAdd, Duplex: true, Device: "d", NumQPs: 2,
		Transport: "IB", HaveTDAPI: true, TxDepth: 128, CQMod: 100, DynamicCQE: true,
		MTUBytes: 1024, LinkType: "IB", GIDIndex: -1, OutReads: 16, NUMANode: -1,
	}
	got = render(t, func(b *strings.Builder) error { return FormatTestInfo(b, ti) })
	if !strings.Contains(got, "                    Atomic FETCH_AND_ADD Bidirectional BW Test\n") ||
		!strings.Contains(got, " PCIe relax order: Unsupported\t\tLock-free      : OFF\n") ||
		!strings.Contains(got, " TX depth        : 128\n") ||
		!strings.Contains(got, " CQE Poll Batch  : Dynamic\n") ||
		!strings.Contains(got, " Outstand reads  : 16\n") {
		t.Errorf("atomic bidirectional banner:\n%s", got)
	}
}

func TestCAltHex(t *testing.T) {
	for _, c := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {1, 4, "0x01"}, {0x11, 6, "0x0011"}, {0x1234, 8, "0x001234"}, {0, 16, "0000000000000000"},
		{0x7f0012345000, 16, "0x007f0012345000"}, {0xabcdef, 4, "0xabcdef"}} {
		if got := cAltHex(c.v, c.width); got != c.want {
			t.Errorf("cAltHex(%#x, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
}
