package verbsd

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// The access rule: root, verbsd's own user, and members of the allowed
// group (primary or supplementary); nobody else.
func TestAccessRule(t *testing.T) {
	s := &Server{gid: 4242}
	self := int32(os.Getpid())
	for _, c := range []struct {
		cred unix.Ucred
		want bool
	}{
		{unix.Ucred{Pid: self, Uid: 0, Gid: 0}, true},
		{unix.Ucred{Pid: self, Uid: uint32(os.Getuid()), Gid: 1}, true},
		{unix.Ucred{Pid: self, Uid: 54321, Gid: 4242}, true},
		{unix.Ucred{Pid: self, Uid: 54321, Gid: 7}, false}, // this process is not in group 4242
		{unix.Ucred{Pid: 1 << 30, Uid: 54321, Gid: 7}, false},
	} {
		if os.Getuid() == 54321 {
			t.Skip("test uid collides")
		}
		if got := s.allowed(&c.cred); got != c.want {
			t.Errorf("%+v: allowed %v, want %v", c.cred, got, c.want)
		}
	}
	none := &Server{gid: -1}
	if none.allowed(&unix.Ucred{Pid: self, Uid: 54321, Gid: 4242}) {
		t.Error("a stranger admitted with no group configured")
	}
	// A supplementary group of the peer (read from /proc): this
	// process's own groups.
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if g != 0 {
			s := &Server{gid: g}
			if !s.allowed(&unix.Ucred{Pid: self, Uid: 54321, Gid: 99999}) {
				t.Errorf("member of supplementary group %d refused", g)
			}
			break
		}
	}
}
