package perftest

import "fmt"

// The enumerations below keep perftest's numeric values (perftest_parameters.h)
// because they travel on the wire in Params, as 32-bit ints.

// Verb is perftest's VerbType.
type Verb int32

const (
	VerbSend     Verb = 0 // SEND
	VerbSendImm  Verb = 1 // SEND_IMM
	VerbWrite    Verb = 2 // WRITE
	VerbWriteImm Verb = 3 // WRITE_IMM
	VerbRead     Verb = 4 // READ
	VerbAtomic   Verb = 5 // ATOMIC
)

// verbNames is perftest's testsStr, used in the test banner.
var verbNames = [...]string{"Send", "Send_imm", "RDMA_Write", "RDMA_Write_imm", "RDMA_Read", "Atomic"}

func (v Verb) String() string {
	if v >= 0 && int(v) < len(verbNames) {
		return verbNames[v]
	}
	return fmt.Sprintf("Verb(%d)", int32(v))
}

// hasRecvComp mirrors has_recv_comp: the verbs whose receiver sees completions.
func (v Verb) hasRecvComp() bool {
	return v == VerbSend || v == VerbSendImm || v == VerbWriteImm
}

// TestType is perftest's TestType (field tst).
type TestType int32

const (
	TypeLat     TestType = 0 // LAT
	TypeBW      TestType = 1 // BW
	TypeLatByBW TestType = 2 // LAT_BY_BW
	TypeFSRate  TestType = 3 // FS_RATE
)

// ConnType is perftest's connection_type.
type ConnType int32

const (
	ConnRC     ConnType = 0
	ConnUC     ConnType = 1
	ConnUD     ConnType = 2
	ConnRawEth ConnType = 3
	ConnXRC    ConnType = 4
	ConnDC     ConnType = 5
	ConnSRD    ConnType = 6
)

// connNames is perftest's connStr.
var connNames = [...]string{"RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"}

func (c ConnType) String() string {
	if c >= 0 && int(c) < len(connNames) {
		return connNames[c]
	}
	return fmt.Sprintf("ConnType(%d)", int32(c))
}

// AtomicType is perftest's AtomicType.
type AtomicType int32

const (
	AtomicCmpAndSwap  AtomicType = 0 // CMP_AND_SWAP
	AtomicFetchAndAdd AtomicType = 1 // FETCH_AND_ADD
)

var atomicNames = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

func (a AtomicType) String() string {
	if a >= 0 && int(a) < len(atomicNames) {
		return atomicNames[a]
	}
	return fmt.Sprintf("AtomicType(%d)", int32(a))
}

// TestMethod is perftest's enum ctx_test_method: one size, all sizes (-a)
// or run forever (--run_infinitely).
type TestMethod int32

const (
	RunRegular    TestMethod = 0 // RUN_REGULAR
	RunAll        TestMethod = 1 // RUN_ALL (-a)
	RunInfinitely TestMethod = 2 // RUN_INFINITELY
)

// TestLimit is perftest's TestMethod enum (field test_type): stop after a
// number of iterations or after a duration (-D).
type TestLimit int32

const (
	LimitIterations TestLimit = 0 // ITERATIONS
	LimitDuration   TestLimit = 1 // DURATION
)

// Unit is perftest's enum ctx_report_fmt: the bandwidth unit of reports.
// The zero value is Gb/s because GBS is 0 in perftest; perftest's default
// is MiB/s, Gb/s is --report_gbits.
type Unit int32

const (
	UnitGbps  Unit = 0 // GBS: 10^9 bits per second
	UnitMiBps Unit = 1 // MBS: 2^20 bytes per second
)

// factor is print_report_bw's format_factor: bytes per second in one unit.
func (u Unit) factor() int64 {
	if u == UnitMiBps {
		return 0x100000
	}
	return 125000000
}

// MTU is the ibv_mtu enum: 1 is 256 bytes, 5 is 4096 bytes.
type MTU int

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid mirrors valid_mtu_size.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes mirrors MTU_SIZE.
func (m MTU) Bytes() int { return 1 << (7 + int(m)) }

// Test names one of the perftest programs by its verb and kind.
type Test struct {
	Verb Verb
	Type TestType
}

// The perftest programs this package models.
var (
	WriteBW   = Test{VerbWrite, TypeBW}
	ReadBW    = Test{VerbRead, TypeBW}
	SendBW    = Test{VerbSend, TypeBW}
	AtomicBW  = Test{VerbAtomic, TypeBW}
	WriteLat  = Test{VerbWrite, TypeLat}
	ReadLat   = Test{VerbRead, TypeLat}
	SendLat   = Test{VerbSend, TypeLat}
	AtomicLat = Test{VerbAtomic, TypeLat}
)

// Name is the perftest binary name, e.g. "ib_write_bw".
func (t Test) Name() string {
	var v string
	switch t.Verb {
	case VerbSend, VerbSendImm:
		v = "send"
	case VerbWrite, VerbWriteImm:
		v = "write"
	case VerbRead:
		v = "read"
	case VerbAtomic:
		v = "atomic"
	default:
		v = "unknown"
	}
	k := "bw"
	if t.Type == TypeLat {
		k = "lat"
	}
	return "ib_" + v + "_" + k
}

func (t Test) String() string { return t.Name() }

// RTTFactor is print_report_lat's rtt_factor: ping-pong tests (send, write)
// time a round trip and halve it, read and atomic time a single request.
func (t Test) RTTFactor() int {
	if t.Verb == VerbRead || t.Verb == VerbAtomic {
		return 1
	}
	return 2
}

// AllSizes lists the message sizes of -a (RUN_ALL), as the tests' main()
// loops produce them: 2^1 .. 2^23, except that ib_send_bw and ib_send_lat
// over UD stop at the MTU. The atomic tests have no size loop and run their
// one size (8 bytes) even with -a.
func (t Test) AllSizes(conn ConnType, mtu MTU, size uint64) []uint64 {
	if t.Verb == VerbAtomic {
		return []uint64{size}
	}
	maxPow := 24
	if (t.Verb == VerbSend || t.Verb == VerbSendImm) && conn == ConnUD {
		maxPow = 7 + int(mtu) + 1
	}
	var sizes []uint64
	for i := 1; i < maxPow; i++ {
		sizes = append(sizes, 1<<i)
	}
	return sizes
}
