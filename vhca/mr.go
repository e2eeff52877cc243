package vhca

// MR is a registered memory region (IBA 1.4 ch. 10, memory regions). Its
// L_Key and R_Key are the same 32-bit key, as in rxe; the R_Key is honoured
// only for the remote rights the region was registered with.
type MR struct {
	PD     *PD
	Key    uint32 // L_Key and R_Key
	Access Access
	IOVA   uint64 // the address the consumer gave: remote and SGE addresses count from it
	Length uint64

	mem   Memory
	buf   []byte
	valid bool
}

// LKey and RKey are the keys a consumer puts in SGEs and hands to peers.
func (mr *MR) LKey() uint32 { return mr.Key }
func (mr *MR) RKey() uint32 { return mr.Key }

// RegMR registers mem as a region of pd, addressed from iova. Remote write
// and remote atomic access need local write too (IBA 1.4 ch. 10, as
// ibv_reg_mr enforces).
func (d *Device) RegMR(pd *PD, mem Memory, iova uint64, access Access) (*MR, error) {
	if pd == nil || d.pds[pd.Handle] != pd {
		return nil, ErrNoSuchObject
	}
	if access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind) != 0 {
		return nil, invalid("unknown access flags %#x", uint32(access))
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, invalid("remote write or atomic access needs local write")
	}
	buf := mem.Bytes()
	if uint64(len(buf)) > d.Attr.MaxMRSize || iova+uint64(len(buf)) < iova {
		return nil, invalid("region of %d bytes at %#x does not fit", len(buf), iova)
	}
	if len(d.mrs) >= d.Attr.MaxMR {
		return nil, errLimit("MRs", d.Attr.MaxMR)
	}
	key, ok := d.keys.alloc()
	if !ok {
		return nil, ErrKeysExhausted
	}
	mr := &MR{PD: pd, Key: key, Access: access, IOVA: iova, Length: uint64(len(buf)), mem: mem, buf: buf, valid: true}
	d.mrs[key] = mr
	pd.users++
	return mr, nil
}

// DeregMR destroys a region: its key stops working at once, for every
// packet processed after this call, and its memory is released. Packets
// of a message already half placed find the key gone and fail as a remote
// access error, never touching the released memory.
func (d *Device) DeregMR(mr *MR) error {
	if mr == nil || d.mrs[mr.Key] != mr {
		return ErrNoSuchObject
	}
	d.forgetMR(mr)
	mr.valid = false
	mr.buf = nil
	mr.PD.users--
	mr.mem.Release()
	return nil
}

// span returns the bytes [va, va+n) of the region, or false if any of them
// lies outside it. The arithmetic cannot overflow whatever a peer sends.
func (mr *MR) span(va uint64, n uint64) ([]byte, bool) {
	if !mr.valid || va < mr.IOVA {
		return nil, false
	}
	off := va - mr.IOVA
	if off > mr.Length || n > mr.Length-off {
		return nil, false
	}
	return mr.buf[off : off+n], true
}
