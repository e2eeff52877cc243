package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// recConn records everything one end writes, so a test can compare the
// byte stream with the message sequence perftest's main() produces.
type recConn struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (r *recConn) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.out.Write(b)
	r.mu.Unlock()
	return r.Conn.Write(b)
}

func (r *recConn) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.out.Bytes())
}

// side is one end's inputs and results in a loopback run.
type side struct {
	cfg   Config
	dests []Dest
	rep   BWReport // what it reports after each run

	setup     SetupResult
	remote1   []Dest // first exchange
	remote2   []Dest // second exchange
	duplexRep []*BWReport
	finalRep  *BWReport
	passive   bool
	wire      []byte
	err       error
}

func mkDests(n int, base uint32, gid [16]byte) []Dest {
	d := make([]Dest, n)
	for i := range d {
		d[i] = Dest{
			OutReads: 16, QPN: base + uint32(i), PSN: (base*7 + uint32(i)*0x1111) & 0xffffff,
			RKey: 0xabc00000 | base<<4 | uint32(i), VAddr: 0x7f0000000000 + uint64(base)<<20 + uint64(i)<<12, GID: gid,
		}
	}
	return d
}

func testParams(qps int) Params {
	return Params{ConnType: ConnRC, Unit: UnitMiBps, Size: 65536, Iters: 1000, NumQPs: int32(qps),
		Attr: DeviceAttr{FWVer: "softib", MaxQPRdAtom: 8, VendorID: 0x1234}}
}

// play runs one side of a test the way the perftest program's main() does.
func play(s *side, c *Conn) {
	defer func() { s.wire = c.nc.(*recConn).bytes() }()
	sess := NewSession(c, s.cfg)
	fail := func(err error) { s.err = err; c.Close() }
	var err error
	if s.setup, err = sess.Setup(); err != nil {
		fail(err)
		return
	}
	if s.remote1, err = sess.ExchangeDests(s.dests); err != nil {
		fail(err)
		return
	}
	// (here perftest moves the QPs to RTR and RTS)
	if s.remote2, err = sess.Ready(s.dests); err != nil {
		fail(err)
		return
	}
	s.passive = sess.Passive()
	if !s.passive {
		sizes := []uint64{s.cfg.Params.Size}
		if s.cfg.RunAll {
			sizes = []uint64{2, 4, 8} // a short -a; the sequence per size is the same
		}
		for range sizes {
			if err := sess.BeforeRun(); err != nil {
				fail(err)
				return
			}
			// (traffic)
			r, err := sess.AfterRun(s.rep)
			if err != nil {
				fail(err)
				return
			}
			s.duplexRep = append(s.duplexRep, r)
		}
	}
	if s.finalRep, err = sess.Finish(s.rep); err != nil {
		s.err = err
	}
}

// loopback runs server and client over 127.0.0.1 in goroutines.
func loopback(t *testing.T, srv, cli *side) {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		c, err := ln.Accept(ctx)
		if err != nil {
			srv.err = err
			return
		}
		ln.Close() // perftest serves one client
		c.nc = &recConn{Conn: c.nc}
		c.nc.SetDeadline(time.Now().Add(10 * time.Second))
		play(srv, c)
	}()
	go func() {
		defer wg.Done()
		port := ln.Addr().(*net.TCPAddr).Port
		c, err := Dial(ctx, "127.0.0.1", port)
		if err != nil {
			cli.err = err
			return
		}
		c.nc = &recConn{Conn: c.nc}
		c.nc.SetDeadline(time.Now().Add(10 * time.Second))
		play(cli, c)
	}()
	wg.Wait()
}

// expectWire builds the byte stream one side must have written, from a
// compact script of perftest's steps:
//
//	V  version   S  check_sys_data (two 4-byte exchanges)   M  MTU
//	P  negotiation struct   D  one dest per QP   B  barrier (dest 0)
//	R  bandwidth report (size, iters, 3 doubles)
func expectWire(t *testing.T, script string, s *side) []byte {
	t.Helper()
	var w []byte
	f := s.cfg
	enc := func(d Dest) []byte {
		b, err := d.Encode(WireFormat{GID: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, step := range script {
		switch step {
		case 'V':
			v := make([]byte, 16)
			copy(v, DefaultVersion)
			w = append(w, v...)
		case 'S':
			w = binary.BigEndian.AppendUint32(w, 4096)
			w = binary.BigEndian.AppendUint32(w, 64)
		case 'M':
			w = append(w, byte('0'+f.MTU), 0)
		case 'P':
			p := f.Params
			p.Verb, p.Tst = f.Test.Verb, f.Test.Type
			if f.RunAll {
				p.TestMethod = RunAll
			}
			w = append(w, p.Marshal(true)...)
		case 'D':
			for _, d := range s.dests {
				w = append(w, enc(d)...)
			}
		case 'B':
			w = append(w, enc(s.dests[0])...)
		case 'R':
			w = binary.BigEndian.AppendUint64(w, s.rep.Size)
			w = binary.BigEndian.AppendUint64(w, s.rep.Iters)
			for _, v := range []float64{s.rep.BWPeak, s.rep.BWAvg, s.rep.MsgRate} {
				w = binary.BigEndian.AppendUint64(w, math.Float64bits(v))
			}
		case ' ':
		default:
			t.Fatalf("bad script step %q", step)
		}
	}
	return w
}

func TestLoopbackSequences(t *testing.T) {
	const setup = "VSMP "
	cases := []struct {
		test           Test
		duplex, runAll bool
		server, client string // expected scripts after setup
		passiveServer  bool
		reports        int // AfterRun reports per side (duplex)
		finalReport    bool
	}{
		// Unidirectional write/read/atomic bw: the server waits, then both
		// sides sync, exchange the client's report and close.
		{WriteBW, false, false, "D DB BRB", "D DB BRB", true, 0, true},
		{WriteBW, false, true, "D DB BRB", "D DB BRB", true, 0, true},
		{ReadBW, false, false, "D DB BRB", "D DB BRB", true, 0, true},
		{AtomicBW, false, false, "D DB BRB", "D DB BRB", true, 0, true},
		// Bidirectional: a barrier before each run, reports after it; with
		// -a write and read add a barrier after the run.
		{WriteBW, true, false, "D DB BR B", "D DB BR B", false, 1, false},
		{WriteBW, true, true, "D DB BBR BBR BBR B", "D DB BBR BBR BBR B", false, 3, false},
		{ReadBW, true, true, "D DB BBR BBR BBR B", "D DB BBR BBR BBR B", false, 3, false},
		{AtomicBW, true, false, "D DB BR B", "D DB BR B", false, 1, false},
		// Send bw: the ready barrier comes before the second exchange; a
		// barrier before every run, after it too with -a.
		{SendBW, false, false, "D BD B B", "D BD B B", false, 0, false},
		{SendBW, false, true, "D BD BB BB BB B", "D BD BB BB BB B", false, 0, false},
		{SendBW, true, false, "D BD BR B", "D BD BR B", false, 1, false},
		// Latency: an extra barrier first (not in send_lat); write_lat
		// closes without a barrier; read/atomic servers leave at once.
		{WriteLat, false, false, "BD DB", "BD DB", false, 0, false},
		{WriteLat, false, true, "BD DB", "BD DB", false, 0, false},
		{ReadLat, false, false, "BD DB B", "BD DB B", true, 0, false},
		{AtomicLat, false, false, "BD DB B", "BD DB B", true, 0, false},
		{SendLat, false, false, "D BD B B", "D BD B B", false, 0, false},
		{SendLat, false, true, "D BD B B B B", "D BD B B B B", false, 0, false},
	}
	for _, qps := range []int{1, 4} {
		for _, c := range cases {
			name := fmt.Sprintf("%s/duplex=%v/all=%v/qps=%d", c.test.Name(), c.duplex, c.runAll, qps)
			t.Run(name, func(t *testing.T) {
				cfg := Config{Test: c.test, Duplex: c.duplex, RunAll: c.runAll, Format: WireFormat{GID: true}, MTU: MTU4096, Params: testParams(qps), OutReads: 16}
				srv := &side{cfg: cfg, dests: mkDests(qps, 0x100, gidV4),
					rep: BWReport{Size: 65536, Iters: 1000, BWPeak: 1, BWAvg: 2, MsgRate: 3}}
				cfg.MTU = MTU1024
				cli := &side{cfg: cfg, dests: mkDests(qps, 0x200, gidV4),
					rep: BWReport{Size: 65536, Iters: uint64(1000 * qps), BWPeak: 11000.5, BWAvg: 10999.25, MsgRate: 0.176}}
				srv.cfg.Test, cli.cfg.Test = c.test, c.test
				loopback(t, srv, cli)
				if srv.err != nil || cli.err != nil {
					t.Fatalf("server: %v; client: %v", srv.err, cli.err)
				}
				for _, s := range []struct {
					who    string
					me     *side
					peer   *side
					script string
				}{{"server", srv, cli, c.server}, {"client", cli, srv, c.client}} {
					want := expectWire(t, setup+s.script, s.me)
					if !bytes.Equal(s.me.wire, want) {
						t.Errorf("%s wrote %d bytes, want %d (script %q)", s.who, len(s.me.wire), len(want), setup+s.script)
					}
					if fmt.Sprint(s.me.remote1) != fmt.Sprint(s.peer.dests) || fmt.Sprint(s.me.remote2) != fmt.Sprint(s.peer.dests) {
						t.Errorf("%s got remote dests %+v / %+v, want %+v", s.who, s.me.remote1, s.me.remote2, s.peer.dests)
					}
					if s.me.setup.MTU != MTU1024 || s.me.setup.RemoteVersion != DefaultVersion || s.me.setup.RemoteParams == nil {
						t.Errorf("%s setup %+v", s.who, s.me.setup)
					}
					if s.me.setup.OutReads != 8 {
						t.Errorf("%s out_reads %d, want the peer's max_qp_rd_atom 8", s.who, s.me.setup.OutReads)
					}
					n := 0
					for _, r := range s.me.duplexRep {
						if r != nil {
							n++
							if *r != s.peer.rep {
								t.Errorf("%s got duplex report %+v, want %+v", s.who, *r, s.peer.rep)
							}
						}
					}
					if n != c.reports {
						t.Errorf("%s exchanged %d duplex reports, want %d", s.who, n, c.reports)
					}
					if (s.me.finalRep != nil) != c.finalReport || (s.me.finalRep != nil && *s.me.finalRep != s.peer.rep) {
						t.Errorf("%s final report %+v", s.who, s.me.finalRep)
					}
				}
				if srv.passive != c.passiveServer || cli.passive {
					t.Errorf("passive: server %v client %v", srv.passive, cli.passive)
				}
			})
		}
	}
}

func TestLoopbackParamMismatch(t *testing.T) {
	cfg := Config{Format: WireFormat{GID: true}, Test: WriteBW, MTU: MTU4096, Params: testParams(1)}
	srv := &side{cfg: cfg, dests: mkDests(1, 1, gidV4)}
	cfg.Params.Iters = 5000
	cli := &side{cfg: cfg, dests: mkDests(1, 2, gidV4)}
	loopback(t, srv, cli)
	for _, e := range []error{srv.err, cli.err} {
		if e == nil || !strings.Contains(e.Error(), "iters mismatch") {
			t.Errorf("error %v, want an iters mismatch", e)
		}
	}
}

func TestLoopbackOldPeerSkipsNegotiation(t *testing.T) {
	// A 6.20 peer has no negotiate_params; the 6.29 side must skip it too.
	cfg := Config{Format: WireFormat{GID: true}, Test: SendLat, MTU: MTU2048, Params: testParams(1)}
	srv := &side{cfg: cfg, dests: mkDests(1, 1, gidV4)}
	cfg.Version = "6.20"
	cli := &side{cfg: cfg, dests: mkDests(1, 2, gidV4)}
	loopback(t, srv, cli)
	if srv.err != nil || cli.err != nil {
		t.Fatalf("server: %v; client: %v", srv.err, cli.err)
	}
	if srv.setup.RemoteParams != nil || cli.setup.RemoteParams != nil {
		t.Error("parameters negotiated with a 6.20 peer")
	}
	if srv.setup.RemoteVersion != "6.20" || cli.setup.RemoteVersion != DefaultVersion {
		t.Errorf("versions %q %q", srv.setup.RemoteVersion, cli.setup.RemoteVersion)
	}
	if want := expectWire(t, "VSMD BD B B", srv); !bytes.Equal(srv.wire, want) {
		t.Errorf("server wire %q\nwant %q", srv.wire, want)
	}
}

func TestLoopbackRejectsOldVersion(t *testing.T) {
	cfg := Config{Format: WireFormat{GID: true}, Test: WriteBW, MTU: MTU4096, Params: testParams(1)}
	srv := &side{cfg: cfg, dests: mkDests(1, 1, gidV4)}
	cfg.Version = "5.60"
	cli := &side{cfg: cfg, dests: mkDests(1, 2, gidV4)}
	loopback(t, srv, cli)
	if srv.err == nil || !strings.Contains(srv.err.Error(), "older than 5.70") {
		t.Errorf("server error %v", srv.err)
	}
}

func TestLoopbackGIDMismatch(t *testing.T) {
	cfg := Config{Format: WireFormat{GID: true}, Test: ReadBW, MTU: MTU4096, Params: testParams(2)}
	srv := &side{cfg: cfg, dests: mkDests(2, 1, gidV4)}
	cli := &side{cfg: cfg, dests: mkDests(2, 2, gidV6)}
	loopback(t, srv, cli)
	if srv.err == nil || cli.err == nil {
		t.Errorf("IPv4/IPv6 GIDs accepted: %v, %v", srv.err, cli.err)
	}
}

func TestExchangeVersionWire(t *testing.T) {
	// exchange_versions sends the whole 16-byte char array.
	a, b := net.Pipe()
	ca, cb := NewConn(a, true), NewConn(b, false)
	done := make(chan string)
	go func() {
		v, err := cb.ExchangeVersions("6.28")
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	v, err := ca.ExchangeVersions(DefaultVersion)
	if err != nil {
		t.Fatal(err)
	}
	if v != "6.28" || <-done != DefaultVersion {
		t.Errorf("versions %q", v)
	}
	if got := encodeVersion("6.29"); !bytes.Equal(got, []byte("6.29\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")) {
		t.Errorf("encoded version %q", got)
	}
}

func TestParseVersion(t *testing.T) {
	for s, want := range map[string]float64{"6.29": 6.29, "5.70": 5.7, "": 0, "6.28-rc1": 6.28, "x": 0, "4.5-0.20": 4.5} {
		if got := ParseVersion(s); got != want {
			t.Errorf("ParseVersion(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestNegotiateMTU(t *testing.T) {
	if NegotiateMTU(MTU4096, MTU1024) != MTU1024 || NegotiateMTU(MTU1024, MTU4096) != MTU1024 || NegotiateMTU(MTU2048, 0) != MTU2048 || NegotiateMTU(MTU2048, 9) != MTU2048 {
		t.Error("NegotiateMTU")
	}
}

func TestExchangeBWReportWire(t *testing.T) {
	rep := BWReport{Size: 4096, Iters: 0x1_0000_0002, BWPeak: 1.5, BWAvg: 1.25, MsgRate: 0.5, BWAvgP1: 1, MsgRateP1: 2, BWAvgP2: 3, MsgRateP2: 4}
	for _, c := range []struct {
		version string
		perPort bool
		size    int
		iters   uint64
	}{
		{"6.29", false, 8 + 8 + 3*8, rep.Iters},
		{"6.29", true, 8 + 8 + 7*8, rep.Iters},
		// perftest's float comparison puts 5.33 itself below 5.33: 32-bit
		// iterations, truncated.
		{"5.33", false, 8 + 4 + 3*8, 2},
		{"5.34", false, 8 + 8 + 3*8, rep.Iters},
	} {
		a, b := net.Pipe()
		ra := &recConn{Conn: a}
		ca, cb := NewConn(ra, true), NewConn(b, false)
		done := make(chan BWReport, 1)
		go func() {
			r, err := cb.ExchangeBWReport(BWReport{}, c.version, c.perPort)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		if _, err := ca.ExchangeBWReport(rep, c.version, c.perPort); err != nil {
			t.Fatal(err)
		}
		got := <-done
		wire := ra.bytes()
		if len(wire) != c.size {
			t.Errorf("%s perPort=%v: %d bytes, want %d", c.version, c.perPort, len(wire), c.size)
		}
		if got.Size != 4096 || got.Iters != c.iters || got.BWPeak != 1.5 || got.MsgRate != 0.5 {
			t.Errorf("%s: received %+v", c.version, got)
		}
		if c.perPort != (got.MsgRateP2 == 4) {
			t.Errorf("%s perPort=%v: per-port fields %+v", c.version, c.perPort, got)
		}
		// size, then iterations, then bw_peak as a big-endian double.
		if !bytes.Equal(wire[:8], []byte{0, 0, 0, 0, 0, 0, 0x10, 0}) {
			t.Errorf("size bytes % x", wire[:8])
		}
		doubles := 3
		if c.perPort {
			doubles = 7
		}
		peakAt := c.size - 8*doubles // after size and iterations
		if peak := wire[peakAt : peakAt+8]; math.Float64frombits(binary.BigEndian.Uint64(peak)) != 1.5 {
			t.Errorf("bw_peak bytes % x", peak)
		}
		a.Close()
		b.Close()
	}
}
