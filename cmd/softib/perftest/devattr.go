package perftest

import (
	"bytes"
	"encoding/binary"
)

// DeviceAttr is libibverbs' struct ibv_device_attr, which perftest embeds in
// the negotiation message as ibv_query_device filled it: in the sender's
// native byte order, not converted to network order. Every platform perftest
// runs on in practice (x86-64, aarch64, ppc64le) is little-endian, so that
// is the order used here. The peer only reads MaxQPRdAtom (it lowers its
// outstanding reads to it), but the whole struct must be there.
//
// Layout (232 bytes, natural alignment, checked against gcc):
//
//	 0 fw_ver[64]          96 vendor_id            140 max_pd
//	64 node_guid (be64)   100 vendor_part_id       144 max_qp_rd_atom
//	72 sys_image_guid     104 hw_ver               148 max_ee_rd_atom
//	80 max_mr_size        108 max_qp               152 max_res_rd_atom
//	88 page_size_cap      112 max_qp_wr            156 max_qp_init_rd_atom
//	                      116 device_cap_flags     160 max_ee_init_rd_atom
//	                      120 max_sge              164 atomic_cap
//	                      124 max_sge_rd           168 max_ee ... 220 max_srq_sge
//	                      128 max_cq               (int fields, 4 bytes each)
//	                      132 max_cqe              224 max_pkeys (u16)
//	                      136 max_mr               226 local_ca_ack_delay (u8)
//	                                               227 phys_port_cnt (u8)
//	                                               228 padding to 232
type DeviceAttr struct {
	FWVer                 string // at most 63 bytes are kept, NUL-terminated
	NodeGUID              uint64 // __be64 in memory: sent big-endian
	SysImageGUID          uint64 // __be64 in memory: sent big-endian
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int32
	MaxQPWR               int32
	DeviceCapFlags        uint32
	MaxSGE                int32
	MaxSGERd              int32
	MaxCQ                 int32
	MaxCQE                int32
	MaxMR                 int32
	MaxPD                 int32
	MaxQPRdAtom           int32
	MaxEERdAtom           int32
	MaxResRdAtom          int32
	MaxQPInitRdAtom       int32
	MaxEEInitRdAtom       int32
	AtomicCap             int32 // enum ibv_atomic_cap
	MaxEE                 int32
	MaxRDD                int32
	MaxMW                 int32
	MaxRawIPv6QP          int32
	MaxRawEthyQP          int32
	MaxMcastGrp           int32
	MaxMcastQPAttach      int32
	MaxTotalMcastQPAttach int32
	MaxAH                 int32
	MaxFMR                int32
	MaxMapPerFMR          int32
	MaxSRQ                int32
	MaxSRQWR              int32
	MaxSRQSGE             int32
	MaxPKeys              uint16
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8
}

// deviceAttrSize is sizeof(struct ibv_device_attr) on LP64.
const deviceAttrSize = 232

// mlnxVendorID is MLNX_VENDOR_ID: only then does perftest fill and compare
// the mlx5dv capability mask.
const mlnxVendorID = 0x02c9

func (a *DeviceAttr) marshal(b []byte) {
	le := binary.LittleEndian
	fw := []byte(a.FWVer)
	if len(fw) > 63 {
		fw = fw[:63]
	}
	clear(b[:64])
	copy(b, fw)
	binary.BigEndian.PutUint64(b[64:], a.NodeGUID)
	binary.BigEndian.PutUint64(b[72:], a.SysImageGUID)
	le.PutUint64(b[80:], a.MaxMRSize)
	le.PutUint64(b[88:], a.PageSizeCap)
	le.PutUint32(b[96:], a.VendorID)
	le.PutUint32(b[100:], a.VendorPartID)
	le.PutUint32(b[104:], a.HWVer)
	le.PutUint32(b[116:], a.DeviceCapFlags)
	for i, v := range a.ints() {
		off := intFieldOffsets[i]
		le.PutUint32(b[off:], uint32(*v))
	}
	le.PutUint16(b[224:], a.MaxPKeys)
	b[226] = a.LocalCAAckDelay
	b[227] = a.PhysPortCnt
	clear(b[228:deviceAttrSize])
}

func (a *DeviceAttr) unmarshal(b []byte) {
	le := binary.LittleEndian
	fw := b[:64]
	if i := bytes.IndexByte(fw, 0); i >= 0 {
		fw = fw[:i]
	}
	a.FWVer = string(fw)
	a.NodeGUID = binary.BigEndian.Uint64(b[64:])
	a.SysImageGUID = binary.BigEndian.Uint64(b[72:])
	a.MaxMRSize = le.Uint64(b[80:])
	a.PageSizeCap = le.Uint64(b[88:])
	a.VendorID = le.Uint32(b[96:])
	a.VendorPartID = le.Uint32(b[100:])
	a.HWVer = le.Uint32(b[104:])
	a.DeviceCapFlags = le.Uint32(b[116:])
	for i, v := range a.ints() {
		*v = int32(le.Uint32(b[intFieldOffsets[i]:]))
	}
	a.MaxPKeys = le.Uint16(b[224:])
	a.LocalCAAckDelay = b[226]
	a.PhysPortCnt = b[227]
}

// intFieldOffsets are the offsets of the int32 fields listed by ints, in
// that order: max_qp, max_qp_wr, then max_sge through max_srq_sge.
var intFieldOffsets = func() []int {
	offs := []int{108, 112}
	for off := 120; off <= 220; off += 4 {
		offs = append(offs, off)
	}
	return offs
}()

// ints lists the int32 fields in struct order, device_cap_flags (unsigned,
// at 116) left out.
func (a *DeviceAttr) ints() []*int32 {
	return []*int32{
		&a.MaxQP, &a.MaxQPWR,
		&a.MaxSGE, &a.MaxSGERd, &a.MaxCQ, &a.MaxCQE, &a.MaxMR, &a.MaxPD,
		&a.MaxQPRdAtom, &a.MaxEERdAtom, &a.MaxResRdAtom, &a.MaxQPInitRdAtom,
		&a.MaxEEInitRdAtom, &a.AtomicCap, &a.MaxEE, &a.MaxRDD, &a.MaxMW,
		&a.MaxRawIPv6QP, &a.MaxRawEthyQP, &a.MaxMcastGrp, &a.MaxMcastQPAttach,
		&a.MaxTotalMcastQPAttach, &a.MaxAH, &a.MaxFMR, &a.MaxMapPerFMR,
		&a.MaxSRQ, &a.MaxSRQWR, &a.MaxSRQSGE,
	}
}
