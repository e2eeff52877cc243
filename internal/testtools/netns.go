package testtools

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Root skips a test that needs root outside CI, and fails it in CI,
// where every network test must run.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root")
	}
	t.Skip("this test needs root")
}

// IP runs ip(8) and fails the test if it fails.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Netns adds a network namespace named prefix and the test process's
// pid, with its loopback up, and deletes it (and with it every netdev
// inside) when the test ends, failed or not. It returns the name.
func Netns(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	exec.Command("ip", "netns", "del", name).Run() // a crashed run's
	IP(t, "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	IP(t, "-n", name, "link", "set", "lo", "up")
	// No duplicate address detection on the namespace's netdevs: their
	// IPv6 link-local addresses are usable at once (neighbour discovery
	// sends its solicitations from them).
	for _, conf := range []string{"all", "default"} {
		if out, err := exec.Command("ip", "netns", "exec", name, "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/"+conf+"/accept_dad").CombinedOutput(); err != nil {
			t.Fatalf("accept_dad in %s: %v: %s", name, err, out)
		}
	}
	return name
}

// VethPair joins namespaces a and b by a veth pair named veth0 at both
// ends, with the MTU and addresses given (CIDR, "" for none), up.
func VethPair(t testing.TB, a, b string, mtu int, addrA, addrB []string) {
	t.Helper()
	m := fmt.Sprint(mtu)
	IP(t, "-n", a, "link", "add", "veth0", "mtu", m, "type", "veth", "peer", "name", "veth0", "mtu", m, "netns", b)
	for _, x := range []struct {
		ns    string
		addrs []string
	}{{a, addrA}, {b, addrB}} {
		for _, ad := range x.addrs {
			IP(t, "-n", x.ns, "addr", "add", ad, "dev", "veth0", "nodad")
		}
		IP(t, "-n", x.ns, "link", "set", "veth0", "up")
	}
}
