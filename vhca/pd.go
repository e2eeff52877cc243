package vhca

// PD is a protection domain (IBA 1.4 ch. 10, protection domains): the MRs,
// QPs, AHs and SRQs created in it may be used together, and only together.
// An RDMA request whose R_Key names a region of another PD than the
// responder QP's fails its access check with a remote access error.
type PD struct {
	Handle uint32
	users  int // MRs, QPs, AHs and SRQs created in it
}

// AllocPD creates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	if len(d.pds) >= d.Attr.MaxPD {
		return nil, errLimit("PDs", d.Attr.MaxPD)
	}
	d.nextHandle++
	pd := &PD{Handle: d.nextHandle}
	d.pds[pd.Handle] = pd
	return pd, nil
}

// DeallocPD destroys a protection domain nothing uses any more.
func (d *Device) DeallocPD(pd *PD) error {
	if d.pds[pd.Handle] != pd {
		return ErrNoSuchObject
	}
	if pd.users > 0 {
		return ErrBusy
	}
	delete(d.pds, pd.Handle)
	return nil
}
