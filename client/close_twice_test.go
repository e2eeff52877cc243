package client

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloseTwice: closing a context (or freeing a buffer) a second time
// must not close descriptors that are no longer its own: the numbers of
// those it closed the first time are handed out again at once.
func TestCloseTwice(t *testing.T) {
	o := startVerbsd(t)
	ctx, err := Open("vhca0", o)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := ctx.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	buf.Free()
	ctx.Close()
	// The lowest free numbers: those the first Close and Free freed.
	var files []*os.File
	for range 4 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		files = append(files, r, w)
	}
	if err := ctx.Close(); err == nil {
		t.Error("a second Close reported no error")
	}
	if err := buf.Free(); err == nil {
		t.Error("a second Free reported no error")
	}
	for _, f := range files {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil {
			t.Fatalf("a second Close or Free closed descriptor %d, which was no longer the context's: %v", f.Fd(), err)
		}
	}
}
