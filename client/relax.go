package client

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Relax is what a loop busy-polling a CQ calls between empty polls. The
// vHCA is software: verbsd runs on the same cores as the program. When
// there are fewer cores than busy threads (two pollers and verbsd on two
// cores), a poller that keeps its core leaves verbsd off the CPU for a
// whole time slice, and each message waits milliseconds; one that yields
// (sched_yield) lets verbsd run in microseconds. With cores to spare it
// costs a fraction of a microsecond. Poll itself never makes a system
// call; this is the loop's choice, not the library's.
func Relax() {
	if manyCores {
		return
	}
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}

// ManyCores reports whether the host has cores for two pollers, verbsd
// and the rest of the system, where Relax does nothing.
func ManyCores() bool { return manyCores }

// manyCores: cores for two pollers, verbsd, and the rest of the system.
var manyCores = runtime.NumCPU() >= 4
