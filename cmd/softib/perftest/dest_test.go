package perftest

import (
	"strings"
	"testing"
)

// The expected messages below are what perftest's sprintf with
// KEY_PRINT_FMT* produces for these values (field widths 4,4,6,6,8,16
// [,16][,16x2],8), each followed by the NUL that perftest writes too.

var gidV4 = [16]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2}
var gidV6 = [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55}

func TestDestKnownAnswers(t *testing.T) {
	cases := []struct {
		name string
		d    Dest
		f    WireFormat
		want string
	}{
		{
			"plain",
			Dest{QPN: 0x11, PSN: 0xa1b2c3, RKey: 0x1234abcd, VAddr: 0x7f0012345000},
			WireFormat{},
			"0000:0000:000011:a1b2c3:1234abcd:00007f0012345000:00000000",
		},
		{
			"plain-max",
			Dest{LID: 0x1a, OutReads: 0x10, QPN: 0xabcdef, PSN: 1, RKey: 0xdeadbeef, VAddr: ^uint64(0), SRQN: 0x42},
			WireFormat{},
			"001a:0010:abcdef:000001:deadbeef:ffffffffffffffff:00000042",
		},
		{
			"gid",
			Dest{OutReads: 16, QPN: 0x11, PSN: 0xa1b2c3, RKey: 0x1234abcd, VAddr: 0x7f0012345000, GID: gidV4},
			WireFormat{GID: true},
			"0000:0010:000011:a1b2c3:1234abcd:00007f0012345000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:01:02:00000000:",
		},
		{
			"dv",
			Dest{LID: 1, OutReads: 2, QPN: 3, PSN: 4, RKey: 5, VAddr: 6, TailMarkersVAddr: 7, SRQN: 8},
			WireFormat{DataValidation: true},
			"0001:0002:000003:000004:00000005:0000000000000006:0000000000000007:00000008",
		},
		{
			"gid-dv",
			Dest{LID: 1, OutReads: 2, QPN: 3, PSN: 4, RKey: 5, VAddr: 6, TailMarkersVAddr: 7, GID: gidV6, SRQN: 8},
			WireFormat{GID: true, DataValidation: true},
			"0001:0002:000003:000004:00000005:0000000000000006:0000000000000007:fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:55:00000008:",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.d.Encode(c.f)
			if err != nil {
				t.Fatal(err)
			}
			want := c.want + "\x00"
			if string(got) != want {
				t.Errorf("Encode:\n got %q\nwant %q", got, want)
			}
			if len(got) != c.f.Size() {
				t.Errorf("len %d, Size() %d", len(got), c.f.Size())
			}
			back, err := DecodeDest([]byte(want), c.f)
			if err != nil {
				t.Fatal(err)
			}
			if back != c.d {
				t.Errorf("Decode: got %+v, want %+v", back, c.d)
			}
		})
	}
}

func TestDestSizes(t *testing.T) {
	// KEY_MSG_SIZE, KEY_MSG_SIZE_GID, KEY_MSG_SIZE_DV, KEY_MSG_SIZE_GID_DV.
	for f, want := range map[WireFormat]int{{}: 59, {GID: true}: 108, {DataValidation: true}: 76, {GID: true, DataValidation: true}: 125} {
		if got := f.Size(); got != want {
			t.Errorf("%+v: Size %d, want %d", f, got, want)
		}
	}
}

func TestDestEncodeRejectsWideFields(t *testing.T) {
	if _, err := (Dest{QPN: 1 << 24}).Encode(WireFormat{}); err == nil {
		t.Error("25-bit QPN accepted")
	}
	if _, err := (Dest{PSN: 1 << 24}).Encode(WireFormat{}); err == nil {
		t.Error("25-bit PSN accepted")
	}
}

func TestDecodeDestErrors(t *testing.T) {
	good := "0000:0000:000011:a1b2c3:1234abcd:00007f0012345000:00000000\x00"
	bad := []struct {
		name string
		msg  string
		f    WireFormat
	}{
		{"short", good[:58], WireFormat{}},
		{"gid format", good, WireFormat{GID: true}},
		{"not hex", strings.Replace(good, "a1b2c3", "a1b2cz", 1), WireFormat{}},
		{"missing field", "0000:0000:000011:a1b2c3:1234abcd:00007f0012345000000000000\x00", WireFormat{}},
	}
	for _, b := range bad {
		if _, err := DecodeDest([]byte(b.msg), b.f); err == nil {
			t.Errorf("%s: accepted %q", b.name, b.msg)
		}
	}
}

func TestGIDCompatibility(t *testing.T) {
	mcast := [16]byte{0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3}
	for _, c := range []struct {
		gid  [16]byte
		ipv4 bool
	}{{gidV4, true}, {gidV6, false}, {mcast, true}, {[16]byte{}, false}} {
		if got := GIDIsIPv4(c.gid); got != c.ipv4 {
			t.Errorf("GIDIsIPv4(%x) = %v", c.gid, got)
		}
	}
	if err := CheckGIDCompatibility(Dest{GID: gidV4}, Dest{GID: gidV6}); err == nil {
		t.Error("IPv4 and IPv6 GIDs accepted together")
	}
	if err := CheckGIDCompatibility(Dest{GID: gidV4}, Dest{GID: mcast}); err != nil {
		t.Error(err)
	}
}
