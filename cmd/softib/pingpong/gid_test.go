package pingpong

import "testing"

// Known answers of glibc's inet_ntop(AF_INET6), the function the C programs
// print GIDs with. The IPv4-compatible cases are where Go's own formatting
// would differ.
func TestFormatGID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"::", "::"},
		{"fe80::1", "fe80::1"},
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1"},
		{"::10.0.0.1", "::10.0.0.1"}, // Go's netip prints ::a00:1
		{"::1", "::1"},
		{"::2", "::2"}, // glibc has no BIND-style "::0.0.0.2"
		{"1::", "1::"},
		{"1:0:0:1:0:0:0:1", "1:0:0:1::1"},   // longest run wins
		{"1:0:0:2:0:0:3:4", "1::2:0:0:3:4"}, // first run wins a tie
		{"1:2:3:4:5:6:0:8", "1:2:3:4:5:6:0:8"},
		{"fe80::202:c9ff:fe00:1", "fe80::202:c9ff:fe00:1"},
		{"::ffff:0:0", "::ffff:0.0.0.0"},
		{"::ffff:0:1", "::ffff:0.0.0.1"},
		{"::1:0:0", "::1:0:0"},
		{"::1:0:0:0", "::1:0:0:0"},
		{"2001:db8::", "2001:db8::"},
		{"::a:0:0", "::a:0:0"},
		{"fe80:0:0:0:abcd:ef01:2345:6789", "fe80::abcd:ef01:2345:6789"},
	} {
		if got := FormatGID(gid(c.in)); got != c.want {
			t.Errorf("FormatGID(%s) = %q, want %q", c.in, got, c.want)
		}
	}
}
