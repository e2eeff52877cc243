package pingpong

import (
	"net/netip"
	"strings"
	"testing"
)

func gid(s string) [16]byte { return netip.MustParseAddr(s).As16() }

// Known answers worked out by hand from the C format "%04x:%06x:%06x:%s"
// and gid_to_wire_gid (each 32-bit word htobe32'd and printed with %08x,
// i.e. the GID bytes in order).
var wireCases = []struct {
	d    Dest
	wire string
}{
	{Dest{}, "0000:000000:000000:00000000000000000000000000000000"},
	{Dest{LID: 1, QPN: 0x11, PSN: 0xabcdef, GID: gid("fe80::1")},
		"0001:000011:abcdef:fe800000000000000000000000000001"},
	{Dest{LID: 0, QPN: 0x000d2a, PSN: 0x5f3c1b, GID: gid("::ffff:10.0.0.1")},
		"0000:000d2a:5f3c1b:00000000000000000000ffff0a000001"},
	{Dest{LID: 0xffff, QPN: 0xffffff, PSN: 0xffffff, GID: gid("fe80::202:c9ff:fe00:1")},
		"ffff:ffffff:ffffff:fe800000000000000202c9fffe000001"},
	{Dest{LID: 0x1a, QPN: 0x123456, PSN: 0x1, GID: gid("2001:db8:1:2:3:4:5:6")},
		"001a:123456:000001:20010db8000100020003000400050006"},
}

func TestWire(t *testing.T) {
	for _, c := range wireCases {
		if got := c.d.Wire(); got != c.wire {
			t.Errorf("%+v.Wire() = %q, want %q", c.d, got, c.wire)
		}
		if len(c.wire)+1 != MsgSize {
			t.Fatalf("MsgSize = %d, want %d", MsgSize, len(c.wire)+1)
		}
	}
}

func TestMsgSize(t *testing.T) {
	// sizeof "0000:000000:000000:00000000000000000000000000000000" in C.
	if MsgSize != 52 {
		t.Errorf("MsgSize = %d, want 52", MsgSize)
	}
	m := Dest{LID: 1}.message()
	if len(m) != 52 || m[51] != 0 {
		t.Errorf("message() = %q, want 51 characters and a NUL", m)
	}
}

func TestWireMasks24Bits(t *testing.T) {
	d := Dest{QPN: 0x1abcdef, PSN: 0xff000001}
	if got, want := d.Wire(), "0000:abcdef:000001:00000000000000000000000000000000"; got != want {
		t.Errorf("Wire() = %q, want %q", got, want)
	}
}

func TestParseDest(t *testing.T) {
	for _, c := range wireCases {
		for _, in := range []string{c.wire, c.wire + "\x00", strings.ToUpper(c.wire), c.wire + "\x00garbage"} {
			got, err := ParseDest(in)
			if err != nil || got != c.d {
				t.Errorf("ParseDest(%q) = %+v, %v; want %+v", in, got, err, c.d)
			}
		}
	}
}

func TestParseDestRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"done",
		"0001:000011:abcdef:fe80000000000000000000000000001",   // GID one digit short
		"0001:000011:abcdef:fe8000000000000000000000000000011", // one digit long
		"0001-000011:abcdef:fe800000000000000000000000000001",
		"0001:00001g:abcdef:fe800000000000000000000000000001",
		"0001:000011:abcdef:fe80000000000000000000000000000x",
		"+001:000011:abcdef:fe800000000000000000000000000001",
		"0001:0x0011:abcdef:fe800000000000000000000000000001",
	} {
		if d, err := ParseDest(in); err == nil {
			t.Errorf("ParseDest(%q) = %+v, want an error", in, d)
		}
	}
}

func TestIsGlobal(t *testing.T) {
	for _, c := range []struct {
		gid  string
		want bool
	}{
		{"::", false},
		{"fe80::", false}, // subnet prefix only: the C test looks at the interface ID
		{"fe80::1", true},
		{"::ffff:10.0.0.1", true}, // RoCE v2 IPv4 GID
		{"::1:0:0:0", true},
	} {
		if got := (Dest{GID: gid(c.gid)}).IsGlobal(); got != c.want {
			t.Errorf("IsGlobal(%s) = %v, want %v", c.gid, got, c.want)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	for _, c := range wireCases {
		f.Add(c.wire)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDest(s)
		if err != nil {
			return
		}
		if d2, err := ParseDest(d.Wire()); err != nil || d2 != d {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", s, d2, err, d)
		}
	})
}
