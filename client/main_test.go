package client

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/verbsdtest"
)

// TestMain runs the package's examples against a verbsd of their own:
// they open devices with default options, which $SOFTIB_SOCKET points
// here. (The tests start their own verbsd each.)
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "softib-client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sock := filepath.Join(dir, "verbsd.sock")
	srv, err := verbsd.New(verbsd.Config{Socket: sock, Devices: verbsdtest.TwoDevices()})
	if err == nil {
		err = srv.Listen()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go srv.Serve()
	os.Setenv("SOFTIB_SOCKET", sock)
	code := m.Run()
	srv.Shutdown()
	os.RemoveAll(dir)
	os.Exit(code)
}
