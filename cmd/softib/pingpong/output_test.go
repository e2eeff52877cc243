package pingpong

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestAddressLines(t *testing.T) {
	d := Dest{LID: 1, QPN: 0x11, PSN: 0xabcdef, GID: gid("fe80::1")}
	for _, c := range []struct {
		got, want string
	}{
		{LocalAddressLine(RC, d), "  local address:  LID 0x0001, QPN 0x000011, PSN 0xabcdef, GID fe80::1\n"},
		{LocalAddressLine(UC, d), "  local address:  LID 0x0001, QPN 0x000011, PSN 0xabcdef, GID fe80::1\n"},
		// ud_pingpong.c's local line has "PSN 0x%06x: GID".
		{LocalAddressLine(UD, d), "  local address:  LID 0x0001, QPN 0x000011, PSN 0xabcdef: GID fe80::1\n"},
		{RemoteAddressLine(d), "  remote address: LID 0x0001, QPN 0x000011, PSN 0xabcdef, GID fe80::1\n"},
		{RemoteAddressLine(Dest{QPN: 0xd2a, PSN: 0x5f3c1b, GID: gid("::ffff:10.0.0.1")}),
			"  remote address: LID 0x0000, QPN 0x000d2a, PSN 0x5f3c1b, GID ::ffff:10.0.0.1\n"},
		{LocalAddressLine(RC, Dest{LID: 0x12, QPN: 0x4a1}),
			"  local address:  LID 0x0012, QPN 0x0004a1, PSN 0x000000, GID ::\n"},
	} {
		if c.got != c.want {
			t.Errorf("got  %q\nwant %q", c.got, c.want)
		}
	}
}

// Known answers printed by the C programs' own printf statements, compiled
// with gcc on x86-64 glibc, for the same microsecond counts.
func TestResultLines(t *testing.T) {
	for _, c := range []struct {
		size, iters uint32
		elapsed     time.Duration
		want        string
	}{
		{4096, 1000, 123456 * time.Microsecond,
			"8192000 bytes in 0.12 seconds = 530.84 Mbit/sec\n" +
				"1000 iters in 0.12 seconds = 123.46 usec/iter\n"},
		// gettimeofday has microseconds: the rest is dropped.
		{4096, 1000, 123456789 * time.Nanosecond,
			"8192000 bytes in 0.12 seconds = 530.84 Mbit/sec\n" +
				"1000 iters in 0.12 seconds = 123.46 usec/iter\n"},
		{65536, 12345, 7654321 * time.Microsecond,
			"1618083840 bytes in 7.65 seconds = 1691.16 Mbit/sec\n" +
				"12345 iters in 7.65 seconds = 620.03 usec/iter\n"},
		{1024, 7, 3 * time.Microsecond,
			"14336 bytes in 0.00 seconds = 38229.33 Mbit/sec\n" +
				"7 iters in 0.00 seconds = 0.43 usec/iter\n"},
		{4096, 1000, time.Microsecond,
			"8192000 bytes in 0.00 seconds = 65536000.00 Mbit/sec\n" +
				"1000 iters in 0.00 seconds = 0.00 usec/iter\n"},
		// The float: 16777217 µs is 16777216 in single precision, and the
		// division by iters is single precision too (double would be .33).
		{1, 3, 16777217 * time.Microsecond,
			"6 bytes in 16.78 seconds = 0.00 Mbit/sec\n" +
				"3 iters in 16.78 seconds = 5592405.50 usec/iter\n"},
		{65536, 100000, 999999999 * time.Microsecond,
			"13107200000 bytes in 1000.00 seconds = 104.86 Mbit/sec\n" +
				"100000 iters in 1000.00 seconds = 10000.00 usec/iter\n"},
		// iters is unsigned but printed with %d.
		{1, 4294967295, time.Second,
			"8589934590 bytes in 1.00 seconds = 68719.48 Mbit/sec\n" +
				"-1 iters in 1.00 seconds = 0.00 usec/iter\n"},
		{4096, 3000000000, 2 * time.Second,
			"24576000000000 bytes in 2.00 seconds = 98304000.00 Mbit/sec\n" +
				"-1294967296 iters in 2.00 seconds = 0.00 usec/iter\n"},
		// Division by zero, spelled as glibc spells it.
		{4096, 1000, 0,
			"8192000 bytes in 0.00 seconds = inf Mbit/sec\n" +
				"1000 iters in 0.00 seconds = 0.00 usec/iter\n"},
		{4096, 0, 5 * time.Microsecond,
			"0 bytes in 0.00 seconds = 0.00 Mbit/sec\n" +
				"0 iters in 0.00 seconds = inf usec/iter\n"},
	} {
		if got := ResultLines(c.size, c.iters, c.elapsed); got != c.want {
			t.Errorf("ResultLines(%d, %d, %v) =\n%s\nwant\n%s", c.size, c.iters, c.elapsed, got, c.want)
		}
	}
}

// 0/0 gives the hardware's default NaN; x86's has the sign bit set, which
// glibc prints as "-nan".
func TestResultLinesNaN(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "386" {
		t.Skip("known answer recorded on x86")
	}
	want := "0 bytes in 0.00 seconds = -nan Mbit/sec\n0 iters in 0.00 seconds = -nan usec/iter\n"
	if got := ResultLines(4096, 0, 0); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestTimestampLines(t *testing.T) {
	want := "Max receive completion clock cycles = 10\n" +
		"Min receive completion clock cycles = 2\n" +
		"Average receive completion clock cycles = 2.333333\n"
	if got := TimestampLines(10, 2, 7, 3); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := TimestampLines(0, 0, 123456789012, 1); !strings.HasSuffix(got, " = 123456789012.000000\n") {
		t.Errorf("got %q", got)
	}
}

func TestInvalidPageLine(t *testing.T) {
	if got, want := InvalidPageLine(3), "invalid data in page 3\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Spot checks of the usage texts (compared in full against the C programs'
// usage() output when this package was written).
func TestUsage(t *testing.T) {
	rc := Usage(RC, "ibv_rc_pingpong")
	for _, line := range []string{
		"Usage:\n  ibv_rc_pingpong            start a server and wait for connection\n" +
			"  ibv_rc_pingpong <host>     connect to server at <host>\n\nOptions:\n",
		"  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n",
		"  -m, --mtu=<size>       path MTU (default 1024)\n",
		"  -o, --odp\t\t    use on demand paging\n",
		"  -c, --chk\t            validate received buffer\n",
		"                            memory on CoCo guests\n",
	} {
		if !strings.Contains(rc, line) {
			t.Errorf("rc usage lacks %q", line)
		}
	}
	if !strings.HasSuffix(Usage(UC, "x"), "  -g, --gid-idx=<gid index> local port gid index\n"+
		"  -c, --chk              validate received buffer\n") {
		t.Error("uc usage tail wrong")
	}
	ud := Usage(UD, "ibv_ud_pingpong")
	if !strings.Contains(ud, "(default 2048)\n") || strings.Contains(ud, "--mtu") ||
		!strings.Contains(ud, "  -l, --sl=<SL>          send messages with service level <SL> (default 0)\n") {
		t.Errorf("ud usage wrong:\n%s", ud)
	}
	for _, tr := range []Transport{RC, UC, UD} {
		n := strings.Count(Usage(tr, "p"), "\n")
		want := map[Transport]int{RC: 24, UC: 16, UD: 15}[tr]
		if n != want {
			t.Errorf("%v usage has %d lines, want %d", tr, n, want)
		}
	}
}
