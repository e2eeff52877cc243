// This file measures how a TAP netdev's frames can best cross between
// user space and the kernel, for the question "batch I/O where the kernel
// allows; measure IFF_MULTI_QUEUE and IFF_VNET_HDR, keep what helps".
// A TAP fd takes one frame per write(2) and gives one per read(2): it has
// no batching call. So the options left to compare are
//
//   - plain: blocking fds opened with TUNSETIFF(IFF_TAP|IFF_NO_PI), one
//     writer goroutine and one reader goroutine;
//   - water: the same through github.com/songgao/water, as the package
//     does now (non-blocking fds driven by Go's poller);
//   - vnet_hdr: plain with IFF_VNET_HDR and a 12-byte virtio_net_hdr_v1
//     (zeroed on write, skipped on read) before each frame. Its gain
//     would be GSO and checksum offload, which RoCE frames cannot use
//     (each carries its own BTH and PSN), so only its per-frame cost is
//     measured here;
//   - multiqueue: plain with IFF_MULTI_QUEUE and two queues (fds) per
//     TAP, a writer per queue of TAP 1 and a reader per queue of TAP 2.
//
// Each benchmark builds a network namespace holding a bridge with two
// TAPs enslaved (MTU 1500), writes b.N UDP frames (to RoCEv2's port,
// 64 or 1024 bytes of payload) into TAP 1's fds, addressed to a MAC the
// bridge has learnt behind TAP 2, and reads them from TAP 2's fds. It
// reports frames/s (frames read over the time from the first write to
// the last frame read), lost (frames written but not read within 2 s of
// the last write: tap2 drops a frame when its queue's ring, txqueuelen
// frames, is full) and tx-frames/s (frames written over the time the
// writers took). The writers do not wait for the readers, so where frames
// are lost, frames/s is what the reading side keeps up with. The frames
// are built before the clock starts; nothing is allocated per frame
// (allocs/op shows it). Run as root, e.g.:
//
//	go test -run '^$' -bench TAPOptions -benchtime 200000x -count 8 ./vhca/link/tap
//
// On a 2-vCPU VM (Linux 6.18), the medians of 8 runs were 158-188k
// frames/s for every variant and both sizes (the cost is per frame, not
// per byte), each losing 10-25% of the frames. Runs of one variant spread
// by 10-15% within an invocation and up to 50% between invocations.
// water and multiqueue came out 5-15% above plain, vnet_hdr 0-7% below
// it: no option beat the noise.
package tap_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/songgao/water"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/testtools"
)

const (
	roceV2Port = 4791            // the frames' UDP destination; readers count only these
	flows      = 8               // UDP source ports per writer, for the queues to spread
	vnetHdrLen = 12              // struct virtio_net_hdr_v1
	waitLast   = 2 * time.Second // how long the last frames may take after the last write
)

var (
	macA = [6]byte{0x02, 0x5b, 0, 0, 0, 0x0a} // behind TAP 1: the frames' source
	macB = [6]byte{0x02, 0x5b, 0, 0, 0, 0x0b} // behind TAP 2: their destination
	ipA  = [4]byte{10, 91, 0, 1}
	ipB  = [4]byte{10, 91, 0, 2}
)

// A queue is one fd of a TAP: one frame per Write, one per Read.
type queue interface {
	Write([]byte) (int, error)
	Read([]byte) (int, error)
	Close() error
}

// fdQueue is a blocking fd used with raw syscalls.
type fdQueue int

func (q fdQueue) Write(p []byte) (int, error) { return unix.Write(int(q), p) }
func (q fdQueue) Read(p []byte) (int, error)  { return unix.Read(int(q), p) }
func (q fdQueue) Close() error                { return unix.Close(int(q)) }

type variant struct {
	name   string
	queues int  // per TAP
	vnet   bool // a virtio_net_hdr before each frame
	// open creates the TAP, from a thread in the lab's namespace.
	open func(name string, queues int, vnet bool) ([]queue, error)
}

// openRaw opens /dev/net/tun once per queue and attaches each fd to the
// TAP called name (TUNSETIFF; with IFF_MULTI_QUEUE, each call adds a queue).
func openRaw(name string, queues int, vnet bool) ([]queue, error) {
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	if vnet {
		flags |= unix.IFF_VNET_HDR
	}
	var qs []queue
	fail := func(what string, err error) ([]queue, error) {
		for _, q := range qs {
			q.Close()
		}
		return nil, fmt.Errorf("%s: %s: %w", name, what, err)
	}
	for range queues {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail("open /dev/net/tun", err)
		}
		qs = append(qs, fdQueue(fd))
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return fail("ifreq", err)
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fail("TUNSETIFF", err)
		}
		if vnet {
			if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
				return fail("TUNSETVNETHDRSZ", err)
			}
		}
	}
	return qs, nil
}

func openWater(name string, _ int, _ bool) ([]queue, error) {
	ifc, err := water.New(water.Config{DeviceType: water.TAP, PlatformSpecificParams: water.PlatformSpecificParams{Name: name}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return []queue{ifc}, nil
}

// inNetns runs fn on a thread moved into namespace ns. The thread stays
// locked, so it ends with its goroutine and no other goroutine runs in ns.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// frame builds an Ethernet/IPv4/UDP frame of payload zero bytes after
// hdr zero bytes (the virtio_net_hdr's room), from A to B or, if reply,
// from B to A.
func frame(hdr int, reply bool, sport, dport uint16, payload int) []byte {
	p := make([]byte, hdr+14+20+8+payload)
	e := p[hdr:]
	dst, src, sip, dip := macB, macA, ipA, ipB
	if reply {
		dst, src, sip, dip = macA, macB, ipB, ipA
	}
	copy(e[0:6], dst[:])
	copy(e[6:12], src[:])
	binary.BigEndian.PutUint16(e[12:], 0x0800)
	ip := e[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
	ip[6] = 0x40 // DF
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	copy(ip[12:16], sip[:])
	copy(ip[16:20], dip[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	u := e[34:42]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(8+payload)) // checksum 0: none
	return p
}

func flowPort(writer, flow int) uint16 { return uint16(49152 + writer*flows + flow) }

// counter is a reader's count of frames, on its own cache line.
type counter struct {
	n atomic.Int64
	_ [56]byte
}

// lab is a namespace with a bridge and two TAPs on it, tap1 (written)
// and tap2 (read), and the readers of tap2's queues.
type lab struct {
	ns      string
	tx, rx  []queue
	counts  []counter
	readers sync.WaitGroup
	rerr    []error
}

func newLab(b *testing.B, v variant) *lab {
	l := &lab{ns: testtools.Netns(b, "sibtapb")}
	err := inNetns(l.ns, func() error {
		// No IPv6 on the lab's netdevs: nothing of their own to read past.
		for _, conf := range []string{"all", "default"} {
			os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/disable_ipv6", []byte("1"), 0)
		}
		var err error
		if l.tx, err = v.open("tap1", v.queues, v.vnet); err != nil {
			return err
		}
		l.rx, err = v.open("tap2", v.queues, v.vnet)
		return err
	})
	// Registered after the namespace's deletion, so run before it.
	b.Cleanup(l.close)
	if err != nil {
		b.Fatal(err)
	}
	testtools.IP(b, "-n", l.ns, "link", "add", "br0", "type", "bridge", "stp_state", "0")
	for _, dev := range []string{"tap1", "tap2"} {
		testtools.IP(b, "-n", l.ns, "link", "set", dev, "mtu", "1500", "master", "br0", "up")
	}
	testtools.IP(b, "-n", l.ns, "link", "set", "br0", "up")
	return l
}

// read counts the frames for B that come in on tap2's queue r.
func (l *lab) read(r int, flen, hdr int) {
	defer l.readers.Done()
	q, buf := l.rx[r], make([]byte, 1<<16)
	for {
		n, err := q.Read(buf)
		if err != nil {
			l.rerr[r] = err
			return
		}
		e := buf[hdr:n]
		if n == flen && [6]byte(e[0:6]) == macB && binary.BigEndian.Uint16(e[36:]) == roceV2Port {
			l.counts[r].n.Add(1)
		}
	}
}

func (l *lab) received() int {
	n := int64(0)
	for i := range l.counts {
		n += l.counts[i].n.Load()
	}
	return int(n)
}

// close deletes the TAPs, which wakes their blocked readers (the queues
// are detached: read fails), waits for the readers and closes the fds.
func (l *lab) close() {
	for _, dev := range []string{"tap2", "tap1"} {
		exec.Command("ip", "-n", l.ns, "link", "del", dev).Run()
	}
	done := make(chan struct{})
	go func() { l.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		// Leave the fds open rather than close one a reader still uses.
		return
	}
	for _, q := range append(l.tx, l.rx...) {
		q.Close()
	}
}

func benchTAP(b *testing.B, v variant, payload int) {
	testtools.Root(b)
	l := newLab(b, v)
	hdr := 0
	if v.vnet {
		hdr = vnetHdrLen
	}
	flen := hdr + 14 + 20 + 8 + payload

	// frames[w]: writer w's frames, one per flow, written in turn.
	frames := make([][][]byte, len(l.tx))
	for w := range frames {
		for f := range flows {
			frames[w] = append(frames[w], frame(hdr, false, flowPort(w, f), roceV2Port, payload))
		}
	}

	// Teach the bridge that B is behind tap2 (else it floods every frame
	// to all its ports), and a multiqueue tap2 which of its queues gets
	// each writer's flows: tun remembers, by a symmetric hash, the queue a
	// flow was last written on (for some seconds), and sends that flow's
	// frames out there. So send each flow's reply from the queue whose
	// reader is to take it.
	for r, q := range l.rx {
		for f := range flows {
			if _, err := q.Write(frame(hdr, true, roceV2Port, flowPort(r, f), payload)); err != nil {
				b.Fatalf("tap2 queue %d: %v", r, err)
			}
		}
	}

	l.counts, l.rerr = make([]counter, len(l.rx)), make([]error, len(l.rx))
	for r := range l.rx {
		l.readers.Add(1)
		go l.read(r, flen, hdr)
	}

	// One frame of every flow, and wait for all of them: the path is up.
	for w, q := range l.tx {
		for _, f := range frames[w] {
			if _, err := q.Write(f); err != nil {
				b.Fatalf("tap1 queue %d: %v", w, err)
			}
		}
	}
	warm := len(l.tx) * flows
	for end := time.Now().Add(waitLast); l.received() < warm; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			b.Fatalf("the bridge passed %d of %d frames from tap1 to tap2 (readers: %v)", l.received(), warm, l.rerr)
		}
	}
	base := make([]int64, len(l.counts))
	for r := range l.counts {
		base[r] = l.counts[r].n.Load()
	}
	got0 := l.received()

	var writers sync.WaitGroup
	werr := make([]error, len(l.tx))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for w, q := range l.tx {
		n := b.N / len(l.tx)
		if w == 0 {
			n += b.N % len(l.tx)
		}
		writers.Add(1)
		go func() {
			defer writers.Done()
			fs := frames[w]
			for i := range n {
				if _, err := q.Write(fs[i%flows]); err != nil {
					werr[w] = err
					return
				}
			}
		}()
	}
	writers.Wait()
	got, last := l.received()-got0, time.Now()
	wrote := last
	for end := last.Add(waitLast); got < b.N && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
		if g := l.received() - got0; g != got {
			got, last = g, time.Now()
		}
	}
	b.StopTimer()

	for w, err := range werr {
		if err != nil {
			b.Fatalf("tap1 queue %d: write: %v", w, err)
		}
	}
	b.ReportMetric(float64(got)/last.Sub(start).Seconds(), "frames/s")
	b.ReportMetric(float64(b.N-got), "lost")
	b.ReportMetric(float64(b.N)/wrote.Sub(start).Seconds(), "tx-frames/s")
	if len(l.rx) > 1 {
		// The share of the frames the least busy reader read: 0.5 is even.
		least := int64(b.N)
		for r := range l.counts {
			least = min(least, l.counts[r].n.Load()-base[r])
		}
		b.ReportMetric(float64(least)/float64(max(got, 1)), "min-rxq-share")
	}
}

func BenchmarkTAPOptions(b *testing.B) {
	for _, v := range []variant{
		{name: "plain", queues: 1, open: openRaw},
		{name: "water", queues: 1, open: openWater},
		{name: "vnet_hdr", queues: 1, vnet: true, open: openRaw},
		{name: "multiqueue", queues: 2, open: openRaw},
	} {
		b.Run(v.name, func(b *testing.B) {
			for _, payload := range []int{64, 1024} {
				b.Run(fmt.Sprintf("%dB", payload), func(b *testing.B) { benchTAP(b, v, payload) })
			}
		})
	}
}
