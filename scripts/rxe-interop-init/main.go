// Command rxe-interop-init is the /init of the initramfs that
// scripts/rxe-interop.sh boots under qemu with Debian 12's 6.1 kernel:
// as PID 1 it mounts proc, sys and dev, loads the modules the script
// packed (/modules/order: ib_core, ib_uverbs, rdma_rxe and their
// dependencies, the NIC's driver), gives eth0 its address and MTU
// (kernel parameters rxeinterop.addr=IP/LEN, rxeinterop.mtu=N), creates
// the Soft-RoCE device (`rdma link add rxe0 type rxe netdev eth0`),
// prints its GID table and ibv_devinfo, and serves commands from the
// host on TCP port 7000 (rxeinterop.port=N) until told to power off.
//
// The control protocol: one connection per command, one line
//
//	TAG TIMEOUT WAITPORT PROGRAM ARG...
//
// (space-separated, no quoting). The init runs PROGRAM, sends its
// standard output and error, merged, back on the connection and copies
// each line to the console as "[TAG] line". With WAITPORT > 0 it sends
// "LISTENING WAITPORT" as soon as a TCP socket listens on that port (a
// server is ready for its client). The last line is "EXIT rc=N" (or
// "EXIT timeout" after TIMEOUT seconds, the program killed). PROGRAM
// "sh" runs the rest of the line as a shell script (sh -c); "poweroff"
// stops the machine.
//
// Every line the script looks for in the serial log starts with a
// word in capitals: MODULE, NET, RXE, GID, INIT.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/vminit"
)

var (
	consoleMu sync.Mutex
	params    = map[string]string{}
)

func say(format string, a ...any) {
	consoleMu.Lock()
	defer consoleMu.Unlock()
	fmt.Printf(format+"\n", a...)
}

func param(k, def string) string {
	if v, ok := params[k]; ok {
		return v
	}
	return def
}

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "rxe-interop-init: meant to run as PID 1 of a VM")
		os.Exit(2)
	}
	defer powerOff()
	setup()
	limit, _ := strconv.Atoi(param("rxeinterop.limit", "1500"))
	time.AfterFunc(time.Duration(limit)*time.Second, func() { say("INIT TIMEOUT after %ds", limit); powerOff() })
	if err := network(); err != nil {
		say("NET FAIL %v", err)
		return
	}
	if err := rxe(); err != nil {
		say("RXE FAIL %v", err)
		return
	}
	serve()
}

func powerOff() {
	if r := recover(); r != nil {
		say("INIT PANIC %v", r)
	}
	say("INIT POWEROFF")
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func setup() {
	os.Setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
	os.Setenv("LD_LIBRARY_PATH", "/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu")
	os.Setenv("HOME", "/")
	for _, m := range []struct{ fs, dir string }{
		{"devtmpfs", "/dev"}, {"proc", "/proc"}, {"sysfs", "/sys"}, {"tmpfs", "/run"}, {"tmpfs", "/tmp"},
	} {
		os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.fs, m.dir, m.fs, 0, ""); err != nil && err != unix.EBUSY {
			say("MOUNT %s %s FAIL %v", m.fs, m.dir, err)
		}
	}
	if b, err := os.ReadFile("/proc/cmdline"); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if k, v, ok := strings.Cut(f, "="); ok {
				params[k] = v
			}
		}
	}
	var u unix.Utsname
	unix.Uname(&u)
	say("KERNEL %s", unix.ByteSliceToString(u.Release[:]))
	if !vminit.LoadModules("/modules", say) {
		say("MODULE none packed")
	}
}

// network brings lo and eth0 up, eth0 with its address and MTU.
func network() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	var eth netlink.Link
	for deadline := time.Now().Add(30 * time.Second); ; {
		if eth, err = netlink.LinkByName("eth0"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no eth0 after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	mtu, _ := strconv.Atoi(param("rxeinterop.mtu", "1500"))
	if err := netlink.LinkSetMTU(eth, mtu); err != nil {
		return fmt.Errorf("eth0 mtu %d: %v", mtu, err)
	}
	addr, err := netlink.ParseAddr(param("rxeinterop.addr", "10.99.0.2/24"))
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("eth0 addr %v: %v", addr, err)
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		return err
	}
	say("NET OK eth0 %s mtu %d mac %s", addr.IPNet, mtu, eth.Attrs().HardwareAddr)
	return nil
}

// rxe creates rxe0 on eth0 and prints what the tests need to know of it.
func rxe() error {
	if out, err := exec.Command("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "eth0").CombinedOutput(); err != nil {
		return fmt.Errorf("rdma link add: %v: %s", err, out)
	}
	run("rdma", "link", "show")
	want := "::ffff:" + strings.Split(param("rxeinterop.addr", "10.99.0.2/24"), "/")[0]
	gidIdx := -1
	// The IPv4 GID appears as the netdev's address is seen by the
	// RoCE GID management: wait for it.
	for deadline := time.Now().Add(30 * time.Second); gidIdx < 0 && time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		gidIdx = findGID(want)
	}
	gids("rxe0")
	if gidIdx < 0 {
		return fmt.Errorf("no GID %s on rxe0", want)
	}
	run("ibv_devices")
	run("ibv_devinfo", "-v", "-d", "rxe0")
	say("GID INDEX %d %s", gidIdx, want)
	return nil
}

// gidEntries lists rxe0 port 1's GID table: index, GID, type.
func gidEntries(dev string) [][3]string {
	dir := "/sys/class/infiniband/" + dev + "/ports/1/gids"
	names, _ := filepath.Glob(dir + "/*")
	sort.Slice(names, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(names[i]))
		b, _ := strconv.Atoi(filepath.Base(names[j]))
		return a < b
	})
	var out [][3]string
	for _, n := range names {
		g, err := os.ReadFile(n)
		if err != nil {
			continue
		}
		gid := strings.TrimSpace(string(g))
		if gid == "0000:0000:0000:0000:0000:0000:0000:0000" {
			continue
		}
		idx := filepath.Base(n)
		typ, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "gid_attrs/types", idx))
		out = append(out, [3]string{idx, gid, strings.TrimSpace(string(typ))})
	}
	return out
}

func findGID(want string) int {
	wip := net.ParseIP(want)
	for _, e := range gidEntries("rxe0") {
		// sysfs prints the GID as 8 groups of 4 hex digits.
		if ip := net.ParseIP(e[1]); ip != nil && ip.Equal(wip) && strings.Contains(e[2], "v2") {
			i, _ := strconv.Atoi(e[0])
			return i
		}
	}
	return -1
}

func gids(dev string) {
	for _, e := range gidEntries(dev) {
		say("GID %s %s %s %s", dev, e[0], e[1], e[2])
	}
}

// run runs a program, its output to the console.
func run(prog string, args ...string) {
	out, err := exec.Command(prog, args...).CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		say("[%s] %s", prog, l)
	}
	if err != nil {
		say("[%s] %v", prog, err)
	}
}

func serve() {
	port := param("rxeinterop.port", "7000")
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		say("INIT FAIL control port: %v", err)
		return
	}
	say("INIT READY control port %s", port)
	done := make(chan struct{})
	var once sync.Once
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-done: // poweroff closed the listener
			default:
				say("INIT FAIL accept: %v", err)
			}
			return
		}
		go func() {
			if command(c) {
				once.Do(func() { close(done) })
				l.Close()
			}
		}()
		select {
		case <-done:
			return
		default:
		}
	}
}

// command serves one control connection; true if it was "poweroff".
func command(c net.Conn) (off bool) {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return false
	}
	f := strings.Fields(line)
	if len(f) < 4 {
		fmt.Fprintf(c, "EXIT bad command %q\n", line)
		return false
	}
	tag := f[0]
	timeout, _ := strconv.Atoi(f[1])
	waitPort, _ := strconv.Atoi(f[2])
	argv := f[3:]
	if argv[0] == "sh" {
		// The rest of the line is a shell script, taken as it is.
		rest := strings.TrimSpace(line)
		for range 4 { // TAG TIMEOUT WAITPORT sh
			rest = strings.TrimLeft(rest, " \t")
			if i := strings.IndexAny(rest, " \t"); i >= 0 {
				rest = rest[i:]
			} else {
				rest = ""
			}
		}
		argv = []string{"sh", "-c", rest}
	}
	if argv[0] == "poweroff" {
		fmt.Fprintf(c, "EXIT rc=0\n")
		return true
	}
	var wmu sync.Mutex
	send := func(s string) {
		wmu.Lock()
		defer wmu.Unlock()
		io.WriteString(c, s+"\n")
	}
	say("[%s] $ %s", tag, strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	pr, pw, _ := os.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		say("[%s] EXIT start: %v", tag, err)
		send("EXIT start: " + err.Error())
		return false
	}
	pw.Close()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			say("[%s] %s", tag, sc.Text())
			send(sc.Text())
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if waitPort > 0 {
		go func() {
			for {
				select {
				case <-copied:
					return
				default:
				}
				if listening(waitPort) {
					say("[%s] LISTENING %d", tag, waitPort)
					send(fmt.Sprintf("LISTENING %d", waitPort))
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	var result string
	select {
	case err := <-exited:
		<-copied
		result = fmt.Sprintf("EXIT rc=%d", cmd.ProcessState.ExitCode())
		if err != nil && cmd.ProcessState.ExitCode() < 0 {
			result += " (" + err.Error() + ")"
		}
	case <-time.After(time.Duration(timeout) * time.Second):
		cmd.Process.Kill()
		<-exited
		<-copied
		result = fmt.Sprintf("EXIT timeout after %ds", timeout)
	}
	pr.Close()
	say("[%s] %s", tag, result)
	send(result)
	return false
}

// listening tells whether a TCP socket (v4 or v6) listens on port.
func listening(port int) bool {
	hex := fmt.Sprintf(":%04X", port)
	for _, p := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) > 3 && strings.HasSuffix(f[1], hex) && f[3] == "0A" {
				return true
			}
		}
	}
	return false
}
