package verbsd

import (
	"bytes"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// cores tells whether the host has a core for the engine alone: whether
// the threads that want to run now (the fourth field of /proc/loadavg,
// "running/total") are no more than its CPUs. The engine spins only
// then; a busy engine sharing a core with a client would hold it for
// whole time slices.
type cores struct {
	fd  int // /proc/loadavg, or -1 where there is none: never spin
	n   int
	buf [128]byte
}

func openCores() *cores {
	fd, err := unix.Open("/proc/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		fd = -1
	}
	return &cores{fd: fd, n: runtime.NumCPU()}
}

// toSpare reads the running count now: one pread.
func (c *cores) toSpare() bool {
	running, err := readRunning(c)
	return err == nil && running <= c.n
}

func readRunning(c *cores) (int, error) {
	if c.fd < 0 {
		return 0, unix.EBADF
	}
	n, err := unix.Pread(c.fd, c.buf[:], 0)
	if err != nil {
		return 0, err
	}
	running, ok := loadavgRunning(c.buf[:n])
	if !ok {
		return 0, unix.EINVAL
	}
	return running, nil
}

func (c *cores) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// loadavgRunning parses the running count out of /proc/loadavg's
// "0.36 1.33 1.72 1/78 30961".
func loadavgRunning(b []byte) (int, bool) {
	f := bytes.Fields(b)
	if len(f) < 4 {
		return 0, false
	}
	run, _, ok := bytes.Cut(f[3], []byte("/"))
	if !ok || len(run) == 0 {
		return 0, false
	}
	n := 0
	for _, d := range run {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}

// cpuList is set in the kernel's list format, as taskset -c takes it:
// "0", "0,2".
func cpuList(set *unix.CPUSet) string {
	var b []byte
	for c := range 1024 { // a CPUSet's size
		if set.IsSet(c) {
			if len(b) > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(c), 10)
		}
	}
	return string(b)
}
