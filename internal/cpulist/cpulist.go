// Package cpulist reads CPU lists in the kernel's list format, the one
// taskset -c and /proc's Cpus_allowed_list use: "0", "0,2", "1-3".
package cpulist

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse parses a CPU list as taskset -c takes it: numbers and
// ranges separated by commas ("0", "0,2", "1-3"). Empty: none.
func Parse(s string) ([]int, error) {
	var cpus []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b >= 1024 {
			return nil, fmt.Errorf("%q: want CPU numbers below 1024 and ranges such as 0,2-3", s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
