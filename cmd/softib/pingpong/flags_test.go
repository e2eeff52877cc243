package pingpong

import (
	"errors"
	"strings"
	"testing"
)

func defaults(t Transport) Flags {
	f := Flags{
		Transport: t, Port: 18515, IBPort: 1, Size: t.DefaultSize(),
		RxDepth: 500, Iters: 1000, GIDIndex: -1,
	}
	if t != UD {
		f.MTU = 1024
	}
	return f
}

func TestParseFlagsDefaults(t *testing.T) {
	for _, prog := range []string{"rc", "uc", "ud"} {
		f, err := ParseFlags(prog, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := defaults(f.Transport)
		if f != want || !f.IsServer() {
			t.Errorf("%s: ParseFlags() = %+v, want %+v", prog, f, want)
		}
	}
	if defaults(RC).Size != 4096 || defaults(UC).Size != 4096 || defaults(UD).Size != 1024 {
		t.Error("default sizes are not 4096/4096/1024")
	}
}

// Command lines as people type them, parsed as glibc getopt_long parses
// them (checked against the C option tables).
func TestParseFlagsCommandLines(t *testing.T) {
	for _, c := range []struct {
		prog string
		args string
		set  func(*Flags)
	}{
		{"ibv_rc_pingpong", "-d rxe0 -g 0", func(f *Flags) { f.IBDev, f.GIDIndex = "rxe0", 0 }},
		{"ibv_rc_pingpong", "-d rxe0 -g 0 192.168.1.10", func(f *Flags) {
			f.IBDev, f.GIDIndex, f.ServerName = "rxe0", 0, "192.168.1.10"
		}},
		{"rc", "-d mlx5_0 -i 2 -g 3 -s 1024 -n 10000 -m 4096 -r 100 -l 1 -e server", func(f *Flags) {
			f.IBDev, f.IBPort, f.GIDIndex, f.Size, f.Iters = "mlx5_0", 2, 3, 1024, 10000
			f.MTU, f.RxDepth, f.SL, f.Events, f.ServerName = 4096, 100, 1, true, "server"
		}},
		// GNU getopt permutes: options may follow the host.
		{"uc", "10.0.0.1 -g 1 -n 5", func(f *Flags) { f.ServerName, f.GIDIndex, f.Iters = "10.0.0.1", 1, 5 }},
		// Attached arguments and clusters.
		{"rc", "-p18516 -ec -s0x1000", func(f *Flags) { f.Port, f.Events, f.Check, f.Size = 18516, true, true, 4096 }},
		{"rc", "-eg0", func(f *Flags) { f.Events, f.GIDIndex = true, 0 }},
		// Long forms, with = or a separate word, and unique prefixes.
		{"rc", "--port=1 --ib-dev rxe0 --it 5 --size=64 --events --gid-idx=2", func(f *Flags) {
			f.Port, f.IBDev, f.Iters, f.Size, f.Events, f.GIDIndex = 1, "rxe0", 5, 64, true, 2
		}},
		{"ud", "--ib-port=2 --rx-depth 10 --sl 3 --chk host", func(f *Flags) {
			f.IBPort, f.RxDepth, f.SL, f.Check, f.ServerName = 2, 10, 3, true, "host"
		}},
		{"rc", "--io", func(f *Flags) { f.ImplicitODP, f.ODP = true, true }},
		{"rc", "-O -P", func(f *Flags) { f.ImplicitODP, f.ODP, f.Prefetch = true, true, true }},
		{"rc", "-o -t -N -c", func(f *Flags) { f.ODP, f.Timestamps, f.NewSend, f.Check = true, true, true, true }},
		{"rc", "--new --ts --dm", func(f *Flags) { f.NewSend, f.Timestamps, f.DM = true, true, true }},
		{"rc", "--allow --ts", func(f *Flags) { f.AllowCCUnprotected, f.Timestamps = true, true }},
		{"rc", "-j -N -t", func(f *Flags) { f.DM, f.NewSend, f.Timestamps = true, true, true }},
		{"rc", "-U", func(f *Flags) { f.AllowCCUnprotected = true }},
		// strtol(..., 0): octal and hex; a negative GID index is "none".
		{"rc", "-s 010 -g -1", func(f *Flags) { f.Size, f.GIDIndex = 8, -1 }},
		// "--" ends the options; "-" is an operand.
		{"rc", "-g 0 -- -x", func(f *Flags) { f.GIDIndex, f.ServerName = 0, "-x" }},
		{"rc", "- -g 1", func(f *Flags) { f.ServerName, f.GIDIndex = "-", 1 }},
		{"rc", "-p 0", func(f *Flags) { f.Port = 0 }},
		{"rc", "-p 65535", func(f *Flags) { f.Port = 65535 }},
		{"ud", "-s 2048", func(f *Flags) { f.Size = 2048 }},
	} {
		tr, err := ParseTransport(c.prog)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseFlags(c.prog, strings.Fields(c.args))
		want := defaults(tr)
		c.set(&want)
		if err != nil || got != want {
			t.Errorf("%s %s:\n got %+v, %v\nwant %+v", c.prog, c.args, got, err, want)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, c := range []struct {
		prog, args string
		usage      bool // the C program prints its usage
		msg        string
	}{
		{"rc", "-h", true, "invalid option -- 'h'"},
		{"rc", "--help", true, "unrecognized option '--help'"},
		{"rc", "-p", true, "option requires an argument -- 'p'"},
		{"rc", "--size", true, "option '--size' requires an argument"},
		{"rc", "--events=1", true, "option '--events' doesn't allow an argument"},
		{"rc", "--allow-cc-unprotected=", true, "doesn't allow an argument"},
		{"rc", "--i 5", true, "option '--i' is ambiguous"},
		{"rc", "--p 1", true, "ambiguous"},
		{"rc", "--s 1", true, "ambiguous"},
		{"rc", "a b", true, "more than one host"},
		{"rc", "-p 65536", true, "out of range"},
		{"rc", "-i 0", true, "out of range"},
		{"rc", "-m 1000", true, "invalid MTU 1000"},
		{"rc", "-s abc", true, "invalid number"},
		{"rc", "-s -1", true, "out of range"},
		{"uc", "-o", true, "invalid option -- 'o'"}, // rc-only options
		{"uc", "--odp", true, "unrecognized option '--odp'"},
		{"ud", "-m 1024", true, "invalid option -- 'm'"}, // ud has no -m
		{"ud", "--mtu 1024", true, "unrecognized option '--mtu'"},
		{"rc", "-o -j", false, "DM memory region can't be on demand"},
		{"rc", "-O -j", false, "DM memory region can't be on demand"},
		{"rc", "-U -o", false, "CoCo unprotected memory cannot be used with ODP"},
		{"rc", "-U -j", false, "CoCo unprotected memory cannot be used with device memory"},
		{"rc", "-P", false, "prefetch is valid only with on-demand memory region"},
	} {
		_, err := ParseFlags(c.prog, strings.Fields(c.args))
		if err == nil {
			t.Errorf("%s %s: no error", c.prog, c.args)
			continue
		}
		if errors.Is(err, ErrUsage) != c.usage || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %s: error %q (usage %v), want %q (usage %v)",
				c.prog, c.args, err, errors.Is(err, ErrUsage), c.msg, c.usage)
		}
	}
	if _, err := ParseFlags("srq", nil); err == nil {
		t.Error("ParseFlags accepted program srq")
	}
}

func TestParseTransport(t *testing.T) {
	for in, want := range map[string]Transport{
		"rc": RC, "uc": UC, "ud": UD, "ibv_rc_pingpong": RC,
		"/usr/bin/ibv_ud_pingpong": UD, "ibv_uc_pingpong": UC,
	} {
		if got, err := ParseTransport(in); err != nil || got != want {
			t.Errorf("ParseTransport(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if RC.Program() != "ibv_rc_pingpong" || UD.HopLimit() != 64 || RC.HopLimit() != 1 || UC.HopLimit() != 1 {
		t.Error("Program/HopLimit wrong")
	}
}

func TestParseCInt(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "18515": 18515, "0x4853": 0x4853, "0X10": 16, "010": 8, "-1": -1, "+7": 7, "-0x10": -16,
	} {
		if got, err := parseCInt(in); err != nil || got != want {
			t.Errorf("parseCInt(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-", "0x", "08", "1_000", "0b1", "12kb", "--1", "+-1", " 1", "99999999999999999999"} {
		if got, err := parseCInt(in); err == nil {
			t.Errorf("parseCInt(%q) = %d, want an error", in, got)
		}
	}
}

func TestMTUEnum(t *testing.T) {
	for bytes, want := range map[int]uint8{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5, 0: 0, 1500: 0, 8192: 0} {
		if got := MTUEnum(bytes); got != want {
			t.Errorf("MTUEnum(%d) = %d, want %d", bytes, got, want)
		}
	}
}
