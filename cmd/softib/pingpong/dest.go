package pingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Dest is what each side tells the other about its QP: struct
// pingpong_dest in the C programs.
type Dest struct {
	LID uint16   // the port's LID; 0 on RoCE
	QPN uint32   // 24-bit QP number
	PSN uint32   // 24-bit initial send PSN
	GID [16]byte // GID in network byte order; all zero without -g
}

// wireText is the C programs' template for the address message; its size,
// NUL included, is the size of every message written and read.
const wireText = "0000:000000:000000:00000000000000000000000000000000"

// MsgSize is the size in bytes of the address message on the TCP
// connection: the 51 characters of Dest.Wire and a terminating NUL.
const MsgSize = len(wireText) + 1

// Wire returns the address message's text, 51 characters, as main()'s
// sprintf("%04x:%06x:%06x:%s") with gid_to_wire_gid's GID writes it. The
// NUL that follows it on the wire is not included (see MsgSize).
//
// QPN and PSN are 24-bit quantities; they are masked to 24 bits here so the
// text always has the fixed width the peer's single 52-byte read expects
// (C would print more digits and overflow its buffer).
func (d Dest) Wire() string {
	// gid_to_wire_gid prints each 32-bit word with %08x after htobe32,
	// which on any host yields the GID's bytes in memory order: plain hex.
	return fmt.Sprintf("%04x:%06x:%06x:%s",
		d.LID, d.QPN&PSNMask, d.PSN&PSNMask, hex.EncodeToString(d.GID[:]))
}

// message returns the MsgSize bytes written on the connection.
func (d Dest) message() []byte {
	return append([]byte(d.Wire()), 0)
}

// ParseDest parses an address message, the inverse of Dest.Wire: it
// mirrors the sscanf("%x:%x:%x:%s") and wire_gid_to_gid of the C programs.
// Like C, it reads only up to the first NUL, so the raw 52-byte message can
// be passed as it is. Unlike sscanf it insists on the fixed layout the C
// programs always produce (4, 6 and 6 hex digits and a 32-digit GID,
// separated by colons), so a garbled message is an error rather than zeros.
// Upper-case hex is accepted.
func ParseDest(s string) (Dest, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if len(s) != len(wireText) || s[4] != ':' || s[11] != ':' || s[18] != ':' {
		return Dest{}, fmt.Errorf("pingpong: malformed address message %q", s)
	}
	lid, err1 := strconv.ParseUint(s[0:4], 16, 16)
	qpn, err2 := strconv.ParseUint(s[5:11], 16, 32)
	psn, err3 := strconv.ParseUint(s[12:18], 16, 32)
	gid, err4 := hex.DecodeString(s[19:])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Dest{}, fmt.Errorf("pingpong: malformed address message %q: %w", s, err)
	}
	d := Dest{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(psn)}
	copy(d.GID[:], gid)
	return d, nil
}

// IsGlobal reports whether the C programs would address this destination
// through a GRH: pp_connect_ctx tests only the GID's interface ID, its low
// eight bytes (dest->gid.global.interface_id), so an all-zero GID (no -g)
// means LID routing.
func (d Dest) IsGlobal() bool {
	for _, b := range d.GID[8:] {
		if b != 0 {
			return true
		}
	}
	return false
}
