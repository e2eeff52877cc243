package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/client"
	"github.com/softib/softib/cmd/softib/perftest"
	"github.com/softib/softib/vhca"
)

// perfSide is one side of a perf run: its QPs, each with a buffer whose
// first half is what it sends and second half what the peer writes into.
type perfSide struct {
	p      *perfParams
	ctx    *client.Context
	pd     *client.PD
	cq     *client.CQ
	ch     *client.CompChannel // -e: the CQ's events
	qps    []*client.QP
	mrs    []*client.MR
	ahs    []*client.AH
	half   uint64 // bytes in each half of a QP's buffer
	local  []perftest.Dest
	remote []perftest.Dest
	isCli  bool
	wc     [64]client.WC
	byQPN  map[uint32]int
	// completions polled while waiting for the other kind (latency tests)
	pendingSend, pendingRecv int
	// repost counts the receives a latency loop has consumed and not yet
	// posted again: it posts them after its next send, off the path of
	// the message, when the queue holds two or more (at most one is owed
	// when the peer answers); with one, before the send.
	repost int
}

const udQKey = 0x11111111

func runPerf(opts *client.Options, p *perfParams, conn *perftest.Conn, out io.Writer) error {
	defer conn.Close()
	ctx, err := client.Open(p.dev, opts)
	if err != nil {
		return err
	}
	defer ctx.Close()
	s := &perfSide{p: p, ctx: ctx, isCli: conn.IsClient(), byQPN: map[uint32]int{}}
	if err := setPath(ctx, p.ibPort, p.path); err != nil {
		return err
	}
	pa, err := ctx.QueryPort(p.ibPort)
	if err != nil {
		return err
	}
	gidIndex := p.gidIndex
	if gidIndex < 0 {
		gidIndex = 0
		for i := range pa.GIDTblLen {
			if g, err := ctx.QueryGID(p.ibPort, i); err == nil && perftest.GIDIsIPv4(g.GID) {
				gidIndex = i
				break
			}
		}
	}
	gid, err := ctx.QueryGID(p.ibPort, gidIndex)
	if err != nil {
		return err
	}
	mtu := pa.ActiveMTU
	if p.mtu != 0 {
		mtu = vhca.MTU(mtuEnum(p.mtu))
	}
	maxSize := p.size
	if p.all {
		maxSize = 1 << 23
		if p.conn == perftest.ConnUD {
			maxSize = uint64(mtu.Bytes())
		}
	}
	if p.conn == perftest.ConnUD && p.size > uint64(mtu.Bytes()) {
		return fmt.Errorf("perf: UD messages of %d bytes exceed the %d-byte MTU", p.size, mtu.Bytes())
	}
	// At least a cycle buffer (perftest's page size) from the address
	// the peer is given: a perftest client steps its remote address by
	// max(size, cache line) through a whole cycle buffer when size <=
	// cycle_buffer/2 (increase_rem_addr; atomics always), and perftest's
	// own buffers are BUFF_SIZE(size, cycle_buffer) each.
	s.half = max((maxSize+40+63)&^63, 4096)
	if err := s.setup(p, gidIndex); err != nil {
		return err
	}
	unit := perftest.UnitMiBps
	if p.gbits {
		unit = perftest.UnitGbps
	}
	limit := perftest.LimitIterations
	if p.duration > 0 {
		limit = perftest.LimitDuration
	}
	sess := perftest.NewSession(conn, perftest.Config{
		Test: p.test, RunAll: p.all, Format: perftest.WireFormat{GID: true}, MTU: perftest.MTU(mtu), OutReads: 16,
		Params: perftest.Params{ConnType: p.conn, TestLimit: limit, Unit: unit, Size: p.size, Iters: p.iters,
			NumQPs: int32(p.qps), Duration: int32(p.duration)},
	})
	res, err := sess.Setup()
	if err != nil {
		return err
	}
	mtu = vhca.MTU(res.MTU)
	for i, qp := range s.qps {
		s.local = append(s.local, perftest.Dest{LID: pa.LID, OutReads: 16, QPN: qp.Num, PSN: rand.Uint32() & 0xFFFFFF,
			RKey: s.mrs[i].RKey, VAddr: s.mrs[i].Addr + s.half, GID: gid.GID})
	}
	if s.remote, err = sess.ExchangeDests(s.local); err != nil {
		return err
	}
	if len(s.remote) != len(s.qps) {
		return fmt.Errorf("perf: peer has %d QPs, we have %d", len(s.remote), len(s.qps))
	}
	if err := s.connect(p, gidIndex, mtu); err != nil {
		return err
	}
	if s.remote, err = sess.Ready(s.local); err != nil {
		return err
	}
	s.banner(out, p, gidIndex, mtu, res.OutReads)
	unitOf := unit
	if sess.Passive() {
		rem, err := sess.Finish(perftest.BWReport{})
		if rem != nil && p.test.Type == perftest.TypeBW {
			printBW(out, p, *rem, unitOf, true)
		}
		return err
	}
	sizes := []uint64{p.size}
	if p.all {
		sizes = p.test.AllSizes(p.conn, perftest.MTU(mtu), maxSize)
	}
	if p.test.Type == perftest.TypeBW {
		if !p.json {
			perftest.FormatBWHeader(out, unit)
		}
	} else if !p.json {
		perftest.FormatLatHeader(out)
	}
	if p.test.Verb == perftest.VerbSend {
		if err := s.prepost(); err != nil {
			return err
		}
	}
	var last perftest.BWReport
	for _, size := range sizes {
		if err := sess.BeforeRun(); err != nil {
			return err
		}
		if p.test.Type == perftest.TypeBW {
			rep, err := s.runBW(size, unit)
			if err != nil {
				return err
			}
			rem, err := sess.AfterRun(rep)
			if err != nil {
				return err
			}
			if rem != nil {
				rep = rep.Add(*rem)
			}
			last = rep
			printBW(out, p, rep, unit, false)
		} else {
			posted, err := s.runLat(size)
			if err != nil {
				return err
			}
			st, err := perftest.ComputeLat(perftest.LatSamples(posted), p.test.RTTFactor())
			if err != nil {
				return err
			}
			if _, err := sess.AfterRun(perftest.BWReport{}); err != nil {
				return err
			}
			if p.json {
				perftest.WriteLatJSON(out, p.test, p.conn, size, p.iters, st)
			} else {
				perftest.FormatLatRow(out, size, p.iters, st)
			}
		}
	}
	if !p.json {
		perftest.FormatResultLine(out)
	}
	_, err = sess.Finish(last)
	return err
}

func printBW(out io.Writer, p *perfParams, r perftest.BWReport, unit perftest.Unit, header bool) {
	if p.json {
		perftest.WriteBWJSON(out, p.test, p.conn, r, unit)
		return
	}
	if header {
		perftest.FormatBWHeader(out, unit)
	}
	perftest.FormatBWRow(out, r, unit)
	if header {
		perftest.FormatResultLine(out)
	}
}

func mtuEnum(bytes int) uint8 {
	for e := uint8(1); e <= 5; e++ {
		if 128<<e == bytes {
			return e
		}
	}
	return 3
}

func (s *perfSide) setup(p *perfParams, gidIndex int) error {
	ctx := s.ctx
	var err error
	if s.pd, err = ctx.AllocPD(); err != nil {
		return err
	}
	cqe := p.qps*(p.txDepth+p.rxDepth) + 1
	if p.events {
		if s.ch, err = ctx.CreateCompChannel(); err != nil {
			return err
		}
	}
	if s.cq, err = ctx.CreateCQ(min(cqe, 32767), s.ch); err != nil {
		return err
	}
	if p.events {
		if err := s.cq.ReqNotify(false); err != nil {
			return err
		}
	}
	qt := map[perftest.ConnType]vhca.QPType{perftest.ConnRC: vhca.QPTypeRC, perftest.ConnUC: vhca.QPTypeUC, perftest.ConnUD: vhca.QPTypeUD}[p.conn]
	acc := vhca.AccessLocalWrite | vhca.AccessRemoteWrite | vhca.AccessRemoteRead | vhca.AccessRemoteAtomic
	for range p.qps {
		buf, err := ctx.Alloc(int(2 * s.half))
		if err != nil {
			return err
		}
		mr, err := s.pd.RegMR(buf.B, acc)
		if err != nil {
			return err
		}
		qp, err := s.pd.CreateQP(client.QPInitAttr{Type: qt, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: client.QPCap{MaxSendWR: p.txDepth, MaxRecvWR: p.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
		if err != nil {
			return err
		}
		s.byQPN[qp.Num] = len(s.qps)
		s.qps = append(s.qps, qp)
		s.mrs = append(s.mrs, mr)
	}
	return nil
}

func (s *perfSide) connect(p *perfParams, gidIndex int, mtu vhca.MTU) error {
	acc := vhca.AccessLocalWrite | vhca.AccessRemoteWrite | vhca.AccessRemoteRead | vhca.AccessRemoteAtomic
	for i, qp := range s.qps {
		r := s.remote[i]
		path := client.Path{Port: p.ibPort, GIDIndex: gidIndex, MTU: mtu, Access: acc, LocalPSN: s.local[i].PSN,
			Remote: client.Endpoint{LID: r.LID, QPN: r.QPN, PSN: r.PSN, GID: r.GID}, QKey: udQKey}
		if err := qp.Connect(path); err != nil {
			return err
		}
		if p.conn == perftest.ConnUD {
			ah, err := s.pd.CreateAH(client.AV{DLID: r.LID, Port: uint8(p.ibPort), IsGlobal: true,
				GRH: vhca.GlobalRoute{DGID: r.GID, SGIDIndex: uint8(gidIndex), HopLimit: 64}})
			if err != nil {
				return err
			}
			s.ahs = append(s.ahs, ah)
		}
	}
	return nil
}

func (s *perfSide) banner(out io.Writer, p *perfParams, gidIndex int, mtu vhca.MTU, outReads int) {
	if p.json {
		return
	}
	perftest.FormatTestInfo(out, perftest.TestInfo{
		Test: p.test, Device: s.ctx.Name, NumQPs: p.qps, Transport: "IB", ConnType: p.conn, Client: s.isCli,
		TxDepth: p.txDepth, RxDepth: p.rxDepth, CQMod: p.cqMod, MTUBytes: mtu.Bytes(), LinkType: "Ethernet",
		GIDIndex: gidIndex, GIDIndex2: -1, OutReads: outReads, NUMANode: -1, EQNum: 0, RecvPostList: 1,
	})
	dp := perftest.DestPrint{Verb: p.test.Verb, ConnType: p.conn, ShowGID: true}
	for _, d := range s.local {
		perftest.FormatDest(out, perftest.Local, d, dp)
	}
	for _, d := range s.remote {
		perftest.FormatDest(out, perftest.Remote, d, dp)
	}
	// The table's header starts with perftest's result line.
}

// sendWR is the work request of QP i for a message of size bytes.
func (s *perfSide) sendWR(i int, size uint64) client.SendWR {
	mr, r := s.mrs[i], s.remote[i]
	wr := client.SendWR{SGL: []client.SGE{{Addr: mr.Addr, Length: uint32(size), LKey: mr.LKey}},
		RemoteAddr: r.VAddr, RKey: r.RKey}
	switch s.p.test.Verb {
	case perftest.VerbWrite:
		wr.Opcode = vhca.WRRDMAWrite
	case perftest.VerbRead:
		wr.Opcode = vhca.WRRDMARead
	case perftest.VerbAtomic:
		wr.Opcode, wr.CompareAdd = vhca.WRAtomicFetchAdd, 1
		wr.SGL[0].Length = 8
	default:
		wr.Opcode = vhca.WRSend
		if s.p.conn == perftest.ConnUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs[i], r.QPN, udQKey
		}
	}
	return wr
}

// recvWR is a receive of QP i into the second half of its buffer, all
// of it: the largest message of an -a run (with a UD GRH) fits.
func (s *perfSide) recvWR(i int, size uint64) client.RecvWR {
	mr := s.mrs[i]
	return client.RecvWR{WRID: uint64(i), SGL: []client.SGE{{Addr: mr.Addr + s.half, Length: uint32(s.half), LKey: mr.LKey}}}
}

// prepost fills every QP's receive queue before the first barrier, as
// perftest does: a UD message that finds no receive is lost.
func (s *perfSide) prepost() error {
	for i, qp := range s.qps {
		rw := s.recvWR(i, 0)
		for range s.p.rxDepth {
			if _, err := qp.PostRecv([]client.RecvWR{rw}); err != nil {
				return err
			}
		}
	}
	return nil
}

// runBW runs one size of a bandwidth test: the client posts, a send
// test's server receives.
func (s *perfSide) runBW(size uint64, unit perftest.Unit) (perftest.BWReport, error) {
	p := s.p
	n := p.iters
	total := n * uint64(p.qps)
	receiver := !s.isCli && p.test.Verb == perftest.VerbSend
	var deadline time.Time
	if p.duration > 0 {
		// A duration run never runs out of iterations: it stops posting
		// at the deadline and ends when all it posted has completed.
		deadline = time.Now().Add(time.Duration(p.duration) * time.Second)
		n, total = 1<<40, 1<<62
	}
	posted := make([]time.Duration, 0, min(total, 1<<22))
	completed := make([]time.Duration, min(total, 1<<22))
	start := time.Now()
	var totS, totC uint64
	wrs := make([]client.SendWR, len(s.qps))
	for i := range wrs {
		wrs[i] = s.sendWR(i, size)
	}
	idle, empty := 0, 0
	lastDone := time.Now()
	if !client.ManyCores() {
		// Naps as long as asked: the default timer slack is 50 µs.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
		defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0)
	}
	scnt := make([]uint64, len(s.qps))
	ccnt := make([]uint64, len(s.qps))
	limit := make([]uint64, len(s.qps)) // WRs each QP posts in all
	for i := range limit {
		limit[i] = n
	}
	ending := false
	for totC < total {
		if !deadline.IsZero() && !ending && time.Now().After(deadline) {
			// Time is up: each QP completes its current group of cqMod,
			// whose last WR is signaled, and posts no more.
			ending = true
			for i := range limit {
				limit[i] = (scnt[i] + uint64(p.cqMod) - 1) / uint64(p.cqMod) * uint64(p.cqMod)
			}
		}
		if ending && totS == totC {
			break
		}
		for i, qp := range s.qps {
			if receiver {
				break
			}
			for scnt[i]-ccnt[i] < uint64(p.txDepth) && scnt[i] < limit[i] {
				wr := &wrs[i]
				wr.Flags = 0
				if (scnt[i]+1)%uint64(p.cqMod) == 0 || scnt[i]+1 == limit[i] {
					wr.Flags = vhca.SendSignaled
				}
				wr.WRID = uint64(i)
				if _, err := qp.PostSend(wrs[i : i+1]); err != nil {
					return perftest.BWReport{}, err
				}
				if len(posted) < cap(posted) {
					posted = append(posted, time.Since(start))
				}
				scnt[i]++
				totS++
			}
		}
		k, err := s.cq.Poll(s.wc[:])
		if err != nil {
			return perftest.BWReport{}, err
		}
		if k == 0 && s.ch != nil && (receiver || s.windowFull(scnt, ccnt, limit)) {
			if err := s.awaitEvent(); err != nil {
				return perftest.BWReport{}, err
			}
			continue
		}
		if k == 0 {
			idle++
			if idle&0xFFFF == 0 {
				if err := s.stalled(lastDone); err != nil {
					return perftest.BWReport{}, err
				}
			}
			if !receiver && s.windowFull(scnt, ccnt, limit) {
				empty++
				if empty == napAfter {
					empty = 0
					nap(time.Since(start), totC, p.txDepth)
					continue
				}
			}
			yield(idle)
		} else {
			empty = 0
			lastDone = time.Now()
		}
		now := time.Since(start)
		for _, wc := range s.wc[:k] {
			if wc.Status != vhca.WCSuccess {
				return perftest.BWReport{}, fmt.Errorf("completion with error: %s (%d), QP %#x", wc.Status, wc.Status, wc.QPNum)
			}
			i := s.byQPN[wc.QPNum]
			if receiver {
				ccnt[i]++
				totC++
				if _, err := s.qps[i].PostRecv([]client.RecvWR{s.recvWR(i, size)}); err != nil {
					return perftest.BWReport{}, err
				}
			} else {
				done := min(uint64(p.cqMod), scnt[i]-ccnt[i])
				if scnt[i] == limit[i] && scnt[i]-ccnt[i] <= uint64(p.cqMod) {
					done = scnt[i] - ccnt[i]
				}
				ccnt[i] += done
				totC += done
			}
			if totC > 0 && totC-1 < uint64(len(completed)) {
				completed[totC-1] = now
			}
		}
	}
	end := time.Since(start)
	noPeak := p.duration > 0 || total > 20000 || receiver || len(posted) < int(totC)
	in := perftest.BWInput{Size: size, Iters: n, QPs: p.qps, CQMod: p.cqMod, Posted: posted, Completed: completed,
		NoPeak: noPeak, Unit: unit}
	if noPeak {
		in.Posted, in.Completed = []time.Duration{0}, []time.Duration{end}
	}
	if p.duration > 0 {
		in.Duration, in.Iters = true, totC
	}
	return perftest.ComputeBW(in)
}

// awaitEvent sleeps until the CQ has a completion (perftest -e), and
// arms it again; the poll after it finds what came meanwhile.
func (s *perfSide) awaitEvent() error {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.ch.GetEvent(c); err != nil {
		return fmt.Errorf("waiting for a completion event: %w", err)
	}
	eventsAwaited.Add(1)
	return s.cq.ReqNotify(false)
}

// eventsAwaited counts the completion events -e waited for.
var eventsAwaited atomic.Int64

// stalled reports why a loop that has polled nothing for a while should
// give up: the device is gone, or nothing has completed for 30 s.
func (s *perfSide) stalled(last time.Time) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if time.Since(last) > 30*time.Second {
		return fmt.Errorf("no completion within 30 s")
	}
	return nil
}

// windowFull tells whether every QP has its tx-depth of WRs in flight
// (or all it will post): the client has nothing to do but wait.
func (s *perfSide) windowFull(scnt, ccnt, limit []uint64) bool {
	for i := range scnt {
		if scnt[i]-ccnt[i] < uint64(s.p.txDepth) && scnt[i] < limit[i] {
			return false
		}
	}
	return true
}

// napAfter empty polls with a full window, a bandwidth test's client
// naps (where cores are few) for an eighth of the time its window takes
// to complete at the rate so far, up to napMax. Spinning, it would hold
// a core that verbsd's engine and the kernel's NAPI threads need to move
// its messages; an eighth of a window later the queue is still seven
// eighths full, so the rate measured is the stack's. It naps only when
// that is at least napMin: shorter naps cost more in wake-ups (a few
// microseconds each here) than they give back, and small messages go
// by in microseconds. Latency tests never nap.
const (
	napAfter = 16
	napMin   = 50 * time.Microsecond
	napMax   = 200 * time.Microsecond
)

func nap(elapsed time.Duration, completed uint64, depth int) {
	if client.ManyCores() || completed == 0 {
		return
	}
	d := elapsed / time.Duration(completed) * time.Duration(depth) / 8
	if d < napMin {
		return
	}
	ts := unix.NsecToTimespec(int64(min(d, napMax)))
	unix.Nanosleep(&ts, nil)
}

// runLat runs one size of a latency test and returns the post times of
// each iteration (perftest's samples are their differences).
func (s *perfSide) runLat(size uint64) ([]time.Duration, error) {
	p := s.p
	qp, mr := s.qps[0], s.mrs[0]
	wr := s.sendWR(0, size)
	wr.Flags = vhca.SendSignaled
	if p.test.Verb == perftest.VerbSend && size <= 64 {
		wr.Flags |= vhca.SendInline
	}
	recv := s.recvWR(0, size)
	wrs := []client.SendWR{wr} // reused: a literal each time is a copy each time
	posted := make([]time.Duration, p.iters)
	start := time.Now()
	// write_lat polls the last byte of the buffer the peer writes into.
	last := mr.Buf[s.half+size-1:]
	word := (*uint32)(unsafe.Pointer(uintptr(unsafe.Pointer(&last[0])) &^ 3))
	shift := 8 * (uintptr(unsafe.Pointer(&last[0])) & 3)
	for it := range p.iters {
		// The client sends first and the server answers, except in
		// write_lat, where perftest's server posts first and its client
		// waits (run_iter_lat_write: !(scnt < 1 && machine == SERVER)).
		mine := s.isCli != (p.test.Verb == perftest.VerbWrite)
		if !mine || p.test.Verb == perftest.VerbRead || p.test.Verb == perftest.VerbAtomic {
			if p.test.Verb == perftest.VerbWrite {
				for spin := 0; byte(atomic.LoadUint32(word)>>shift) != byte(it+1); spin++ {
					awaitPeer(spin)
				}
			} else if p.test.Verb == perftest.VerbSend {
				if err := s.waitRecv(); err != nil {
					return nil, err
				}
			}
		}
		if p.test.Verb == perftest.VerbWrite {
			mr.Buf[size-1] = byte(it + 1)
		}
		if wrs[0].Flags&vhca.SendInline != 0 {
			wrs[0].InlineData = mr.Buf[:size]
		}
		if p.rxDepth < 2 {
			if err := s.postOwed(recv); err != nil {
				return nil, err
			}
		}
		if _, err := qp.PostSend(wrs); err != nil {
			return nil, err
		}
		if oneThread {
			// Both sides share the thread (--loopback): the peer, who
			// waits for this message, polls from now on; this side's
			// own work (the stamp, the receive posted again, its send
			// completion) waits for the thread to come back, while
			// verbsd carries the peer's answer.
			runtime.Gosched()
		}
		// Stamped once posted, not before as perftest does: the
		// samples are the differences of consecutive stamps, one
		// iteration each wherever in it the stamp is taken, and a
		// clock read (25 ns here) between the peer's message and the
		// answer would lengthen every one.
		posted[it] = time.Since(start)
		if err := s.postOwed(recv); err != nil {
			return nil, err
		}
		if err := s.waitSend(); err != nil {
			return nil, err
		}
		if mine && (p.test.Verb == perftest.VerbWrite || p.test.Verb == perftest.VerbSend) {
			if p.test.Verb == perftest.VerbWrite {
				for spin := 0; byte(atomic.LoadUint32(word)>>shift) != byte(it+1); spin++ {
					awaitPeer(spin)
				}
			} else if err := s.waitRecv(); err != nil {
				return nil, err
			}
		}
	}
	return posted, nil
}

// postOwed posts again the receives the latency loop consumed.
func (s *perfSide) postOwed(recv client.RecvWR) error {
	for ; s.repost > 0; s.repost-- {
		if _, err := s.qps[0].PostRecv([]client.RecvWR{recv}); err != nil {
			return err
		}
	}
	return nil
}

// yield is called between empty polls: client.Relax lets verbsd run
// when cores are few, and Gosched lets the other side of --loopback (in
// this process) run. No system call with cores to spare. When both
// sides share one thread (oneThread), Gosched alone hands over: a
// goroutine switch costs a fraction of a microsecond, and verbsd keeps
// the other core.
func yield(spin int) {
	if oneThread {
		runtime.Gosched()
		return
	}
	client.Relax()
	if spin&63 == 63 {
		runtime.Gosched()
	}
}

// awaitPeer is yield for a loop that waits for what the other side has
// sent (a receive, or its WRITE landing in memory). When both sides share
// one thread, the other has then posted what this waits for, and what it
// has left (its own send completion) can wait: this side keeps the
// thread, and hands it over only every awaitSpins empty polls, in case
// the other has not got round to posting. A hand-over per empty poll,
// as yield does, cost about six goroutine switches per message.
func awaitPeer(spin int) {
	if !oneThread {
		yield(spin)
		return
	}
	if spin%awaitSpins == awaitSpins-1 {
		runtime.Gosched()
	}
}

// awaitSpins bounds the polls awaitPeer makes before it hands over: a
// few microseconds, a message's round trip through verbsd when its
// cores are slow.
const awaitSpins = 128

// oneThread: this process runs Go code on one thread (GOMAXPROCS 1).
var oneThread bool

// waitSend and waitRecv poll until a send (or receive) completion.
func (s *perfSide) waitSend() error { return s.wait(false) }

func (s *perfSide) waitRecv() error { return s.wait(true) }

func (s *perfSide) wait(recv bool) error {
	// The clock is read only once the wait has lasted (every 64 Ki empty
	// polls): a read costs tens of nanoseconds on each message's path.
	var start time.Time
	for spins := 0; ; spins++ {
		k, err := s.cq.Poll(s.wc[:1])
		if err != nil {
			return err
		}
		if k == 1 {
			wc := &s.wc[0]
			if wc.Status != vhca.WCSuccess {
				return fmt.Errorf("completion with error: %s (%d)", wc.Status, wc.Status)
			}
			if wc.Opcode&vhca.WCRecv != 0 {
				s.pendingRecv++
				s.repost++
			} else {
				s.pendingSend++
			}
		}
		if recv && s.pendingRecv > 0 {
			s.pendingRecv--
			return nil
		}
		if !recv && s.pendingSend > 0 {
			s.pendingSend--
			return nil
		}
		if k == 0 && s.ch != nil {
			if err := s.awaitEvent(); err != nil {
				return err
			}
			continue
		}
		if recv {
			awaitPeer(spins)
		} else {
			yield(spins)
		}
		if spins&0xFFFF == 0xFFFF {
			if start.IsZero() {
				start = time.Now()
			}
			if err := s.stalled(start); err != nil {
				return err
			}
		}
	}
}

// setPath makes the port's RoCEv2 go the way --path says (tap or xdp),
// where the port has both: the same tool then measures the TAP path and
// the fast path on one set-up.
func setPath(ctx *client.Context, port int, path string) error {
	var want client.DataPath
	switch path {
	case "":
		return nil
	case "tap":
		want = client.DataPathTAP
	case "xdp":
		want = client.DataPathXDP
	default:
		return fmt.Errorf("perf: --path %q (tap or xdp)", path)
	}
	pa, err := ctx.QueryPort(port)
	if err != nil {
		return err
	}
	if pa.Path == want {
		return nil
	}
	if pa.Paths&want == 0 {
		return fmt.Errorf("perf: --path %s: port %d of %s has %v only", path, port, ctx.Name, pa.Paths)
	}
	return ctx.SetPath(port, want)
}
