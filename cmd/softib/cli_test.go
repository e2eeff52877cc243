package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/cmd/softib/pingpong"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/verbsdtest"
)

// startVerbsd runs verbsd in the test process with two vHCAs on a pipe.
func startVerbsd(t *testing.T) *client.Options {
	t.Helper()
	_, sock := verbsdtest.Start(t, verbsd.Config{})
	return &client.Options{Socket: sock}
}

// capture runs f with os.Stdout redirected and returns what it printed.
func capture(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	ferr := f()
	os.Stdout = old
	w.Close()
	s := <-out
	if ferr != nil {
		t.Fatalf("%v\noutput:\n%s", ferr, s)
	}
	return s
}

// Every perftest of `softib perf --loopback --json` runs through verbsd
// and reports figures that are there (bandwidth and rate above zero,
// latencies ordered min <= typical <= max).
func TestPerfLoopbackJSON(t *testing.T) {
	o := startVerbsd(t)
	for _, tc := range []string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat",
		"write_bw -c UC", "send_bw -c UD -s 1024", "send_lat -c UD", "write_bw -q 3 -s 4096", "write_bw -a -n 20", "write_bw -D 1 -n 5",
		"write_bw -e", "send_bw -e", "send_lat -e", "send_lat -c UD -r 1", "send_lat -c UC -r 1"} {
		t.Run(strings.ReplaceAll(tc, " ", "_"), func(t *testing.T) {
			args := append(strings.Fields(tc), "--loopback", "--json", "-d", "vhca0")
			if !strings.Contains(tc, "-n") {
				args = append(args, "-n", "300")
			}
			events := eventsAwaited.Load()
			out := capture(t, func() error { return perfCmd(o, args) })
			if strings.HasSuffix(tc, " -e") && eventsAwaited.Load() == events {
				t.Errorf("-e: no completion event was waited for")
			}
			sc := bufio.NewScanner(strings.NewReader(out))
			lines := 0
			for sc.Scan() {
				var m map[string]any
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Fatalf("not JSON: %q", sc.Text())
				}
				lines++
				if strings.HasSuffix(strings.Fields(tc)[0], "_bw") {
					if m["bw_avg_gbps"].(float64) <= 0 || m["msg_rate_mpps"].(float64) <= 0 {
						t.Errorf("no bandwidth: %v", m)
					}
				} else if !(m["t_min_us"].(float64) > 0 && m["t_min_us"].(float64) <= m["t_typical_us"].(float64) &&
					m["t_typical_us"].(float64) <= m["t_max_us"].(float64)) {
					t.Errorf("latencies out of order: %v", m)
				}
			}
			want := 1
			if strings.Contains(tc, "-a") {
				want = 23 // 2 .. 2^23
			}
			if lines != want {
				t.Fatalf("%d JSON lines, want %d:\n%s", lines, want, out)
			}
		})
	}
}

// softib pingpong, server and client, across the pipe for rc, uc and ud.
func TestPingpongThroughVerbsd(t *testing.T) {
	o := startVerbsd(t)
	for i, tr := range []string{"rc", "uc", "ud"} {
		t.Run(tr, func(t *testing.T) {
			port := []string{"18611", "18612", "18613"}[i]
			srvErr := make(chan error, 1)
			srvFlags, err := pingpong.ParseFlags(tr, []string{"-d", "vhca0", "-g", "1", "-n", "200", "-p", port})
			if err != nil {
				t.Fatal(err)
			}
			cliFlags, err := pingpong.ParseFlags(tr, []string{"-d", "vhca1", "-g", "1", "-n", "200", "-p", port, "127.0.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			out := capture(t, func() error {
				go func() { srvErr <- runPingpong(o, srvFlags) }()
				for range 50 { // wait for the server's listener
					if err := runPingpong(o, cliFlags); err == nil {
						break
					} else if !strings.Contains(err.Error(), "refused") {
						return err
					}
				}
				return <-srvErr
			})
			if n := strings.Count(out, "200 iters in"); n != 2 {
				t.Fatalf("want both sides' results, got:\n%s", out)
			}
			if !bytes.Contains([]byte(out), []byte("GID ::ffff:10.0.0.2")) {
				t.Fatalf("client's address missing:\n%s", out)
			}
		})
	}
}

// devinfo and gids print ibv_devinfo's and show_gids's layouts.
func TestDevinfoAndGids(t *testing.T) {
	o := startVerbsd(t)
	out := capture(t, func() error { return devinfo(o, []string{"-v", "-d", "vhca1"}) })
	for _, want := range []string{"hca_id:\tvhca1\n", "\ttransport:\t\t\tInfiniBand (0)\n", "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n", "\t\t\tlink_layer:\t\tEthernet\n", "\tatomic_cap:\t\t\tATOMIC_GLOB (2)\n",
		"GID[  1]:\t\t::ffff:10.0.0.2, RoCE v2\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("devinfo -v lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "vhca0") {
		t.Errorf("devinfo -d vhca1 shows vhca0:\n%s", out)
	}
	if err := devinfo(o, []string{"-d", "nosuch"}); err == nil || !strings.Contains(err.Error(), "wasn't found") {
		t.Errorf("devinfo of an unknown device: %v", err)
	}
	out = capture(t, func() error { return gids(o, nil) })
	if !strings.Contains(out, "vhca0\t1\t1\t0000:0000:0000:0000:0000:ffff:0a00:0001\t10.0.0.1\tv2") ||
		!strings.HasSuffix(out, "n_gids_found=4\n") {
		t.Errorf("gids:\n%s", out)
	}
}

// The kernel-UDP yardsticks run and report over the loopback.
func TestUDPYardsticks(t *testing.T) {
	for i, tc := range []string{"udp_lat", "udp_bw", "udp_lat -busy"} {
		port := fmt.Sprint(18640 + i)
		test, opts, _ := strings.Cut(tc, " ")
		args := append(strings.Fields(opts), "-p", port, "-n", "300", "-s", "1000")
		out := capture(t, func() error {
			srv := make(chan error, 1)
			go func() { srv <- udpCmd(test, args) }()
			time.Sleep(200 * time.Millisecond)
			if err := udpCmd(test, append(args, "127.0.0.1")); err != nil {
				return err
			}
			return <-srv
		})
		want := map[string]string{"udp_lat": "300 round trips of 1000 bytes:", "udp_bw": "datagrams of 1000 bytes arrived",
			"udp_lat -busy": "300 round trips of 1000 bytes, busy polling:"}[tc]
		if !strings.Contains(out, want) {
			t.Fatalf("%s printed:\n%s", tc, out)
		}
	}
}

// A bandwidth run whose verbsd goes away ends with the device-fatal
// error instead of polling quiet CQs for ever: send_bw's server only
// polls, it never posts a send that would fail.
func TestPerfEndsWhenVerbsdGoes(t *testing.T) {
	srv, sock := verbsdtest.Start(t, verbsd.Config{})
	o := &client.Options{Socket: sock}
	done := make(chan error, 1)
	go func() {
		done <- perfCmd(o, []string{"send_bw", "--loopback", "--json", "-d", "vhca0", "-D", "30"})
	}()
	time.Sleep(1500 * time.Millisecond)
	srv.Shutdown()
	select {
	case err := <-done:
		t.Logf("perf: %v", err)
		if !errors.Is(err, client.ErrDeviceFatal) {
			t.Fatalf("perf ended with %v, want %v", err, client.ErrDeviceFatal)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("perf still runs 10 s after verbsd went away")
	}
}
