package pingpong

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Transport selects which of the three C programs is being mirrored. The
// programs share their exchange and output but differ in flags, defaults and
// a few verbs attributes; every such difference hangs off this type.
type Transport uint8

// The three programs.
const (
	RC Transport = iota + 1 // ibv_rc_pingpong
	UC                      // ibv_uc_pingpong
	UD                      // ibv_ud_pingpong
)

// String returns "rc", "uc" or "ud".
func (t Transport) String() string {
	switch t {
	case RC:
		return "rc"
	case UC:
		return "uc"
	case UD:
		return "ud"
	}
	return fmt.Sprintf("Transport(%d)", uint8(t))
}

// Program returns the C program's name, e.g. "ibv_rc_pingpong".
func (t Transport) Program() string { return "ibv_" + t.String() + "_pingpong" }

// ParseTransport accepts "rc", "uc", "ud", the C program names
// ("ibv_rc_pingpong", ...) and paths ending in them, so that a binary can
// pass its own argv[0].
func ParseTransport(name string) (Transport, error) {
	base := strings.ToLower(filepath.Base(name))
	for _, t := range []Transport{RC, UC, UD} {
		if base == t.String() || base == t.Program() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("pingpong: unknown program %q (want rc, uc or ud)", name)
}

// DefaultSize is -s's default: 4096 for rc and uc, 1024 for ud (main() in
// each program). ud's usage text still says 2048; the code has used 1024
// since rdma-core commit 7ffa09b9c, to fit the default MTU.
func (t Transport) DefaultSize() uint32 {
	if t == UD {
		return 1024
	}
	return 4096
}

// HopLimit is the GRH hop limit each program's pp_connect_ctx puts in the
// address vector when the remote GID is global (Dest.IsGlobal).
func (t Transport) HopLimit() uint8 {
	if t == UD {
		return 64
	}
	return 1
}
