package cpulist

import (
	"slices"
	"testing"
)

// TestParse: Parse takes taskset -c's lists and refuses anything
// else with an error.
func TestParse(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "0": {0}, "1,3": {1, 3}, "0-2,5": {0, 1, 2, 5}, "4-4": {4}} {
		got, err := Parse(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "-1", "3-1", "1,", "0-", "2000", "1-5000"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("%q: %v, no error", in, got)
		}
	}
}
