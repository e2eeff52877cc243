package verbsd_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/softib/softib/verbsd"
)

// TestEngineCPUs: Config.EngineCPUs binds the engine's thread, and only
// it, to those CPUs; a CPU the host does not have is refused.
func TestEngineCPUs(t *testing.T) {
	n := runtime.NumCPU()
	if n < 2 {
		t.Skip("one CPU: nothing to bind to")
	}
	last := strconv.Itoa(n - 1)
	if _, err := verbsd.New(verbsd.Config{Socket: t.TempDir() + "/c.sock", Devices: twoDevices(), EngineCPUs: []int{n}}); err == nil || !strings.Contains(err.Error(), "engine CPU") {
		t.Fatalf("engine CPU %d on a host of %d: %v", n, n, err)
	}
	_, sock := startServer(t, verbsd.Config{Devices: twoDevices(), EngineCPUs: []int{n - 1}})
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
