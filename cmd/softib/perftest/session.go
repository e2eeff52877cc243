package perftest

import (
	"errors"
	"fmt"
)

// Config is what a Session needs to know of the local test to follow
// perftest's sequence. Both peers must agree on Test, Duplex, RunAll, the
// number of QPs and Format; perftest 6.28 and later check most of that in
// the parameter negotiation.
type Config struct {
	Test   Test
	Duplex bool // -b, bidirectional (bw tests)
	RunAll bool // -a, all message sizes
	// Format is the destination wire format (GID on RoCE, data validation).
	Format WireFormat

	// Version is announced to the peer; DefaultVersion if empty. It also
	// decides, with the peer's, whether parameters are negotiated (both
	// >= 6.28).
	Version string
	// CycleBuffer (the page size) and CacheLineSize are exchanged by
	// check_sys_data; 4096 and 64 if zero.
	CycleBuffer   int32
	CacheLineSize int32
	// MTU is the local port MTU (or -m); required unless Params.ConnType is
	// RawEth, which exchanges no MTU.
	MTU MTU
	// Params is the local half of the negotiation. Setup fills in Verb, Tst
	// and TestMethod from Test and RunAll; the rest is the caller's.
	Params Params
	// NoMLX5DV selects the 312-byte negotiation struct of a perftest built
	// without mlx5dv support; the default is the 320-byte struct of the
	// distribution packages.
	NoMLX5DV bool
	// OutReads is the local outstanding reads setting (-o), which the
	// negotiation may lower to the peer's max_qp_rd_atom.
	OutReads int
	// ReportPerPort (--report-per-port) adds the per-port figures to the
	// report exchange.
	ReportPerPort bool
}

// SetupResult is what Setup learned from the peer.
type SetupResult struct {
	RemoteVersion string
	CycleBuffer   int32 // the larger of both sides'
	CacheLineSize int32 // the larger of both sides'
	MTU           MTU   // the smaller of both sides'
	// RemoteParams is the peer's negotiation struct, nil when either
	// version is older than 6.28.
	RemoteParams *Params
	OutReads     int // Config.OutReads, possibly clamped
}

// Session runs one perftest program's side of the setup protocol, step by
// step, in the order the program's main() uses. The caller does the RDMA
// work in between:
//
//	Setup                      versions, system data, MTU, negotiation
//	ExchangeDests(local)       first destination exchange
//	  (move the QPs to RTR/RTS with the remote destinations)
//	Ready(local)               second exchange and the "after RTR" barrier
//	Passive()?                 a passive server skips straight to Finish
//	for each size:
//	  BeforeRun                barrier before traffic, where perftest has one
//	  (run the traffic, compute the report)
//	  AfterRun(report)         barrier and report exchange after traffic
//	Finish(report)             final report exchange and closing barrier
//
// The message sequence of each program, with "bar" a HandShake of QP 0's
// destination, "dests" one HandShake per QP and "rep" an ExchangeBWReport:
//
//	ib_write_bw, ib_read_bw, ib_atomic_bw:
//	  dests; (connect) dests; bar
//	  unidirectional: client runs every size with no exchange; then on both
//	    sides: bar, rep (the client's report, which the server prints), bar
//	  -b: per size: bar, run, [write/read with -a: bar], rep; then bar
//	ib_send_bw:
//	  dests; (connect) bar; dests
//	  per size: bar, run, [-b: rep], [-a: bar]; then bar
//	ib_write_lat:
//	  bar; dests; (connect) dests; bar; run every size; close, no barrier
//	ib_read_lat, ib_atomic_lat:
//	  bar; dests; (connect) dests; bar
//	  server: bar and exit; client: run every size, then bar
//	ib_send_lat:
//	  dests; (connect) bar; dests; per size: bar, run; then bar
type Session struct {
	Conn   *Conn
	Config Config

	remoteVersion string
	local0        Dest // QP 0's destination, sent in every barrier
}

// NewSession starts a session on an established connection.
func NewSession(c *Conn, cfg Config) *Session {
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if cfg.CycleBuffer == 0 {
		cfg.CycleBuffer = 4096
	}
	if cfg.CacheLineSize == 0 {
		cfg.CacheLineSize = 64
	}
	c.Format = cfg.Format
	return &Session{Conn: c, Config: cfg}
}

// Setup runs the exchanges every test starts with: exchange_versions,
// check_version_compatibility, check_sys_data, check_mtu and
// negotiate_params.
func (s *Session) Setup() (SetupResult, error) {
	cfg := &s.Config
	res := SetupResult{
		CycleBuffer:   cfg.CycleBuffer,
		CacheLineSize: cfg.CacheLineSize,
		MTU:           cfg.MTU,
		OutReads:      cfg.OutReads,
	}
	switch cfg.Test.Verb {
	case VerbSend, VerbWrite, VerbRead, VerbAtomic:
	default:
		// The _imm variants add barriers of their own (per size, and
		// around the server's receive loop) that are not modelled.
		return res, fmt.Errorf("perftest: verb %v is not supported", cfg.Test.Verb)
	}
	rv, err := s.Conn.ExchangeVersions(cfg.Version)
	if err != nil {
		return res, err
	}
	s.remoteVersion = rv
	res.RemoteVersion = rv
	if err := CheckVersionCompatibility(rv); err != nil {
		return res, err
	}
	remote := ParseVersion(rv)

	if remote >= sysDataVersion {
		cb, cl, err := s.Conn.ExchangeSysData(cfg.CycleBuffer, cfg.CacheLineSize)
		if err != nil {
			return res, err
		}
		res.CycleBuffer = max(cb, cfg.CycleBuffer)
		res.CacheLineSize = max(cl, cfg.CacheLineSize)
	}

	if cfg.Params.ConnType != ConnRawEth {
		if !cfg.MTU.Valid() {
			return res, fmt.Errorf("perftest: local MTU enum %d is not valid", cfg.MTU)
		}
		// Every compatible peer (>= 5.70) is past both of check_mtu's
		// thresholds (5.1, 5.31), so the MTU always travels in 2 bytes.
		rm, err := s.Conn.ExchangeMTU(cfg.MTU)
		if err != nil {
			return res, err
		}
		res.MTU = NegotiateMTU(cfg.MTU, rm)
	}

	if remote >= negotiateVersion && ParseVersion(cfg.Version) >= negotiateVersion {
		p := cfg.Params
		p.Verb = cfg.Test.Verb
		p.Tst = cfg.Test.Type
		p.TestMethod = RunRegular
		if cfg.RunAll {
			p.TestMethod = RunAll
		}
		rp, err := s.Conn.ExchangeParams(&p, !cfg.NoMLX5DV)
		if err != nil {
			return res, err
		}
		res.RemoteParams = rp
		if err := p.Compare(rp); err != nil {
			return res, fmt.Errorf("failed to negotiate parameters: %w", err)
		}
		res.OutReads = ClampOutReads(cfg.OutReads, p.ConnType, &rp.Attr)
	}
	return res, nil
}

func (s *Session) isSend() bool {
	return s.Config.Test.Verb == VerbSend || s.Config.Test.Verb == VerbSendImm
}

func (s *Session) isBW() bool { return s.Config.Test.Type == TypeBW }

func (s *Session) barrier() error {
	_, err := s.Conn.HandShake(s.local0)
	return err
}

// ExchangeDests is the first destination exchange, before the QPs are
// connected: one HandShake per QP, preceded in the write, read and atomic
// latency tests by an extra exchange of QP 0's destination. When GIDs are
// exchanged it then checks their compatibility as perftest does (perftest
// also runs the check without GIDs, on an uninitialised local GID and a
// zero remote one, which is not reproduced).
func (s *Session) ExchangeDests(local []Dest) ([]Dest, error) {
	if len(local) == 0 {
		return nil, errors.New("perftest: no destinations")
	}
	s.local0 = local[0]
	if !s.isBW() && !s.isSend() {
		if err := s.barrier(); err != nil {
			return nil, err
		}
	}
	remote, err := s.Conn.ExchangeDests(local)
	if err != nil {
		return nil, err
	}
	if s.Config.Format.GID {
		if err := CheckGIDCompatibility(local[0], remote[0]); err != nil {
			return nil, err
		}
	}
	return remote, nil
}

// Ready is the second destination exchange, after the QPs are connected,
// whose results perftest prints as the "remote address" lines, together with
// the barrier that tells both sides the QPs are ready: before the exchange
// in the send tests, after it in the others.
func (s *Session) Ready(local []Dest) ([]Dest, error) {
	if len(local) == 0 {
		return nil, errors.New("perftest: no destinations")
	}
	s.local0 = local[0]
	if s.isSend() {
		if err := s.barrier(); err != nil {
			return nil, err
		}
	}
	remote, err := s.Conn.ExchangeDests(local)
	if err != nil {
		return nil, err
	}
	if !s.isSend() {
		if err := s.barrier(); err != nil {
			return nil, err
		}
	}
	return remote, nil
}

// Passive reports whether this side runs no traffic and goes from Ready
// straight to Finish: the server of a unidirectional ib_write_bw,
// ib_read_bw or ib_atomic_bw, and the server of ib_read_lat and
// ib_atomic_lat.
func (s *Session) Passive() bool {
	if s.Conn.IsClient() {
		return false
	}
	v := s.Config.Test.Verb
	oneSided := v == VerbWrite || v == VerbRead || v == VerbAtomic
	if s.isBW() {
		return oneSided && !s.Config.Duplex
	}
	return v == VerbRead || v == VerbAtomic
}

// BeforeRun is the barrier perftest places before each size's traffic:
// always in the send tests (the receiver has posted its receives), and in
// the bidirectional write, read and atomic bandwidth tests.
func (s *Session) BeforeRun() error {
	if s.isSend() || (s.isBW() && s.Config.Duplex) {
		return s.barrier()
	}
	return nil
}

// AfterRun follows each size's traffic. In the bidirectional bandwidth tests
// it exchanges the reports and returns the peer's (print local.Add(remote)),
// preceded by a barrier in ib_write_bw/ib_read_bw with -a; in ib_send_bw
// with -a a barrier follows. It returns nil when no report was exchanged.
func (s *Session) AfterRun(local BWReport) (*BWReport, error) {
	if !s.isBW() {
		return nil, nil
	}
	cfg := &s.Config
	v := cfg.Test.Verb
	var rem *BWReport
	exchange := func() error {
		r, err := s.Conn.ExchangeBWReport(local, s.remoteVersion, cfg.ReportPerPort)
		if err != nil {
			return err
		}
		rem = &r
		return nil
	}
	switch {
	case s.isSend():
		if cfg.Duplex && cfg.Params.TestLimit != LimitDuration {
			if err := exchange(); err != nil {
				return nil, err
			}
		}
		if cfg.RunAll {
			if err := s.barrier(); err != nil {
				return rem, err
			}
		}
	case cfg.Duplex:
		if cfg.RunAll && v != VerbAtomic && ParseVersion(cfg.Version) >= duplexBarrierVersion {
			if err := s.barrier(); err != nil {
				return nil, err
			}
		}
		if err := exchange(); err != nil {
			return nil, err
		}
	}
	return rem, nil
}

// Finish ends the session and closes the connection. In the unidirectional
// write, read and atomic bandwidth tests both sides exchange reports first
// (a barrier, then the reports): the client sends its result, which the
// server prints, and Finish returns the peer's report. ib_write_lat closes
// without a barrier; every other test ends with ctx_close_connection's.
func (s *Session) Finish(local BWReport) (*BWReport, error) {
	v := s.Config.Test.Verb
	if !s.isBW() && v == VerbWrite {
		return nil, s.Conn.Close()
	}
	var rem *BWReport
	if s.isBW() && !s.isSend() && !s.Config.Duplex {
		if err := s.barrier(); err != nil {
			s.Conn.Close()
			return nil, err
		}
		r, err := s.Conn.ExchangeBWReport(local, s.remoteVersion, s.Config.ReportPerPort)
		if err != nil {
			s.Conn.Close()
			return nil, err
		}
		rem = &r
	}
	return rem, s.Conn.CloseConnection(s.local0)
}
