// Command verifier-init is the /init of the initramfs that
// scripts/verifier-kernels.sh boots under qemu with an older kernel: as
// PID 1 it mounts what the steering program needs, loads the modules the
// script packed (/modules/order), loads and attaches the steering
// program (package ebpf) and an AF_XDP socket (package ebpf/xsk), steers
// a frame through them, runs the packed test binaries (/tests/*.test)
// and powers off. Each step prints one line the script looks for:
// "VERIFIER OK kernel=...", "ATTACH generic OK", "XSK OK copy", ...
//
// Run as another PID (as root, in a network namespace of its own:
// unshare -n), it skips the mounts, the modules and the power-off.
package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softib/softib/ebpf"
	"github.com/softib/softib/ebpf/xsk"
	"github.com/softib/softib/internal/vminit"
)

var pid1 = os.Getpid() == 1

func say(format string, a ...any) { fmt.Printf(format+"\n", a...) }

func main() {
	if pid1 {
		defer powerOff()
		// Whatever hangs, the machine stops: the script's timeout is
		// the last resort, not the plan.
		time.AfterFunc(8*time.Minute, func() { say("INIT TIMEOUT"); powerOff() })
		setup()
	}
	run()
	say("INIT DONE")
}

func powerOff() {
	if r := recover(); r != nil {
		say("INIT PANIC %v", r)
	}
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func setup() {
	os.Setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
	os.Setenv("HOME", "/")
	for _, m := range []struct{ fs, dir string }{
		{"devtmpfs", "/dev"}, {"proc", "/proc"}, {"sysfs", "/sys"}, {"tmpfs", "/run"}, {"tmpfs", "/tmp"},
		{"bpf", "/sys/fs/bpf"}, {"debugfs", "/sys/kernel/debug"}, {"tracefs", "/sys/kernel/tracing"},
	} {
		os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.fs, m.dir, m.fs, 0, ""); err != nil && err != unix.EBUSY {
			say("MOUNT %s %s FAIL %v", m.fs, m.dir, err)
		}
	}
	vminit.LoadModules("/modules", say)
}

func run() {
	var u unix.Utsname
	unix.Uname(&u)
	release := unix.ByteSliceToString(u.Release[:])
	say("KERNEL %s", release)

	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		say("LO FAIL %v", err)
		return
	}

	// Native mode on lo: lo has no driver hook, so this is expected to
	// fail, after the program passed the verifier.
	if s, err := ebpf.Attach(ebpf.Config{Netdev: "lo", Mode: ebpf.ModeNative}); err == nil {
		say("ATTACH native lo OK (unexpected)")
		s.Close()
	} else {
		say("ATTACH native lo FAIL (expected): %v", err)
	}

	s, err := ebpf.Attach(ebpf.Config{Netdev: "lo", Mode: ebpf.ModeGeneric})
	if err != nil {
		switch e := err.Error(); {
		case strings.Contains(e, "verifier refused"):
			say("VERIFIER FAIL kernel=%s\n%v", release, err)
		case strings.Contains(e, "loading the steering program"):
			// Refused before the verifier had its say (a map, BTF, ...).
			say("LOAD FAIL kernel=%s\n%v", release, err)
		default:
			say("VERIFIER OK kernel=%s", release)
			say("ATTACH generic FAIL %v", err)
		}
		return
	}
	say("VERIFIER OK kernel=%s", release)
	say("ATTACH generic OK mode=%v ifindex=%d queues=%d", s.Mode(), s.Ifindex(), s.Queues())
	steer(s)
	if err := s.Close(); err != nil {
		say("CLOSE FAIL %v", err)
	} else {
		say("CLOSE OK")
	}

	veth()
	tests()
}

// steer owns 127.0.0.1 and ::1 behind lo's all-zero MAC, binds an
// AF_XDP socket to lo's queue 0 and sends a UDP datagram to port 4791
// of each: the program must redirect both frames into the socket.
func steer(s *ebpf.Steering) {
	var zero [6]byte
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}
	for _, a := range addrs {
		if err := s.Own(zero, a, 1); err != nil {
			say("OWN FAIL %v", err)
			return
		}
	}
	say("OWN OK")
	x, err := xsk.Open(xsk.Config{Ifindex: s.Ifindex(), Queue: 0, Frames: 64, RingSize: 32})
	if err != nil {
		say("XSK FAIL %v", err)
		return
	}
	defer x.Close()
	mode := "copy"
	if x.ZeroCopy() {
		mode = "zerocopy"
	}
	say("XSK OK %s", mode)
	if err := s.SetSocket(0, x.FD()); err != nil {
		say("SETSOCKET FAIL %v", err)
		return
	}
	say("SETSOCKET OK")
	for _, a := range addrs {
		c, err := net.Dial("udp", netip.AddrPortFrom(a, 4791).String())
		if err != nil {
			say("STEER %v FAIL dial: %v", a, err)
			continue
		}
		c.Write([]byte("softib verifier-init"))
		c.Close()
		got := 0
		for deadline := time.Now().Add(3 * time.Second); got == 0 && time.Now().Before(deadline); {
			x.Recv(8, func(frame, _ []byte) { got = len(frame) })
			time.Sleep(10 * time.Millisecond)
		}
		if got == 0 {
			say("STEER %v FAIL nothing received", a)
		} else {
			say("STEER %v OK frame of %d bytes", a, got)
		}
	}
	if c, err := s.Counters(); err != nil {
		say("COUNTERS FAIL %v", err)
	} else {
		say("COUNTERS OK %+v", c)
	}
}

// veth attaches in native mode to a veth, a driver with an XDP hook
// (the veth module, from /modules if it is not built in).
func veth() {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "sibv0"}, PeerName: "sibv1"}
	if err := netlink.LinkAdd(v); err != nil {
		say("VETH SKIP %v", err)
		return
	}
	defer netlink.LinkDel(v)
	for _, n := range []string{"sibv0", "sibv1"} {
		if l, err := netlink.LinkByName(n); err == nil {
			netlink.LinkSetUp(l)
		}
	}
	s, err := ebpf.Attach(ebpf.Config{Netdev: "sibv0", Mode: ebpf.ModeNative})
	if err != nil {
		say("ATTACH native veth FAIL %v", err)
		return
	}
	say("ATTACH native veth OK")
	s.Close()
}

// tests runs the test binaries packed in /tests, verbose, each bounded.
func tests() {
	bins, _ := filepath.Glob("/tests/*.test")
	for _, b := range bins {
		name := strings.TrimSuffix(filepath.Base(b), ".test")
		cmd := exec.Command(b, "-test.v", "-test.count=1", "-test.timeout=180s")
		cmd.Dir = "/tests"
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		if err := cmd.Run(); err != nil {
			say("GOTEST %s FAIL %v", name, err)
		} else {
			say("GOTEST %s PASS", name)
		}
	}
}
