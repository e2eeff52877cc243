package pingpong

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
)

// Flags is the parsed command line of one of the programs. Fields that a
// program lacks keep their zero value (e.g. MTU for ud, ODP for uc).
type Flags struct {
	Transport Transport

	// ServerName is the operand: empty for the server, the host to connect
	// to for the client.
	ServerName string

	Port     int    // -p, --port: TCP port of the exchange (DefaultPort)
	IBDev    string // -d, --ib-dev: device name; "" means the first device
	IBPort   int    // -i, --ib-port: HCA port, at least 1 (DefaultIBPort)
	Size     uint32 // -s, --size: message size (Transport.DefaultSize)
	MTU      int    // -m, --mtu: path MTU in bytes, rc and uc (DefaultMTU)
	RxDepth  uint32 // -r, --rx-depth: receives kept posted (DefaultRxDepth)
	Iters    uint32 // -n, --iters: messages each way (DefaultIters)
	SL       int    // -l, --sl: service level (0)
	Events   bool   // -e, --events: sleep on CQ events instead of polling
	GIDIndex int    // -g, --gid-idx: local GID index; -1 (default) for none
	Check    bool   // -c, --chk: validate the received buffer

	// rc only.
	ODP                bool // -o, --odp: on-demand paging MR (also set by -O)
	ImplicitODP        bool // -O, --iodp: implicit ODP MR
	Prefetch           bool // -P, --prefetch: prefetch the ODP MR
	Timestamps         bool // -t, --ts: completion timestamps
	DM                 bool // -j, --dm: device memory
	NewSend            bool // -N, --new_send: ibv_wr_* post-send API
	AllowCCUnprotected bool // -U, --allow-cc-unprotected: CoCo guests
}

// IsServer reports whether the program runs as the server.
func (f Flags) IsServer() bool { return f.ServerName == "" }

// ParseFlags parses args (the command line without the program name) as
// the C program named by prog would (see ParseTransport for prog), with
// GNU getopt_long syntax (see gnuArgs) and each program's defaults and
// checks from its main(). Errors after which C prints its usage wrap
// ErrUsage; the rc-only consistency checks return C's message instead.
func ParseFlags(prog string, args []string) (Flags, error) {
	t, err := ParseTransport(prog)
	if err != nil {
		return Flags{}, err
	}
	f := Flags{
		Transport: t,
		Port:      DefaultPort,
		IBPort:    DefaultIBPort,
		Size:      t.DefaultSize(),
		RxDepth:   DefaultRxDepth,
		Iters:     DefaultIters,
		GIDIndex:  -1,
	}
	if t != UD {
		f.MTU = DefaultMTU
	}

	fs := flag.NewFlagSet(t.Program(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.define(fs)
	opts, operands, err := gnuArgs(fs, args)
	if err != nil {
		return Flags{}, err
	}
	if err := fs.Parse(opts); err != nil {
		return Flags{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	switch len(operands) {
	case 0:
	case 1:
		f.ServerName = operands[0]
	default:
		return Flags{}, fmt.Errorf("%w: more than one host given", ErrUsage)
	}
	if t != UD && MTUEnum(f.MTU) == 0 {
		return Flags{}, fmt.Errorf("%w: invalid MTU %d", ErrUsage, f.MTU)
	}
	if f.ImplicitODP {
		f.ODP = true // -O is "use_odp = 1; implicit_odp = 1"
	}
	if err := f.checkRC(); err != nil {
		return Flags{}, err
	}
	return f, nil
}

// define registers the options of f.Transport's getopt_long table, each
// under its short and its long name.
func (f *Flags) define(fs *flag.FlagSet) {
	num := func(short, long string, v flag.Value) {
		fs.Var(v, short, "")
		fs.Var(v, long, "")
	}
	boolean := func(short, long string, p *bool) {
		fs.BoolVar(p, short, false, "")
		fs.BoolVar(p, long, false, "")
	}
	const maxInt = math.MaxInt32 // C int
	num("p", "port", numFlag[int]{&f.Port, 0, 65535})
	fs.StringVar(&f.IBDev, "d", "", "")
	fs.StringVar(&f.IBDev, "ib-dev", "", "")
	num("i", "ib-port", numFlag[int]{&f.IBPort, 1, maxInt})
	num("s", "size", numFlag[uint32]{&f.Size, 0, math.MaxUint32})
	if f.Transport != UD {
		num("m", "mtu", numFlag[int]{&f.MTU, math.MinInt32, maxInt})
	}
	num("r", "rx-depth", numFlag[uint32]{&f.RxDepth, 0, math.MaxUint32})
	num("n", "iters", numFlag[uint32]{&f.Iters, 0, math.MaxUint32})
	num("l", "sl", numFlag[int]{&f.SL, math.MinInt32, maxInt})
	boolean("e", "events", &f.Events)
	num("g", "gid-idx", numFlag[int]{&f.GIDIndex, math.MinInt32, maxInt})
	boolean("c", "chk", &f.Check)
	if f.Transport != RC {
		return
	}
	boolean("o", "odp", &f.ODP)
	boolean("O", "iodp", &f.ImplicitODP)
	boolean("P", "prefetch", &f.Prefetch)
	boolean("t", "ts", &f.Timestamps)
	boolean("j", "dm", &f.DM)
	boolean("N", "new_send", &f.NewSend)
	boolean("U", "allow-cc-unprotected", &f.AllowCCUnprotected)
}

// checkRC makes rc_pingpong's checks of incompatible options, in its order
// and with its messages.
func (f Flags) checkRC() error {
	switch {
	case f.ODP && f.DM:
		return errors.New("DM memory region can't be on demand")
	case f.AllowCCUnprotected && f.ODP:
		return errors.New("CoCo unprotected memory cannot be used with ODP")
	case f.AllowCCUnprotected && f.DM:
		return errors.New("CoCo unprotected memory cannot be used with device memory")
	case f.Prefetch && !f.ODP:
		return errors.New("prefetch is valid only with on-demand memory region")
	}
	return nil
}
