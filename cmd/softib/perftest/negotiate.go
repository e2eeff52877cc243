package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Params is perftest's struct perftest_parameters_negotiate, which
// negotiate_params (perftest >= 6.28) exchanges right after the MTU so each
// side can refuse a peer started with different options. It is sent as the
// raw C struct: the scalar fields converted to network byte order (hton_int,
// hton_64), DeviceAttr as ibv_query_device left it (see DeviceAttr).
//
// Layout on LP64 (checked against gcc):
//
//	  0 test_method         int32 BE
//	  4 connection_type     int32 BE
//	  8 verb                int32 BE
//	 12 tst                 int32 BE
//	 16 atomicType          int32 BE
//	 20 test_type           int32 BE
//	 24 report_fmt          int32 BE
//	 28 padding (4)
//	 32 size                uint64 BE
//	 40 iters               uint64 BE
//	 48 aes_xts             int32 BE
//	 52 num_of_qps          int32 BE
//	 56 duration            int32 BE
//	 60 use_rdma_cm         int32 BE
//	 64 use_write_with_imm  int32 BE
//	 68 no_enhanced_reorder int32 BE
//	 72 sig_offload         int32 BE
//	 76 data_validation     int32 BE (6.29; padding in 6.28)
//	 80 attr                struct ibv_device_attr, 232 bytes
//	312 mlx5dv_comp_mask    uint64 BE, only in builds with HAVE_MLX5DV
//	320 end (312 without HAVE_MLX5DV)
//
// The struct's size is a build-time property of the peer: perftest built
// against rdma-core's mlx5dv.h (every distribution package) sends 320 bytes,
// a build without it 312, and a mismatch desynchronises the stream. See
// ParamsSize.
type Params struct {
	TestMethod        TestMethod
	ConnType          ConnType
	Verb              Verb
	Tst               TestType
	AtomicType        AtomicType
	TestLimit         TestLimit // test_type: iterations or duration
	Unit              Unit      // report_fmt
	Size              uint64    // message size (-s)
	Iters             uint64    // iterations (-n)
	AESXTS            bool
	NumQPs            int32 // -q
	Duration          int32 // -D, seconds
	UseRdmaCM         bool  // -R
	UseWriteWithImm   bool
	NoEnhancedReorder bool
	SigOffload        bool
	DataValidation    bool
	Attr              DeviceAttr
	// MLX5DVCompMask is the mlx5dv context comp_mask, filled by perftest
	// only when Attr.VendorID is Mellanox's; zero otherwise.
	MLX5DVCompMask uint64
}

// ParamsSize is the size of the negotiation message: 320 bytes from a
// perftest built with mlx5dv support, 312 without.
func ParamsSize(mlx5dv bool) int {
	if mlx5dv {
		return 320
	}
	return 312
}

func boolInt(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Marshal lays p out as the C struct, ParamsSize(mlx5dv) bytes.
func (p *Params) Marshal(mlx5dv bool) []byte {
	be := binary.BigEndian
	b := make([]byte, ParamsSize(mlx5dv))
	be.PutUint32(b[0:], uint32(p.TestMethod))
	be.PutUint32(b[4:], uint32(p.ConnType))
	be.PutUint32(b[8:], uint32(p.Verb))
	be.PutUint32(b[12:], uint32(p.Tst))
	be.PutUint32(b[16:], uint32(p.AtomicType))
	be.PutUint32(b[20:], uint32(p.TestLimit))
	be.PutUint32(b[24:], uint32(p.Unit))
	be.PutUint64(b[32:], p.Size)
	be.PutUint64(b[40:], p.Iters)
	be.PutUint32(b[48:], boolInt(p.AESXTS))
	be.PutUint32(b[52:], uint32(p.NumQPs))
	be.PutUint32(b[56:], uint32(p.Duration))
	be.PutUint32(b[60:], boolInt(p.UseRdmaCM))
	be.PutUint32(b[64:], boolInt(p.UseWriteWithImm))
	be.PutUint32(b[68:], boolInt(p.NoEnhancedReorder))
	be.PutUint32(b[72:], boolInt(p.SigOffload))
	be.PutUint32(b[76:], boolInt(p.DataValidation))
	p.Attr.marshal(b[80 : 80+deviceAttrSize])
	if mlx5dv {
		be.PutUint64(b[312:], p.MLX5DVCompMask)
	}
	return b
}

// UnmarshalParams parses a negotiation message of either size.
func UnmarshalParams(b []byte) (Params, error) {
	var p Params
	if len(b) != ParamsSize(true) && len(b) != ParamsSize(false) {
		return p, fmt.Errorf("perftest: negotiation message is %d bytes, want 312 or 320", len(b))
	}
	be := binary.BigEndian
	i32 := func(off int) int32 { return int32(be.Uint32(b[off:])) }
	p.TestMethod = TestMethod(i32(0))
	p.ConnType = ConnType(i32(4))
	p.Verb = Verb(i32(8))
	p.Tst = TestType(i32(12))
	p.AtomicType = AtomicType(i32(16))
	p.TestLimit = TestLimit(i32(20))
	p.Unit = Unit(i32(24))
	p.Size = be.Uint64(b[32:])
	p.Iters = be.Uint64(b[40:])
	p.AESXTS = i32(48) != 0
	p.NumQPs = i32(52)
	p.Duration = i32(56)
	p.UseRdmaCM = i32(60) != 0
	p.UseWriteWithImm = i32(64) != 0
	p.NoEnhancedReorder = i32(68) != 0
	p.SigOffload = i32(72) != 0
	p.DataValidation = i32(76) != 0
	p.Attr.unmarshal(b[80 : 80+deviceAttrSize])
	if len(b) == ParamsSize(true) {
		p.MLX5DVCompMask = be.Uint64(b[312:])
	}
	return p, nil
}

// Compare mirrors the compare table of negotiate_params: every listed field
// must be equal on both sides, in this order, and perftest stops at the
// first mismatch with " <name> mismatch: local=<v>, remote=<v>". The device
// attributes are not compared (compare_ibv_device only clamps out_reads, see
// ClampOutReads). The returned error names every mismatching field, the
// first one first.
func (p *Params) Compare(remote *Params) error {
	type field struct {
		name          string
		local, remote uint64
		names         []string
	}
	onOff := []string{"OFF", "ON"}
	fields := []field{
		{"test_method", uint64(p.TestMethod), uint64(remote.TestMethod), []string{"RUN_REGULAR", "RUN_ALL", "RUN_INFINITELY"}},
		{"connection_type", uint64(p.ConnType), uint64(remote.ConnType), connNames[:]},
		{"verb", uint64(p.Verb), uint64(remote.Verb), []string{"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "ATOMIC"}},
		{"tst", uint64(p.Tst), uint64(remote.Tst), []string{"LAT", "BW", "LAT_BY_BW", "FS_RATE"}},
		{"atomicType", uint64(p.AtomicType), uint64(remote.AtomicType), atomicNames[:]},
		{"test_type", uint64(p.TestLimit), uint64(remote.TestLimit), []string{"ITERATIONS", "DURATION"}},
		{"report_fmt", uint64(p.Unit), uint64(remote.Unit), []string{"GBS", "MBS"}},
		{"size", p.Size, remote.Size, nil},
		{"iters", p.Iters, remote.Iters, nil},
		{"aes_xts", uint64(boolInt(p.AESXTS)), uint64(boolInt(remote.AESXTS)), onOff},
		{"num_of_qps", uint64(p.NumQPs), uint64(remote.NumQPs), nil},
		{"duration", uint64(p.Duration), uint64(remote.Duration), nil},
		{"use_rdma_cm", uint64(boolInt(p.UseRdmaCM)), uint64(boolInt(remote.UseRdmaCM)), onOff},
		{"use_write_with_imm", uint64(boolInt(p.UseWriteWithImm)), uint64(boolInt(remote.UseWriteWithImm)), onOff},
		{"no_enhanced_reorder", uint64(boolInt(p.NoEnhancedReorder)), uint64(boolInt(remote.NoEnhancedReorder)), onOff},
		{"sig_offload", uint64(boolInt(p.SigOffload)), uint64(boolInt(remote.SigOffload)), onOff},
		{"data_validation", uint64(boolInt(p.DataValidation)), uint64(boolInt(remote.DataValidation)), onOff},
	}
	var msgs []string
	for _, f := range fields {
		if f.local == f.remote {
			continue
		}
		l, r := fmt.Sprint(f.local), fmt.Sprint(f.remote)
		if f.names != nil {
			l, r = nameOr(f.names, f.local), nameOr(f.names, f.remote)
		}
		msgs = append(msgs, fmt.Sprintf("%s mismatch: local=%s, remote=%s", f.name, l, r))
	}
	if len(msgs) > 0 {
		return errors.New("perftest: " + strings.Join(msgs, "; "))
	}
	return nil
}

func nameOr(names []string, v uint64) string {
	if v < uint64(len(names)) {
		return names[v]
	}
	return fmt.Sprint(v)
}

// ClampOutReads mirrors compare_ibv_device: outside DC, a local outstanding
// reads setting above the remote device's max_qp_rd_atom is lowered to it.
func ClampOutReads(outReads int, conn ConnType, remote *DeviceAttr) int {
	if conn != ConnDC && outReads > int(remote.MaxQPRdAtom) {
		return int(remote.MaxQPRdAtom)
	}
	return outReads
}
