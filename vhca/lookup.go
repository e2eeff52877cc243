package vhca

// Every packet looks its QP up by QPN, and every access to memory its
// region by key; every posted WR checks that its QP still exists. A Go
// map lookup costs about 10 ns, three or four times a message. A small
// direct-mapped table in front of each map answers for the objects in
// use; the maps stay the record of what exists, and an object leaves its
// slot when it is destroyed.
const lookupSlots = 256

// lookupQP returns the QP numbered n, or nil.
func (d *Device) lookupQP(n uint32) *QP {
	i := n & (lookupSlots - 1)
	if qp := d.qpSlot[i]; qp != nil && qp.Num == n {
		return qp
	}
	qp := d.qps[n]
	if qp != nil {
		d.qpSlot[i] = qp
	}
	return qp
}

// ownsQP reports whether qp is a live QP of this device.
func (d *Device) ownsQP(qp *QP) bool { return qp != nil && d.lookupQP(qp.Num) == qp }

// forgetQP removes a destroyed QP from the table.
func (d *Device) forgetQP(qp *QP) {
	delete(d.qps, qp.Num)
	if i := qp.Num & (lookupSlots - 1); d.qpSlot[i] == qp {
		d.qpSlot[i] = nil
	}
}

// lookupMR returns the valid region whose key is key, all 32 bits compared.
func (d *Device) lookupMR(key uint32) *MR {
	i := key & (lookupSlots - 1)
	if mr := d.mrSlot[i]; mr != nil && mr.Key == key {
		return mr
	}
	mr := d.mrs[key]
	if mr != nil {
		d.mrSlot[i] = mr
	}
	return mr
}

// forgetMR removes a deregistered region from the table.
func (d *Device) forgetMR(mr *MR) {
	delete(d.mrs, mr.Key)
	if i := mr.Key & (lookupSlots - 1); d.mrSlot[i] == mr {
		d.mrSlot[i] = nil
	}
}
