package verbsd_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softib/softib/verbsd"
	"golang.org/x/sys/unix"
)

// TestEngineCPUs: Config.EngineCPUs binds the engine's thread, and only
// it, to those CPUs; a CPU the host does not have is refused.
func TestEngineCPUs(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	if allowed.Count() < 2 {
		t.Skip("one CPU: nothing to bind to")
	}
	cpu, other := -1, -1 // the last CPU the test may use, and one it may not
	for c := range 1024 {
		if allowed.IsSet(c) {
			cpu = c
		} else if other < 0 {
			other = c
		}
	}
	if _, err := verbsd.New(verbsd.Config{Socket: t.TempDir() + "/c.sock", Devices: twoDevices(), EngineCPUs: []int{other}}); err == nil || !strings.Contains(err.Error(), "engine CPU") {
		t.Fatalf("engine CPU %d, which verbsd may not use: %v", other, err)
	}
	last := strconv.Itoa(cpu)
	_, sock := startServer(t, verbsd.Config{Devices: twoDevices(), EngineCPUs: []int{cpu}})
	checkServes(t, sock)
	bound, others := 0, 0
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if strings.TrimSpace(v) == last {
					bound++
				} else {
					others++
				}
			}
		}
	}
	if bound != 1 || others == 0 {
		t.Fatalf("%d threads bound to CPU %s, %d others: want the engine's alone", bound, last, others)
	}
}
