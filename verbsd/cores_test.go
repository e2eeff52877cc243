package verbsd

import "testing"

func TestLoadavgRunning(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"0.36 1.33 1.72 1/78 30961\n", 1, true},
		{"12.00 9.10 8.00 17/1203 4242\n", 17, true},
		{"0.36 1.33 1.72 78 30961\n", 0, false},
		{"0.36 1.33 1.72 x/78 30961\n", 0, false},
		{"0.36 1.33\n", 0, false},
		{"", 0, false},
	} {
		got, ok := loadavgRunning([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("loadavgRunning(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// On this host the engine can ask: /proc/loadavg is there and parses.
func TestCoresToSpareReads(t *testing.T) {
	c := openCores()
	defer c.close()
	if c.fd < 0 {
		t.Skip("no /proc/loadavg")
	}
	n, err := readRunning(c)
	if err != nil || n < 1 {
		t.Fatalf("running threads = %d, %v: the test itself runs", n, err)
	}
}
