package wire

import "encoding/binary"

// Sizes of the extended transport headers (IBA 1.4 §9.3, §9.4, §9.5).
const (
	RDETHLen        = 4
	DETHLen         = 8
	XRCETHLen       = 4
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	ICRCLen         = 4
	VCRCLen         = 2
)

// RDETH is a view of the Reliable Datagram Extended Transport Header:
// Resv8, EE-Context(24).
type RDETH []byte

func (h RDETH) EEContext() uint32     { return get24(h[1:]) }
func (h RDETH) SetEEContext(v uint32) { h[0] = 0; put24(h[1:], v) }

// DETH is a view of the Datagram Extended Transport Header: Q_Key(32),
// Resv8, SrcQP(24).
type DETH []byte

func (h DETH) QKey() uint32      { return binary.BigEndian.Uint32(h[0:]) }
func (h DETH) SrcQP() uint32     { return get24(h[5:]) }
func (h DETH) SetQKey(v uint32)  { binary.BigEndian.PutUint32(h[0:], v) }
func (h DETH) SetSrcQP(v uint32) { h[4] = 0; put24(h[5:], v) }

// XRCETH is a view of the XRC Extended Transport Header: Resv8,
// XRCSRQ(24), the SRQ of the XRC target that receives the message.
type XRCETH []byte

func (h XRCETH) XRCSRQ() uint32     { return get24(h[1:]) }
func (h XRCETH) SetXRCSRQ(v uint32) { h[0] = 0; put24(h[1:], v) }

// RETH is a view of the RDMA Extended Transport Header: VA(64), R_Key(32),
// DMA Length(32).
type RETH []byte

func (h RETH) VA() uint64         { return binary.BigEndian.Uint64(h[0:]) }
func (h RETH) RKey() uint32       { return binary.BigEndian.Uint32(h[8:]) }
func (h RETH) DMALen() uint32     { return binary.BigEndian.Uint32(h[12:]) }
func (h RETH) SetVA(v uint64)     { binary.BigEndian.PutUint64(h[0:], v) }
func (h RETH) SetRKey(v uint32)   { binary.BigEndian.PutUint32(h[8:], v) }
func (h RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(h[12:], v) }

// AtomicETH is a view of the Atomic Extended Transport Header: VA(64),
// R_Key(32), SwapAddData(64) (swap value for CmpSwap, addend for FetchAdd),
// CmpData(64).
type AtomicETH []byte

func (h AtomicETH) VA() uint64              { return binary.BigEndian.Uint64(h[0:]) }
func (h AtomicETH) RKey() uint32            { return binary.BigEndian.Uint32(h[8:]) }
func (h AtomicETH) SwapAddData() uint64     { return binary.BigEndian.Uint64(h[12:]) }
func (h AtomicETH) CmpData() uint64         { return binary.BigEndian.Uint64(h[20:]) }
func (h AtomicETH) SetVA(v uint64)          { binary.BigEndian.PutUint64(h[0:], v) }
func (h AtomicETH) SetRKey(v uint32)        { binary.BigEndian.PutUint32(h[8:], v) }
func (h AtomicETH) SetSwapAddData(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }
func (h AtomicETH) SetCmpData(v uint64)     { binary.BigEndian.PutUint64(h[20:], v) }

// AtomicAckETH is a view of the Atomic Acknowledge Extended Transport
// Header: OrigRemDt(64), the value the remote location held before the
// atomic operation.
type AtomicAckETH []byte

func (h AtomicAckETH) OrigRemDt() uint64     { return binary.BigEndian.Uint64(h) }
func (h AtomicAckETH) SetOrigRemDt(v uint64) { binary.BigEndian.PutUint64(h, v) }

// ImmDt is a view of the Immediate Data header, 32 bits the requester's
// consumer chose, delivered in the receive completion.
type ImmDt []byte

func (h ImmDt) Value() uint32     { return binary.BigEndian.Uint32(h) }
func (h ImmDt) SetValue(v uint32) { binary.BigEndian.PutUint32(h, v) }

// IETH is a view of the Invalidate Extended Transport Header: the R_Key the
// responder invalidates when the SEND completes.
type IETH []byte

func (h IETH) RKey() uint32     { return binary.BigEndian.Uint32(h) }
func (h IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h, v) }
