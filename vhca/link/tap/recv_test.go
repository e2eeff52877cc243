package tap

import (
	"encoding/binary"
	"net"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/netnsrun"
	"github.com/softib/softib/internal/testtools"
)

// htons is the byte order AF_PACKET wants its protocol in.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Recv reads a queue of frames in growing batches (two, four, ...), in
// order and without losing one, and goes back to two once it found the
// queue empty; it never reads more than asked.
func TestRecvBatches(t *testing.T) {
	testtools.Root(t)
	ns := testtools.Netns(t, "tapb")
	// No IPv6 on the TAP: the kernel would send its own frames (MLD,
	// router solicitations) as it comes up.
	for _, conf := range []string{"all", "default"} {
		if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/"+conf+"/disable_ipv6").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	tp, err := Open(Config{Name: "tapb0", Netns: "/var/run/netns/" + ns, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()

	// Ten frames sent by the kernel on the netdev, which the TAP reads.
	const frames, etherType = 10, 0x88B5 // local experimental ethertype
	err = netnsrun.RunNamed(ns, func() error {
		ifi, err := net.InterfaceByName("tapb0")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(etherType)))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: htons(etherType), Halen: 6}
		for i := range frames {
			f := make([]byte, 60)
			copy(f, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2})
			binary.BigEndian.PutUint16(f[12:], etherType)
			f[14] = byte(i)
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var got []byte
	take := func(frame, seg []byte) {
		if len(frame) < 15 || binary.BigEndian.Uint16(frame[12:]) != etherType || seg != nil {
			t.Fatalf("unexpected frame % x", frame)
		}
		got = append(got, frame[14])
	}
	if n := tp.Recv(1, take); n != 1 {
		t.Fatalf("Recv(1) read %d frames", n)
	}
	for i, want := range []int{2, 4, 3, 0, 0} {
		if n := tp.Recv(256, take); n != want {
			t.Fatalf("call %d read %d frames, want %d (batch %d)", i, n, want, tp.batch)
		}
	}
	if tp.batch != minBatch {
		t.Errorf("batch %d after an empty read, want %d", tp.batch, minBatch)
	}
	for i, b := range got {
		if int(b) != i || len(got) != frames {
			t.Fatalf("frames read %v, want 0..%d in order", got, frames-1)
		}
	}
}
