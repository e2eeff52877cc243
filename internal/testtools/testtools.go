// Package testtools finds the external checkers tests run (tshark, the
// shared notes' check_pcap.py) the same way everywhere: outside CI a
// missing tool skips the test with how to install it; in CI (CI set) it
// fails, so a check can never pass by not running.
package testtools

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Require finds a tool by absolute path or in $PATH.
func Require(t testing.TB, path string) string {
	t.Helper()
	if filepath.IsAbs(path) {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	} else if p, err := exec.LookPath(path); err == nil {
		return p
	}
	msg := path + " not found (make test installs the tools: scripts/deps.sh)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// SharedDir is $SOFTIB_SHARED, or the project's shared notes: "shared"
// beside the repository (the directory holding go.mod).
func SharedDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("SOFTIB_SHARED"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(dir), "shared")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// CheckPcap is the path of the shared check_pcap.py.
func CheckPcap(t testing.TB) string {
	return Require(t, filepath.Join(SharedDir(t), "tools", "check_pcap.py"))
}
