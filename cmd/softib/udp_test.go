package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/mmsg"
)

var (
	udpServerLine = regexp.MustCompile(`udp_bw: (\d+) of the datagrams of (\d+) bytes arrived in (\S+): ([\d.]+) Gb/s, ([\d.]+) Mpps \(batches of (\d+)\)\n`)
	udpClientLine = regexp.MustCompile(`udp_bw: sent (\d+) datagrams of (\d+) bytes in (\S+): ([\d.]+) Gb/s, ([\d.]+) Mpps offered \(batches of (\d+)\)\n`)
)

// runUDPBW runs a udp_bw server on a free loopback port and a client
// against it, both with args, and returns what each printed.
func runUDPBW(t *testing.T, args ...string) (server, client string) {
	t.Helper()
	var sout, cout bytes.Buffer
	ready := make(chan net.Addr, 1)
	srv := make(chan error, 1)
	go func() {
		srv <- udpRun(&sout, "udp_bw", append([]string{"-p", "0"}, args...), func(a net.Addr) { ready <- a })
	}()
	var port int
	select {
	case a := <-ready:
		port = a.(*net.UDPAddr).Port
	case err := <-srv:
		t.Fatalf("server: %v", err)
	case <-time.After(2 * time.Second):
		t.Fatal("server not listening in 2s")
	}
	cargs := append([]string{"-p", strconv.Itoa(port)}, args...)
	if err := udpRun(&cout, "udp_bw", append(cargs, "127.0.0.1"), nil); err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	select {
	case err := <-srv:
		if err != nil {
			t.Fatalf("server: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("server not done 3s after the client")
	}
	return sout.String(), cout.String()
}

// udp_bw, batched or not, reports a plausible arrival on the server and
// what it sent on the client.
func TestUDPBWBatches(t *testing.T) {
	for _, b := range []int{64, 1} {
		t.Run(fmt.Sprint("b", b), func(t *testing.T) {
			t0 := time.Now()
			server, client := runUDPBW(t, "-n", "20000", "-s", "1024", "-b", strconv.Itoa(b))
			t.Logf("in %v:\n%s%s", time.Since(t0).Round(time.Millisecond), client, server)
			sm := udpServerLine.FindStringSubmatch(server)
			cm := udpClientLine.FindStringSubmatch(client)
			if sm == nil || cm == nil {
				t.Fatalf("server printed %q, client %q", server, client)
			}
			got, _ := strconv.Atoi(sm[1])
			if got <= 0 || got > 20000 {
				t.Errorf("%d datagrams arrived of 20000", got)
			}
			if sm[2] != "1024" || sm[6] != fmt.Sprint(b) || cm[1] != "20000" || cm[2] != "1024" || cm[6] != fmt.Sprint(b) {
				t.Errorf("server printed %q, client %q", server, client)
			}
			for _, f := range []string{sm[4], sm[5], cm[4], cm[5]} {
				if v, err := strconv.ParseFloat(f, 64); err != nil || v <= 0 {
					t.Errorf("rate %q: server printed %q, client %q", f, server, client)
				}
			}
		})
	}
}

// The client may send with batches and the server receive one at a time,
// and the other way round, and -n need not be a multiple of -b.
func TestUDPBWMixedBatches(t *testing.T) {
	var sout, cout bytes.Buffer
	ready := make(chan net.Addr, 1)
	srv := make(chan error, 1)
	go func() {
		srv <- udpRun(&sout, "udp_bw", []string{"-p", "0", "-b", "1"}, func(a net.Addr) { ready <- a })
	}()
	a := <-ready
	if err := udpRun(&cout, "udp_bw", []string{"-p", fmt.Sprint(a.(*net.UDPAddr).Port), "-b", "7", "-n", "100", "-s", "100", "127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-srv; err != nil {
		t.Fatal(err)
	}
	if m := udpServerLine.FindStringSubmatch(sout.String()); m == nil || m[1] != "100" || m[2] != "100" || m[6] != "1" {
		t.Errorf("server printed %q", sout.String())
	}
}

// -b beyond 1..1024 is refused, saying so.
func TestUDPBWBatchFlag(t *testing.T) {
	for _, b := range []string{"0", "2000", "-3"} {
		err := udpRun(io.Discard, "udp_bw", []string{"-b", b, "-p", "0", "127.0.0.1"}, nil)
		if err == nil || !strings.Contains(err.Error(), "-b "+b) || !strings.Contains(err.Error(), "1..1024") {
			t.Errorf("-b %s: %v", b, err)
		}
	}
}

// mmsghdr is the kernel's struct mmsghdr.
func TestUDPMmsghdrLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) == 8 && (unsafe.Sizeof(mmsg.Hdr{}) != 64 || unsafe.Offsetof(mmsg.Hdr{}.Len) != 56) {
		t.Errorf("mmsghdr is %d bytes, msg_len at %d", unsafe.Sizeof(mmsg.Hdr{}), unsafe.Offsetof(mmsg.Hdr{}.Len))
	}
}

// One sendmmsg call sends 64 datagrams, and one recvmmsg call receives
// all 64, each whole, in order, with where it came from.
func TestUDPSendmmsgRecvmmsg(t *testing.T) {
	const batch, size = 64, 1024
	// The receiver is a blocking socket (with a timeout), on which one
	// recvmmsg call waits for all it asks for.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "udp")
	defer f.Close()
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	rrc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := newUDPSender(c, batch, size)
	if err != nil {
		t.Fatal(err)
	}
	for j := range batch {
		binary.BigEndian.PutUint64(s.bufs[j], uint64(1000+j))
	}
	if n, err := mmsg.Send(s.rc, s.hs); n != batch || err != nil {
		t.Fatalf("sendmmsg sent %d of %d: %v", n, batch, err)
	}

	hs, bufs, names := mmsg.New(batch, 65536, true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := mmsg.Recv(rrc, hs)
		if n != batch || err != nil {
			t.Errorf("recvmmsg received %d of %d: %v", n, batch, err)
		}
		for i := range n {
			if hs[i].Len != size || binary.BigEndian.Uint64(bufs[i]) != uint64(1000+i) {
				t.Errorf("datagram %d: %d bytes, seq %d", i, hs[i].Len, binary.BigEndian.Uint64(bufs[i]))
			}
			if from := sockaddrAddrPort(&names[i]); from.String() != c.LocalAddr().String() {
				t.Errorf("datagram %d from %v, not %v", i, from, c.LocalAddr())
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(4 * time.Second):
		t.Fatal("recvmmsg did not return")
	}
}

// On a net.UDPConn (non-blocking) recvmmsg returns what has arrived, up
// to the batch, and waits for the first till the read deadline.
func TestUDPRecvmmsgNonblocking(t *testing.T) {
	r, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	hs, bufs, _ := mmsg.New(8, 2048, false)
	r.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := mmsg.Recv(rc, hs); n != 0 || !os.IsTimeout(err) {
		t.Fatalf("nothing sent: recvmmsg %d, %v", n, err)
	}
	c, err := net.DialUDP("udp4", nil, r.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 20 {
		c.Write(binary.BigEndian.AppendUint64(nil, uint64(i)))
	}
	r.SetReadDeadline(time.Now().Add(2 * time.Second))
	for next := 0; next < 20; {
		n, err := mmsg.Recv(rc, hs)
		if err != nil || n < 1 || n > 8 {
			t.Fatalf("recvmmsg %d, %v", n, err)
		}
		for i := range n {
			if hs[i].Len != 8 || binary.BigEndian.Uint64(bufs[i]) != uint64(next) {
				t.Fatalf("datagram %d: %d bytes, seq %d", next, hs[i].Len, binary.BigEndian.Uint64(bufs[i]))
			}
			next++
		}
	}
}

func TestUDPSeqSet(t *testing.T) {
	var s seqSet
	for _, seq := range []uint64{0, 63, 64, 5000, 1 << 20} {
		if !s.add(seq) || s.add(seq) {
			t.Errorf("%d", seq)
		}
	}
	if !s.add(1<<40) || !s.add(1<<40) {
		t.Error("beyond maxSeq")
	}
}
