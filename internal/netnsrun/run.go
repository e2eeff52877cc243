// Package netnsrun runs a function on an OS thread inside a network
// namespace: the sockets it makes, the netdevs it looks up by name and
// the programs it attaches are that namespace's, whichever thread uses
// them afterwards.
package netnsrun

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Run runs fn in the namespace at path (/var/run/netns/NAME), or
// directly when path is empty.
func Run(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", path, err)
	}
	defer h.Close()
	return RunHandle(h, fn)
}

// RunNamed runs fn in the namespace `ip netns add name` made.
func RunNamed(name string, fn func() error) error {
	return Run("/var/run/netns/"+name, fn)
}

// RunHandle runs fn in the namespace h refers to, or directly when h is
// not open. The thread goes back to the runtime if it could be switched
// back to its own namespace; otherwise it ends with its goroutine.
func RunHandle(h netns.NsHandle, fn func() error) error {
	if !h.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("entering namespace: %w", err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
