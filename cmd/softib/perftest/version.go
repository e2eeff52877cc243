package perftest

import (
	"bytes"
	"fmt"
	"strconv"
)

// DefaultVersion is the perftest version this package mirrors and announces
// in the version exchange.
const DefaultVersion = "6.29"

// DefaultPort is perftest's DEF_PORT, the TCP port of the setup exchange.
const DefaultPort = 18515

// versionSize is MAX_VERSION, the size of the version field on the wire.
const versionSize = 16

// Version thresholds at which perftest changes what it sends. perftest
// compares atof() of the remote version string against these.
const (
	minCompatVersion     = 5.70 // check_version_compatibility
	sysDataVersion       = 5.32 // check_sys_data
	itersU64Version      = 5.33 // xchg_bw_reports: 64-bit iterations
	negotiateVersion     = 6.28 // negotiate_params
	duplexBarrierVersion = 4.6  // local version needed for the duplex -a barrier
)

// ParseVersion reads a version string the way perftest does, with atof: the
// longest leading decimal number, 0 when there is none. "6.29" is 6.29,
// "" is 0.
func ParseVersion(s string) float64 {
	end := 0
	dot := false
	for end < len(s) {
		c := s[end]
		if c >= '0' && c <= '9' {
			end++
			continue
		}
		if c == '.' && !dot {
			dot = true
			end++
			continue
		}
		break
	}
	v, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return v
}

// encodeVersion lays out the version like perftest's char version[16] after
// strncpy: the string then NULs; longer strings are cut at 16 bytes.
func encodeVersion(v string) []byte {
	b := make([]byte, versionSize)
	copy(b, v)
	return b
}

// decodeVersion reads the string back up to its first NUL.
func decodeVersion(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// CheckVersionCompatibility mirrors check_version_compatibility: perftest
// refuses peers older than 5.70, and so do we.
func CheckVersionCompatibility(remote string) error {
	if ParseVersion(remote) < minCompatVersion {
		return fmt.Errorf("perftest: remote version %q is older than 5.70, not compatible", remote)
	}
	return nil
}
