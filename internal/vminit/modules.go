// Package vminit is what the init programs of the project's test VMs
// (scripts/verifier-init, scripts/rxe-interop-init) share: loading the
// kernel modules their scripts pack into the initramfs.
package vminit

import (
	"bufio"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LoadModules loads the modules dir/order lists, in order (the scripts
// list dependencies first), saying of each whether it loaded. A module
// already there counts as loaded. It returns false if there is no list.
func LoadModules(dir string, say func(format string, a ...any)) bool {
	f, err := os.Open(filepath.Join(dir, "order"))
	if err != nil {
		return false
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		name := sc.Text()
		err := load(filepath.Join(dir, name))
		if err == nil || err == unix.EEXIST {
			say("MODULE %s OK", name)
		} else {
			say("MODULE %s FAIL %v", name, err)
		}
	}
	return true
}

func load(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.FinitModule(int(f.Fd()), "", 0)
}
