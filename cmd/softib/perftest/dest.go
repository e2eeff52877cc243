package perftest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Dest is perftest's struct pingpong_dest: what one QP tells its peer so the
// peer can address it. perftest sends it as fixed-width hex text
// (ethernet_write_keys), not as a binary struct.
type Dest struct {
	LID      uint16 // port LID; 0 on RoCE
	OutReads uint16 // max outstanding RDMA reads/atomics (-o)
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits; perftest draws it with lrand48() & 0xffffff
	RKey     uint32 // rkey of the QP's buffer
	VAddr    uint64 // address of the QP's buffer
	// TailMarkersVAddr is sent only with data validation (--data_validation).
	TailMarkersVAddr uint64
	GID              [16]byte // sent only when a GID index is in use
	SRQN             uint32   // XRC/DC SRQ number, else 0
}

// WireFormat selects which of perftest's four key formats a Dest travels in.
// Both peers must agree; perftest picks the format from its own settings
// only (ctx_hand_shake copies the local gid_index to the remote dest before
// reading), so a mismatch desynchronises the stream rather than failing.
type WireFormat struct {
	// GID is set when the GID is sent: gid_index != -1, which perftest
	// forces on Ethernet (RoCE) link layers and is off by default on IB.
	GID bool
	// DataValidation is set by --data_validation and adds the tail
	// markers address.
	DataValidation bool
}

// The message sizes perftest reads and writes (KEY_MSG_SIZE*), the
// terminating NUL included.
const (
	keyMsgSize      = 59
	keyMsgSizeGID   = 108
	keyMsgSizeDV    = 76
	keyMsgSizeGIDDV = 125
)

// Size is the number of bytes of one encoded Dest.
func (f WireFormat) Size() int {
	switch {
	case f.GID && f.DataValidation:
		return keyMsgSizeGIDDV
	case f.GID:
		return keyMsgSizeGID
	case f.DataValidation:
		return keyMsgSizeDV
	}
	return keyMsgSize
}

// Encode renders d in the text perftest's ethernet_write_keys produces with
// sprintf(KEY_PRINT_FMT*):
//
//	lid:out_reads:qpn:psn:rkey:vaddr[:tail_markers_vaddr]:srqn
//	"%04x:%04x:%06x:%06x:%08x:%016llx[:%016llx]:%08x"
//
// or, with a GID, the 16 GID bytes as "%02x:" each between vaddr and srqn
// and a trailing ':' after srqn. The result is Size() bytes long and ends in
// the NUL that perftest also writes. QPN and PSN must fit in 24 bits: a wider
// value would make sprintf overflow perftest's fixed buffer.
func (d Dest) Encode(f WireFormat) ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return nil, fmt.Errorf("perftest: QPN %#x or PSN %#x wider than 24 bits", d.QPN, d.PSN)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr)
	if f.DataValidation {
		fmt.Fprintf(&b, "%016x:", d.TailMarkersVAddr)
	}
	if f.GID {
		for _, g := range d.GID {
			fmt.Fprintf(&b, "%02x:", g)
		}
	}
	fmt.Fprintf(&b, "%08x", d.SRQN)
	if f.GID {
		b.WriteByte(':')
	}
	b.WriteByte(0)
	if b.Len() != f.Size() {
		// Cannot happen with the widths above; guards the size constants.
		return nil, fmt.Errorf("perftest: encoded dest is %d bytes, want %d", b.Len(), f.Size())
	}
	return []byte(b.String()), nil
}

// DecodeDest parses a message written by Encode or by perftest. Like
// ethernet_read_keys it splits the text at ':' and reads every field as
// hex, so it accepts what sscanf/strtol accept from a well-formed peer; it
// rejects a message of the wrong size or with missing or non-hex fields.
func DecodeDest(msg []byte, f WireFormat) (Dest, error) {
	var d Dest
	if len(msg) != f.Size() {
		return d, fmt.Errorf("perftest: dest message is %d bytes, want %d", len(msg), f.Size())
	}
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	fields := strings.Split(string(msg), ":")
	if f.GID && len(fields) > 0 && fields[len(fields)-1] == "" {
		fields = fields[:len(fields)-1] // the trailing ':' after srqn
	}
	want := 7
	if f.DataValidation {
		want++
	}
	if f.GID {
		want += 16
	}
	if len(fields) != want {
		return d, fmt.Errorf("perftest: dest message %q has %d fields, want %d", msg, len(fields), want)
	}
	vals := make([]uint64, len(fields))
	for i, s := range fields {
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return d, fmt.Errorf("perftest: dest message %q: field %d: %w", msg, i, err)
		}
		vals[i] = v
	}
	d.LID = uint16(vals[0])
	d.OutReads = uint16(vals[1])
	d.QPN = uint32(vals[2]) & 0xffffff
	d.PSN = uint32(vals[3]) & 0xffffff
	d.RKey = uint32(vals[4])
	d.VAddr = vals[5]
	rest := vals[6:]
	if f.DataValidation {
		d.TailMarkersVAddr = rest[0]
		rest = rest[1:]
	}
	if f.GID {
		for i := range d.GID {
			d.GID[i] = byte(rest[i])
		}
		rest = rest[16:]
	}
	d.SRQN = uint32(rest[0])
	return d, nil
}

// GIDIsIPv4 mirrors ipv6_addr_v4mapped: the GID is an IPv4-mapped address
// (::ffff:a.b.c.d) or an IPv4-encoded multicast address (ff0e::ffff:a.b.c.d).
// perftest uses it to refuse a RoCE pairing of an IPv4 and an IPv6 GID
// (ctx_check_gid_compatibility).
func GIDIsIPv4(gid [16]byte) bool {
	tail := gid[4] == 0 && gid[5] == 0 && gid[6] == 0 && gid[7] == 0 &&
		gid[8] == 0 && gid[9] == 0 && gid[10] == 0xff && gid[11] == 0xff
	if !tail {
		return false
	}
	head := [4]byte(gid[0:4])
	return head == [4]byte{} || head == [4]byte{0xff, 0x0e, 0, 0}
}

// CheckGIDCompatibility mirrors ctx_check_gid_compatibility, which every
// test runs on QP 0's destinations after the first exchange.
func CheckGIDCompatibility(local, remote Dest) error {
	if GIDIsIPv4(local.GID) != GIDIsIPv4(remote.GID) {
		return fmt.Errorf("perftest: incompatible GID types (one IPv4, one IPv6); use a different IP version")
	}
	return nil
}
