package verbsd_test

// A client that dies loses its resources within a bounded time, and its
// peers see the spec's error completions (DESIGN.md, decisions). The
// client is a child process, SIGKILLed; verbsd runs in this process, so
// what it holds for the client shows in /proc/self: the connection's
// descriptor and the mappings of the client's memfds and of its rings.

import (
	"bufio"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/vhca"
)

func TestClientDeathCleanup(t *testing.T) {
	_, sock := startServer(t, verbsd.Config{})
	parent := newPeer(t, sock, "vhca0", 1<<16)
	base := currentLevels(t)

	c := startChild(t, "peer", sock, "vhca1", fmt.Sprintf("%s=%d %d %x %d %d", envRemote,
		parent.ep.QPN, parent.ep.PSN, parent.ep.GID[:], parent.mr.Addr, parent.mr.RKey))
	defer c.kill()
	f := c.line(t)
	if len(f) != 4 || f[0] != "ready" {
		t.Fatalf("child said %q", f)
	}
	var remote client.Endpoint
	var gid []byte
	if _, err := fmt.Sscanf(f[1]+" "+f[2]+" "+f[3], "%d %d %x", &remote.QPN, &remote.PSN, &gid); err != nil {
		t.Fatal(err)
	}
	copy(remote.GID[:], gid)
	// Small timers: 4.096 µs × 2^8 ≈ 1 ms, one retry.
	if err := parent.connectTo(remote, 8, 1); err != nil {
		t.Fatal(err)
	}
	c.stdin.Write([]byte("go\n"))
	if f := c.line(t); len(f) != 1 || f[0] != "posted" {
		t.Fatalf("child said %q", f)
	}
	// The child's first WRITE reached us: the pair works.
	for i := range 4096 {
		if parent.buf.B[i] != byte(i*13+7) {
			t.Fatalf("byte %d of the child's WRITE is %#x", i, parent.buf.B[i])
		}
	}
	alive := currentLevels(t)
	// Its connection, and its region, CQ ring and QP rings mapped.
	if alive.sockets < base.sockets+1 || alive.memfds < base.memfds+3 || alive.goroutines < base.goroutines+1 {
		t.Fatalf("a live child costs %+v over %+v: the measure does not see it", alive, base)
	}

	c.kill()
	took := waitLevels(t, base, 5*time.Second)
	t.Logf("child's resources (%+v over %+v) released %v after its death", alive, base, took)

	// The peer is gone: the next SEND retries once and fails.
	wr := client.SendWR{WRID: 42, Opcode: vhca.WRSend, Flags: vhca.SendSignaled,
		SGL: []client.SGE{{Addr: parent.mr.Addr, Length: 64, LKey: parent.mr.LKey}}}
	if _, err := parent.qp.PostSend([]client.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wc := waitWC(t, parent.cq)
	if wc.WRID != 42 || wc.Status != vhca.WCRetryExcErr {
		t.Fatalf("send to the dead peer completed %+v (status %v), want RETRY_EXC_ERR", wc, wc.Status)
	}
	t.Logf("RETRY_EXC_ERR %v after posting", time.Since(start))
	attr, err := parent.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.State != vhca.QPStateError {
		t.Fatalf("QP in state %v after RETRY_EXC_ERR, want Error", attr.State)
	}
	wr.WRID = 43
	if _, err := parent.qp.PostSend([]client.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, parent.cq); wc.WRID != 43 || wc.Status != vhca.WCWRFlushErr {
		t.Fatalf("send after the error completed %+v, want a flush", wc)
	}
	checkServes(t, sock)
}

// TestClientDeathLoop connects and kills clients 1000 times (a few at a
// time) and checks that verbsd holds no more than before.
func TestClientDeathLoop(t *testing.T) {
	cycles, workers := 1000, 4
	if testing.Short() {
		cycles = 50
	}
	_, sock := startServer(t, verbsd.Config{})
	// One cycle first, so that what the first child costs this process
	// for good (os/exec's and the runtime's lazy set-up) is in the base.
	pre := currentLevels(t)
	c := startChild(t, "min", sock, "vhca0")
	c.line(t)
	c.kill()
	// Once verbsd has released the first child (its connection, its
	// mappings and goroutines), the rest is the base.
	waitLevels(t, levels{fds: 1 << 30, sockets: pre.sockets, memfds: pre.memfds, goroutines: pre.goroutines}, 5*time.Second)
	base := currentLevels(t)

	start := time.Now()
	deadline := start.Add(150 * time.Second)
	var (
		mu   sync.Mutex
		errs []string
		done int
		wg   sync.WaitGroup
		jobs = make(chan int)
		peak = base
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if err := cycle(sock); err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					continue
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < cycles && time.Now().Before(deadline); i++ {
		if i%50 == 0 {
			l := currentLevels(t)
			peak = levels{max(peak.fds, l.fds), max(peak.sockets, l.sockets), max(peak.memfds, l.memfds), max(peak.goroutines, l.goroutines)}
		}
		mu.Lock()
		nerr := len(errs)
		mu.Unlock()
		if nerr > 0 {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	if len(errs) > 0 {
		t.Fatalf("%d cycles failed, the first: %s", len(errs), errs[0])
	}
	if done != cycles {
		t.Fatalf("%d of %d cycles within %v", done, cycles, deadline.Sub(start))
	}
	took := waitLevels(t, base, 5*time.Second)
	end := currentLevels(t)
	t.Logf("%d connect/kill cycles, %d at a time, in %v (%v each); levels %+v before, %+v after (settled in %v), peak seen %+v",
		cycles, workers, elapsed.Round(time.Millisecond), (elapsed / time.Duration(cycles)).Round(time.Microsecond),
		base, end, took, peak)
	checkServes(t, sock)
}

// cycle runs one "min" child until it says it is ready, and SIGKILLs it.
func cycle(sock string) error {
	cmd := childCmd("min", sock, "vhca0")
	if _, err := cmd.StdinPipe(); err != nil { // held open: the child waits on it
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "ready\n" {
			return fmt.Errorf("child said %q", s)
		}
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("child not ready within 20 s")
	}
}
