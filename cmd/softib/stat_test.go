package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// statLine parses one `softib stat` line into its link and counters.
func statLine(t *testing.T, line string) (string, map[string]uint64) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "link" || len(f)%2 != 0 {
		t.Fatalf("not a stat line: %q", line)
	}
	m := map[string]uint64{}
	for i := 2; i < len(f); i += 2 {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v in %q", f[i], err, line)
		}
		m[f[i]] = n
	}
	return f[1], m
}

// softib stat shows the packets a transfer moved, as a wire would have
// carried them (a 64 KiB WRITE is 16 packets of a 4096-byte MTU, also
// where verbsd moves it as one segment), in the text and JSON forms,
// and refuses what names no port.
func TestStat(t *testing.T) {
	o := startVerbsd(t)
	out := capture(t, func() error { return stat(o, nil) })
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line per port of vhca0 and vhca1:\n%s", out)
	}
	link, before := statLine(t, lines[0])
	if link != "vhca0/1" || len(before) != len(counterFields) {
		t.Fatalf("first line %q", lines[0])
	}

	const n, size = 300, 65536
	capture(t, func() error {
		return perfCmd(o, []string{"write_bw", "--loopback", "-d", "vhca0", "-n", strconv.Itoa(n), "-s", strconv.Itoa(size)})
	})
	_, after := statLine(t, strings.TrimSpace(capture(t, func() error { return stat(o, []string{"vhca0/1"}) })))
	sent, rcvd := after["sent_pkts"]-before["sent_pkts"], after["rcvd_pkts"]-before["rcvd_pkts"]
	// Loopback: both ends are vhca0's, so it received what it sent.
	if sent != rcvd || after["sent_bytes"]-before["sent_bytes"] != after["rcvd_bytes"]-before["rcvd_bytes"] {
		t.Errorf("sent %d packets, received %d: %v", sent, rcvd, after)
	}
	// perf's warm-up and set-up add a few; each WRITE is 16 packets and
	// is acknowledged at least once per 64 WRITEs.
	if sent < n*16 || sent > n*17+100 {
		t.Errorf("%d packets for %d WRITEs of %d bytes (16 packets each, and their ACKs)", sent, n, size)
	}
	if b := after["sent_bytes"] - before["sent_bytes"]; b < n*size || b > n*(size+16*100)+100*200 {
		t.Errorf("%d bytes sent for %d WRITEs of %d bytes", b, n, size)
	}
	for _, k := range []string{"retransmits", "drop_malformed", "drop_psn", "rcvd_nak"} {
		if after[k] != 0 {
			t.Errorf("%s %d on a lossless loopback", k, after[k])
		}
	}

	var rows []map[string]any
	js := capture(t, func() error { return stat(o, []string{"-j", "vhca0"}) })
	if err := json.Unmarshal([]byte(js), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("stat -j: %v: %s", err, js)
	}
	if rows[0]["ifname"] != "vhca0" || rows[0]["port"] != 1.0 || rows[0]["sent_pkts"].(float64) < float64(after["sent_pkts"]) {
		t.Errorf("stat -j: %v, text said %v", rows[0], after)
	}

	for arg, want := range map[string]string{"nosuch": `no device "nosuch"`, "vhca0/2": "has no port 2", "vhca0/x": `port "x"`} {
		if err := stat(o, []string{arg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("stat %s: %v, want %q", arg, err, want)
		}
	}
}
