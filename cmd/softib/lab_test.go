package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// softib lab up brings a two-namespace lab up, write_bw and send_lat run
// across it (TAP, bridges, veths: the real path), and lab down leaves
// nothing behind; up after a crash (a lab left up) cleans first.
func TestLabUpDown(t *testing.T) {
	softib, name, file := labFile(t, "t", "node a addr=10.12.0.1/24 host=10.12.0.101/24 addr=fd12::1/64 host=fd12::101/64\n"+
		"node b addr=10.12.0.2/24 host=10.12.0.102/24 addr=fd12::2/64 host=fd12::102/64 mtu=1500\n")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(softib, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("softib %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("lab", "up", file)
	run("lab", "up", file) // again, over the running lab: cleans and starts afresh
	nss, _ := exec.Command("ip", "netns", "list").Output()
	for _, ns := range []string{name, name + "-a", name + "-b"} {
		if !strings.Contains(string(nss), ns) {
			t.Fatalf("namespace %s missing: %s", ns, nss)
		}
	}
	// The lab's bridges are plain switches: no iptables hooks where
	// br_netfilter is loaded.
	if _, err := os.Stat("/proc/sys/net/bridge"); err == nil {
		for _, ns := range []string{name, name + "-a", name + "-b"} {
			out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/sys/net/bridge/bridge-nf-call-iptables").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "0" {
				t.Fatalf("%s: bridge-nf-call-iptables = %q (%v), want 0", ns, out, err)
			}
		}
	}
	sock := "/run/softib/" + name + ".sock"
	for _, test := range []string{"write_bw", "send_lat"} {
		srv := exec.Command("ip", "netns", "exec", name+"-a", softib, "-socket", sock, "perf", test, "-d", "vhca-a", "-x", "1", "-n", "200", "-p", "18631")
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		out, err := exec.Command("ip", "netns", "exec", name+"-b", softib, "-socket", sock, "perf", test,
			"-d", "vhca-b", "-x", "1", "-n", "200", "-p", "18631", "--json", "10.12.0.101").CombinedOutput()
		srv.Wait()
		if err != nil {
			t.Fatalf("%s across the lab: %v\n%s", test, err, out)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &m); err != nil || m["iterations"].(float64) != 200 {
			t.Fatalf("%s: %q (%v)", test, out, err)
		}
	}
	// softib -netns finds the lab's verbsd by itself.
	if out := run("-netns", name+"-b", "gids", "vhca-b"); !strings.Contains(out, "10.12.0.2") ||
		!strings.Contains(out, "fd12:0000:0000:0000:0000:0000:0000:0002") {
		t.Fatalf("softib -netns %s-b gids:\n%s", name, out)
	}
	run("lab", "down", file)
	nss, _ = exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(nss), name) {
		t.Fatalf("namespaces left after lab down: %s", nss)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Fatal("verbsd's socket left after lab down")
	}
}

// labFile builds softib and verbsd, and writes a topology file for a lab
// named prefix+pid with the given node lines; the lab is taken down at
// cleanup (whether or not the test brought it up). Root only.
func labFile(t *testing.T, prefix, nodes string) (softib, name, file string) {
	t.Helper()
	return labFileOpts(t, prefix, "", nodes)
}

// labBins holds softib, verbsd and vswitch as built once for all the lab
// tests of the process: linking three binaries for each test was CPU
// taken from the timing-sensitive tests of the packages beside.
var labBins struct {
	once sync.Once
	dir  string
	err  error
}

// labBinaries builds the lab's binaries, the first time, and returns
// their directory (TestMain removes it).
func labBinaries(t *testing.T) string {
	t.Helper()
	labBins.once.Do(func() {
		if labBins.dir, labBins.err = os.MkdirTemp("", "softib-lab-bin"); labBins.err != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", labBins.dir+"/", "../verbsd", "../vswitch", ".").CombinedOutput()
		if err != nil {
			labBins.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if labBins.err != nil {
		t.Fatal(labBins.err)
	}
	return labBins.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if labBins.dir != "" {
		os.RemoveAll(labBins.dir)
	}
	os.Exit(code)
}

// labFileOpts is labFile with options on the lab line (netns).
func labFileOpts(t *testing.T, prefix, opts, nodes string) (softib, name, file string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("the lab tests need root")
		}
		t.Skip("the lab tests need root")
	}
	softib = filepath.Join(labBinaries(t), "softib")
	name = fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	file = filepath.Join(t.TempDir(), "lab")
	if err := os.WriteFile(file, []byte("lab "+name+" "+opts+"\n"+nodes), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command(softib, "lab", "down", file).Run()
		// lab down keeps the daemons' logs, for a user to read after;
		// a test's would pile up in /run/softib run after run.
		logs, _ := filepath.Glob("/run/softib/" + name + "-*.log")
		for _, f := range append(logs, "/run/softib/"+name+".log") {
			os.Remove(f)
		}
	})
	return softib, name, file
}
