package client

import (
	"errors"
	"syscall"
	"testing"

	"github.com/softib/softib/vhca"
)

// Multicast on the RoCE ports of the default devices: not supported yet
// (EOPNOTSUPP), and a detach from a group the QP never joined is EINVAL.
// (Native IB multicast end to end: cmd/vswitch's TestUDMulticastFabric.)
func TestMcastOnRoCE(t *testing.T) {
	o := startVerbsd(t)
	a := newSide(t, o, "vhca0", vhca.QPTypeUD, 1<<12)
	mgid := [16]byte{0xff, 0x12, 0x40, 0x1b, 15: 1}
	if err := a.qp.AttachMcast(mgid, 0xC001); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("AttachMcast on a RoCE port: %v, want EOPNOTSUPP", err)
	}
	if err := a.qp.DetachMcast(mgid, 0xC001); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("DetachMcast of a QP not attached: %v, want EINVAL", err)
	}
}
