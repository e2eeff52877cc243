package perftest

import (
	"encoding/hex"
	"strings"
	"testing"
)

// negKnownAnswer is struct perftest_parameters_negotiate as perftest fills
// it (hton_int/hton_64 on the scalars, the device attributes raw) for the
// values of mellanoxParams, dumped from a gcc build of the struct with
// HAVE_MLX5DV on x86-64. The 312-byte variant is its first 312 bytes.
const negKnownAnswer = "" +
	"0000000100000000000000020000000100000000000000000000000100000000" +
	"0000000000010000000000000000138800000000000000040000000500000000" +
	"0000000000000001000000000000000032302e33312e31303134000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000" +
	"000000000000000000000000000000000002c90300a1b2c30002c90300a1b2c4" +
	"ffffffffffffffff00f0ffffffffffffc90200001b1000000000000000000200" +
	"00800000361c72ed1e0000001e00000000000001ffff3f000000000100000001" +
	"1000000000000000000020001000000000000000010000000000000000000000" +
	"00000001000000000000000000002000f00000000000001effffff7f00000000" +
	"0000000000008000ff7f00001f00000080001001000000000000000000001234"

func mellanoxParams() Params {
	return Params{
		TestMethod: RunAll, ConnType: ConnRC, Verb: VerbWrite, Tst: TypeBW, Unit: UnitMiBps,
		Size: 65536, Iters: 5000, NumQPs: 4, Duration: 5, NoEnhancedReorder: true,
		Attr: DeviceAttr{
			FWVer: "20.31.1014", NodeGUID: 0x0002c90300a1b2c3, SysImageGUID: 0x0002c90300a1b2c4,
			MaxMRSize: ^uint64(0), PageSizeCap: 0xfffffffffffff000, VendorID: 0x02c9, VendorPartID: 4123,
			MaxQP: 131072, MaxQPWR: 32768, DeviceCapFlags: 0xed721c36, MaxSGE: 30, MaxSGERd: 30,
			MaxCQ: 16777216, MaxCQE: 4194303, MaxMR: 16777216, MaxPD: 16777216, MaxQPRdAtom: 16,
			MaxResRdAtom: 2097152, MaxQPInitRdAtom: 16, AtomicCap: 1, MaxMW: 16777216,
			MaxMcastGrp: 2097152, MaxMcastQPAttach: 240, MaxTotalMcastQPAttach: 503316480,
			MaxAH: 2147483647, MaxSRQ: 8388608, MaxSRQWR: 32767, MaxSRQSGE: 31,
			MaxPKeys: 128, LocalCAAckDelay: 16, PhysPortCnt: 1,
		},
		MLX5DVCompMask: 0x1234,
	}
}

func TestParamsKnownAnswer(t *testing.T) {
	p := mellanoxParams()
	got := hex.EncodeToString(p.Marshal(true))
	if got != negKnownAnswer {
		t.Errorf("Marshal(mlx5dv):\n got %s\nwant %s", got, negKnownAnswer)
	}
	got = hex.EncodeToString(p.Marshal(false))
	if got != negKnownAnswer[:2*312] {
		t.Errorf("Marshal(no mlx5dv):\n got %s\nwant %s", got, negKnownAnswer[:2*312])
	}
	raw, _ := hex.DecodeString(negKnownAnswer)
	back, err := UnmarshalParams(raw)
	if err != nil {
		t.Fatal(err)
	}
	if back != p {
		t.Errorf("Unmarshal:\n got %+v\nwant %+v", back, p)
	}
	back, err = UnmarshalParams(raw[:312])
	if err != nil {
		t.Fatal(err)
	}
	p.MLX5DVCompMask = 0
	if back != p {
		t.Errorf("Unmarshal 312:\n got %+v\nwant %+v", back, p)
	}
	if _, err := UnmarshalParams(raw[:300]); err == nil {
		t.Error("300-byte struct accepted")
	}
}

func TestDeviceAttrOffsets(t *testing.T) {
	var a DeviceAttr
	if len(a.ints()) != len(intFieldOffsets) {
		t.Fatalf("%d int fields, %d offsets", len(a.ints()), len(intFieldOffsets))
	}
	// max_qp_rd_atom is what perftest reads from the peer.
	a.MaxQPRdAtom = 0x01020304
	b := make([]byte, deviceAttrSize)
	a.marshal(b)
	if b[144] != 4 || b[147] != 1 {
		t.Errorf("max_qp_rd_atom not at offset 144: % x", b[140:152])
	}
}

func TestParamsCompare(t *testing.T) {
	l := mellanoxParams()
	r := l
	r.Attr = DeviceAttr{MaxQPRdAtom: 4} // device attributes are not compared
	if err := l.Compare(&r); err != nil {
		t.Fatal(err)
	}
	r.Verb = VerbRead
	r.Size = 4096
	r.Unit = UnitGbps
	err := l.Compare(&r)
	if err == nil {
		t.Fatal("mismatch accepted")
	}
	msg := err.Error()
	for _, s := range []string{"verb mismatch: local=WRITE, remote=READ", "report_fmt mismatch: local=MBS, remote=GBS", "size mismatch: local=65536, remote=4096"} {
		if !strings.Contains(msg, s) {
			t.Errorf("%q lacks %q", msg, s)
		}
	}
	if strings.Index(msg, "verb") > strings.Index(msg, "size") {
		t.Errorf("mismatches out of perftest's order: %q", msg)
	}
}

func TestClampOutReads(t *testing.T) {
	remote := &DeviceAttr{MaxQPRdAtom: 4}
	if got := ClampOutReads(16, ConnRC, remote); got != 4 {
		t.Errorf("RC: %d", got)
	}
	if got := ClampOutReads(16, ConnDC, remote); got != 16 {
		t.Errorf("DC: %d", got)
	}
	if got := ClampOutReads(2, ConnRC, remote); got != 2 {
		t.Errorf("lower: %d", got)
	}
}
