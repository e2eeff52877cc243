package abi

import (
	"unsafe"

	"github.com/softib/softib/vhca"
)

// Conversions between the messages and the vhca types both sides use in
// Go. (The enumerations are libibverbs' values on both sides.)

// PutWC writes a completion into the CQE, leaving its sequence word
// alone.
func (c CQE) PutWC(wc *vhca.WC) { *c.Entry() = *wc }

// Entry is the CQE as a vhca.WC, whose fields are a CQE's in their
// order, at their offsets (off* in wqe.go, TestCQELayout), in host byte
// order, and end before the sequence word. A completion is written and
// read through it in one run of stores or loads, with one bounds check
// where each accessor checks its own; vhca writes completions into the
// client's ring through it (vhca.CQRing). Both ends of a completion are
// hot: verbsd writes two per message, the client reads them while the
// other side waits.
func (c CQE) Entry() *vhca.WC {
	_ = c[offCQESeq-1]
	return (*vhca.WC)(unsafe.Pointer(&c[0]))
}

// WC reads the CQE into a completion, field by field.
func (c CQE) WC(wc *vhca.WC) {
	p := c.Entry()
	wc.WRID = p.WRID
	wc.Status, wc.Opcode, wc.SL, wc.DLIDPath = p.Status, p.Opcode, p.SL, p.DLIDPath
	wc.VendorErr, wc.ByteLen, wc.Imm, wc.QPNum, wc.SrcQP = p.VendorErr, p.ByteLen, p.Imm, p.QPNum, p.SrcQP
	wc.Flags, wc.PKeyIndex, wc.SLID = p.Flags, p.PKeyIndex, p.SLID
}

// FromAV encodes an address vector.
func FromAV(a *vhca.AV) AV {
	return AV{
		DGID: a.GRH.DGID, FlowLabel: a.GRH.FlowLabel, DLID: a.DLID, SL: a.SL,
		SrcPathBits: a.SrcPathBits, StaticRate: a.StaticRate, IsGlobal: b2u(a.IsGlobal),
		Port: a.Port, SGIDIndex: a.GRH.SGIDIndex, HopLimit: a.GRH.HopLimit, TrafficClass: a.GRH.TrafficClass,
	}
}

// VHCA decodes an address vector.
func (a *AV) VHCA() vhca.AV {
	return vhca.AV{
		DLID: a.DLID, SL: a.SL, SrcPathBits: a.SrcPathBits, StaticRate: a.StaticRate,
		IsGlobal: a.IsGlobal != 0, Port: a.Port,
		GRH: vhca.GlobalRoute{DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex,
			HopLimit: a.HopLimit, TrafficClass: a.TrafficClass},
	}
}

// FromCap encodes queue sizes.
func FromCap(c *vhca.QPCap) QPCap {
	return QPCap{MaxSendWR: u32(c.MaxSendWR), MaxRecvWR: u32(c.MaxRecvWR), MaxSendSGE: u32(c.MaxSendSGE),
		MaxRecvSGE: u32(c.MaxRecvSGE), MaxInlineData: u32(c.MaxInlineData)}
}

// VHCA decodes queue sizes; values beyond int32 become -1, which every
// check refuses.
func (c *QPCap) VHCA() vhca.QPCap {
	return vhca.QPCap{MaxSendWR: i32(c.MaxSendWR), MaxRecvWR: i32(c.MaxRecvWR), MaxSendSGE: i32(c.MaxSendSGE),
		MaxRecvSGE: i32(c.MaxRecvSGE), MaxInlineData: i32(c.MaxInlineData)}
}

// FromQPAttr encodes QP attributes.
func FromQPAttr(a *vhca.QPAttr) QPAttr {
	return QPAttr{
		State: uint8(a.State), CurState: uint8(a.CurState), PathMTU: uint8(a.PathMTU),
		EnSQDAsyncNotify: b2u(a.EnSQDAsyncNotify), SQDraining: b2u(a.SQDraining),
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer,
		Port: a.Port, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
		PKeyIndex: a.PKeyIndex, QKey: a.QKey, RQPSN: a.RQPSN, SQPSN: a.SQPSN, DestQPN: a.DestQPN,
		AccessFlags: uint32(a.AccessFlags), RateLimit: a.RateLimit, Cap: FromCap(&a.Cap), AV: FromAV(&a.AV),
	}
}

// VHCA decodes QP attributes.
func (q *QPAttr) VHCA() vhca.QPAttr {
	return vhca.QPAttr{
		State: vhca.QPState(q.State), CurState: vhca.QPState(q.CurState), PathMTU: vhca.MTU(q.PathMTU),
		EnSQDAsyncNotify: q.EnSQDAsyncNotify != 0, SQDraining: q.SQDraining != 0,
		MaxRdAtomic: q.MaxRdAtomic, MaxDestRdAtomic: q.MaxDestRdAtomic, MinRNRTimer: q.MinRNRTimer,
		Port: q.Port, Timeout: q.Timeout, RetryCnt: q.RetryCnt, RNRRetry: q.RNRRetry,
		PKeyIndex: q.PKeyIndex, QKey: q.QKey, RQPSN: q.RQPSN, SQPSN: q.SQPSN, DestQPN: q.DestQPN,
		AccessFlags: vhca.Access(q.AccessFlags), RateLimit: q.RateLimit, Cap: q.Cap.VHCA(), AV: q.AV.VHCA(),
	}
}

// FromDeviceAttr encodes device attributes.
func FromDeviceAttr(a *vhca.DeviceAttr) DeviceAttr {
	d := DeviceAttr{
		NodeGUID: a.NodeGUID, SysImageGUID: a.SysImageGUID, MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
		MaxQP: u32(a.MaxQP), MaxQPWR: u32(a.MaxQPWR), MaxSGE: u32(a.MaxSGE), MaxCQ: u32(a.MaxCQ),
		MaxCQE: u32(a.MaxCQE), MaxMR: u32(a.MaxMR), MaxPD: u32(a.MaxPD), MaxQPRdAtom: u32(a.MaxQPRdAtom),
		MaxQPInitRdAtom: u32(a.MaxQPInitRdAtom), MaxResRdAtom: u32(a.MaxResRdAtom), MaxSRQ: u32(a.MaxSRQ),
		MaxSRQWR: u32(a.MaxSRQWR), MaxSRQSGE: u32(a.MaxSRQSGE), MaxInlineData: u32(a.MaxInlineData),
		MaxAH: u32(a.MaxAH), MaxPKeys: u32(a.MaxPKeys), MaxMsgSize: a.MaxMsgSize,
		AtomicCap: uint8(a.AtomicCap), PhysPortCnt: uint8(a.PhysPortCnt), LocalCACKDelay: a.LocalCACKDelay,
	}
	copy(d.FWVer[:len(d.FWVer)-1], a.FWVer)
	return d
}

// VHCA decodes device attributes.
func (d *DeviceAttr) VHCA() vhca.DeviceAttr {
	fw := Name{}
	copy(fw[:], d.FWVer[:])
	return vhca.DeviceAttr{
		FWVer: fw.String(), NodeGUID: d.NodeGUID, SysImageGUID: d.SysImageGUID, MaxMRSize: d.MaxMRSize,
		PageSizeCap: d.PageSizeCap, VendorID: d.VendorID, VendorPartID: d.VendorPartID, HWVer: d.HWVer,
		MaxQP: int(d.MaxQP), MaxQPWR: int(d.MaxQPWR), MaxSGE: int(d.MaxSGE), MaxCQ: int(d.MaxCQ),
		MaxCQE: int(d.MaxCQE), MaxMR: int(d.MaxMR), MaxPD: int(d.MaxPD), MaxQPRdAtom: int(d.MaxQPRdAtom),
		MaxQPInitRdAtom: int(d.MaxQPInitRdAtom), MaxResRdAtom: int(d.MaxResRdAtom), MaxSRQ: int(d.MaxSRQ),
		MaxSRQWR: int(d.MaxSRQWR), MaxSRQSGE: int(d.MaxSRQSGE), MaxInlineData: int(d.MaxInlineData),
		MaxAH: int(d.MaxAH), MaxPKeys: int(d.MaxPKeys), AtomicCap: vhca.AtomicCap(d.AtomicCap),
		MaxMsgSize: d.MaxMsgSize, PhysPortCnt: int(d.PhysPortCnt), LocalCACKDelay: d.LocalCACKDelay,
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func u32(v int) uint32 {
	if v < 0 {
		return 0
	}
	return uint32(v)
}

func i32(v uint32) int {
	if v > 1<<31-1 {
		return -1
	}
	return int(v)
}
