// Package verbsdtest runs a real verbsd inside a test process, for the
// tests of verbsd's clients (client, softib) and of verbsd itself.
package verbsdtest

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/softib/softib/verbsd"
)

// TwoDevices are two vHCAs joined by an in-memory pipe, as two hosts
// would be: vhca0 at 10.0.0.1 and vhca1 at 10.0.0.2 (GID index 1).
func TwoDevices() []verbsd.DeviceConfig {
	return []verbsd.DeviceConfig{
		{Name: "vhca0", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Pipe: "vhca1"},
		{Name: "vhca1", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}},
	}
}

// Start runs verbsd on a socket in a temporary directory (TwoDevices
// when cfg names none) and shuts it down at the test's cleanup, failing
// the test if it does not stop. It returns the server and its socket.
func Start(t testing.TB, cfg verbsd.Config) (*verbsd.Server, string) {
	t.Helper()
	if len(cfg.Devices) == 0 {
		cfg.Devices = TwoDevices()
	}
	cfg.Socket = filepath.Join(t.TempDir(), "verbsd.sock")
	srv, err := verbsd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		srv.Shutdown()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return within 10 s of Shutdown")
		}
	})
	return srv, cfg.Socket
}
