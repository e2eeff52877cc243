package abi

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkCacheLinePingPong is the yardstick of verbsd's latency: the
// one-way time for a cache line to go from one process to another and
// back, halved. Two processes (this test binary, re-executed as the
// child) share a memfd page; each waits for the counter to reach its
// turn and increments it. ns/op is one one-way trip.
func BenchmarkCacheLinePingPong(b *testing.B) {
	fd, err := unix.MemfdCreate("softib-pingpong", unix.MFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 4096); err != nil {
		b.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	word := (*uint64)(unsafe.Pointer(&mem[0]))
	n := uint64(b.N)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCacheLineChild$")
	cmd.Env = append(os.Environ(), "SOFTIB_PINGPONG_CHILD="+strconv.FormatUint(n, 10))
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(fd), "memfd")} // fd 3 in the child
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// A child that ends before its turns are done would leave this
	// process spinning for ever: the waits look at exited now and then.
	var exited atomic.Bool
	waited := make(chan error, 1)
	go func() { err := cmd.Wait(); exited.Store(true); waited <- err }()
	ended := func() {
		b.Fatalf("the child ended at turn %d of %d: %v\n%s", atomic.LoadUint64(word), 2*n+1, <-waited, out.Bytes())
	}
	for spins := 1; atomic.LoadUint64(word) != 1; spins++ { // the child is ready
		if spins&0xFFFFF == 0 && exited.Load() {
			ended()
		}
	}
	b.ResetTimer()
	// Odd values are the child's turn to write, even ones ours.
	for v := uint64(1); v < 2*n+1; v += 2 {
		atomic.StoreUint64(word, v+1)
		for spins := 1; atomic.LoadUint64(word) != v+2; spins++ {
			if spins&0xFFFFF == 0 && exited.Load() {
				ended()
			}
		}
	}
	b.StopTimer()
	if err := <-waited; err != nil {
		b.Fatalf("child: %v\n%s", err, out.Bytes())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*n), "ns/oneway")
}

// TestCacheLineChild is the other process of BenchmarkCacheLinePingPong.
func TestCacheLineChild(t *testing.T) {
	s := os.Getenv("SOFTIB_PINGPONG_CHILD")
	if s == "" {
		t.Skip("the child of BenchmarkCacheLinePingPong")
	}
	n, _ := strconv.ParseUint(s, 10, 64)
	mem, err := unix.Mmap(3, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	word := (*uint64)(unsafe.Pointer(&mem[0]))
	atomic.StoreUint64(word, 1)
	for v := uint64(2); v < 2*n+2; v += 2 {
		for atomic.LoadUint64(word) != v {
		}
		atomic.StoreUint64(word, v+1)
	}
}
