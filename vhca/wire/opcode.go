package wire

// Opcode is the BTH OpCode (IBA 1.4 §9.2.1, table 38): bits 7..5 name the
// transport service, bits 4..0 the operation and packet position.
type Opcode uint8

// Transport is the service an opcode belongs to (opcode bits 7..5).
type Transport uint8

const (
	RC  Transport = 0 // reliable connection
	UC  Transport = 1 // unreliable connection
	RD  Transport = 2 // reliable datagram
	UD  Transport = 3 // unreliable datagram
	CNP Transport = 4 // congestion notification (RoCEv2, Annex A17.9)
	XRC Transport = 5 // extended reliable connection
)

var transportNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "MFR6", "MFR7"}

func (t Transport) String() string { return transportNames[t&7] }

// Operation is what a packet does, whatever its transport and position.
type Operation uint8

const (
	OpNone Operation = iota
	OpSend
	OpRDMAWrite
	OpRDMARead // RDMA READ request
	OpReadResponse
	OpAcknowledge
	OpAtomicAcknowledge
	OpCompareSwap
	OpFetchAdd
	OpResync
	OpCongestionNotification
)

// Position is where a packet stands in its message. Single-packet
// operations (READ request, ACK, atomics) are Only.
type Position uint8

const (
	Only Position = iota
	First
	Middle
	Last
)

// Header names an extended transport header. The constants are in the
// order the headers follow the BTH (IBA 1.4 table 38): no opcode carries
// two headers in the other order.
type Header uint8

const (
	HdrRDETH Header = iota
	HdrDETH
	HdrXRCETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrCNPReserved // 16 reserved bytes of a RoCEv2 CNP (Annex A17.9.2)
	numHeaders
)

var headerInfo = [numHeaders]struct {
	name string
	len  int
}{
	HdrRDETH:        {"RDETH", RDETHLen},
	HdrDETH:         {"DETH", DETHLen},
	HdrXRCETH:       {"XRCETH", XRCETHLen},
	HdrRETH:         {"RETH", RETHLen},
	HdrAtomicETH:    {"AtomicETH", AtomicETHLen},
	HdrAETH:         {"AETH", AETHLen},
	HdrAtomicAckETH: {"AtomicAckETH", AtomicAckETHLen},
	HdrImmDt:        {"ImmDt", ImmDtLen},
	HdrIETH:         {"IETH", IETHLen},
	HdrCNPReserved:  {"CNP reserved", CNPReservedLen},
}

// CNPReservedLen is the reserved field that follows the BTH of a CNP.
const CNPReservedLen = 16

func (h Header) String() string { return headerInfo[h].name }

// Len is the header's size in bytes.
func (h Header) Len() int { return headerInfo[h].len }

// operation is a row of IBA 1.4 table 38 without the transport bits: the
// low five bits of the opcode and what they mean for every transport that
// defines them.
type operation struct {
	name     string
	op       Operation
	pos      Position
	headers  []Header // after the transport's own headers
	payload  bool
	response bool
}

var operations = [32]operation{
	0x00: {"SEND_FIRST", OpSend, First, nil, true, false},
	0x01: {"SEND_MIDDLE", OpSend, Middle, nil, true, false},
	0x02: {"SEND_LAST", OpSend, Last, nil, true, false},
	0x03: {"SEND_LAST_WITH_IMMEDIATE", OpSend, Last, []Header{HdrImmDt}, true, false},
	0x04: {"SEND_ONLY", OpSend, Only, nil, true, false},
	0x05: {"SEND_ONLY_WITH_IMMEDIATE", OpSend, Only, []Header{HdrImmDt}, true, false},
	0x06: {"RDMA_WRITE_FIRST", OpRDMAWrite, First, []Header{HdrRETH}, true, false},
	0x07: {"RDMA_WRITE_MIDDLE", OpRDMAWrite, Middle, nil, true, false},
	0x08: {"RDMA_WRITE_LAST", OpRDMAWrite, Last, nil, true, false},
	0x09: {"RDMA_WRITE_LAST_WITH_IMMEDIATE", OpRDMAWrite, Last, []Header{HdrImmDt}, true, false},
	0x0A: {"RDMA_WRITE_ONLY", OpRDMAWrite, Only, []Header{HdrRETH}, true, false},
	0x0B: {"RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpRDMAWrite, Only, []Header{HdrRETH, HdrImmDt}, true, false},
	0x0C: {"RDMA_READ_REQUEST", OpRDMARead, Only, []Header{HdrRETH}, false, false},
	0x0D: {"RDMA_READ_RESPONSE_FIRST", OpReadResponse, First, []Header{HdrAETH}, true, true},
	0x0E: {"RDMA_READ_RESPONSE_MIDDLE", OpReadResponse, Middle, nil, true, true},
	0x0F: {"RDMA_READ_RESPONSE_LAST", OpReadResponse, Last, []Header{HdrAETH}, true, true},
	0x10: {"RDMA_READ_RESPONSE_ONLY", OpReadResponse, Only, []Header{HdrAETH}, true, true},
	0x11: {"ACKNOWLEDGE", OpAcknowledge, Only, []Header{HdrAETH}, false, true},
	0x12: {"ATOMIC_ACKNOWLEDGE", OpAtomicAcknowledge, Only, []Header{HdrAETH, HdrAtomicAckETH}, false, true},
	0x13: {"COMPARE_SWAP", OpCompareSwap, Only, []Header{HdrAtomicETH}, false, false},
	0x14: {"FETCH_ADD", OpFetchAdd, Only, []Header{HdrAtomicETH}, false, false},
	0x15: {"RESYNC", OpResync, Only, nil, false, false},
	0x16: {"SEND_LAST_WITH_INVALIDATE", OpSend, Last, []Header{HdrIETH}, true, false},
	0x17: {"SEND_ONLY_WITH_INVALIDATE", OpSend, Only, []Header{HdrIETH}, true, false},
}

// transportRow says which operations a transport defines (IBA 1.4 table
// 38) and which of its own headers come first: RD puts an RDETH before
// everything and a DETH before requests, UD a DETH, XRC an XRCETH before
// requests.
type transportRow struct {
	ops             []uint8
	requestHeaders  []Header
	responseHeaders []Header
}

func span(lo, hi uint8, more ...uint8) []uint8 {
	var s []uint8
	for c := lo; c <= hi; c++ {
		s = append(s, c)
	}
	return append(s, more...)
}

var transportRows = map[Transport]transportRow{
	RC:  {ops: span(0x00, 0x14, 0x16, 0x17)},
	UC:  {ops: span(0x00, 0x0B)},
	RD:  {ops: span(0x00, 0x15), requestHeaders: []Header{HdrRDETH, HdrDETH}, responseHeaders: []Header{HdrRDETH}},
	UD:  {ops: []uint8{0x04, 0x05}, requestHeaders: []Header{HdrDETH}},
	XRC: {ops: span(0x00, 0x14, 0x16, 0x17), requestHeaders: []Header{HdrXRCETH}},
}

// CNPOpcode is the RoCEv2 congestion notification packet (Annex A17.9.2):
// BTH, 16 reserved bytes, ICRC.
const CNPOpcode Opcode = 0x81

// OpInfo is everything the opcode table says of one opcode.
type OpInfo struct {
	Name      string // as Linux and Wireshark spell it, e.g. RC_SEND_FIRST
	Valid     bool   // false for reserved and manufacturer-specific opcodes
	Transport Transport
	Operation Operation
	Position  Position
	Headers   []Header // extended transport headers after the BTH, in order
	Payload   bool     // the packet carries a data payload
	Response  bool     // sent by a responder (read responses, ACKs)

	// HeaderLen is BTH plus the extended headers: where the payload starts,
	// counted from the BTH.
	HeaderLen int
	offsets   [numHeaders]uint8 // from the BTH; 0 means absent
}

// Has reports whether the opcode carries extended header h.
func (i *OpInfo) Has(h Header) bool { return i.offsets[h] != 0 }

// Offset is where header h starts, counted from the first byte of the BTH,
// or 0 if the opcode does not carry it.
func (i *OpInfo) Offset(h Header) int { return int(i.offsets[h]) }

// Immediate reports whether the packet carries immediate data.
func (i *OpInfo) Immediate() bool { return i.Has(HdrImmDt) }

// Invalidate reports whether the packet is a SEND with invalidate.
func (i *OpInfo) Invalidate() bool { return i.Has(HdrIETH) }

var opTable [256]OpInfo

func init() {
	for o := range opTable {
		opTable[o].Name = "UNKNOWN"
	}
	for t, row := range transportRows {
		for _, low := range row.ops {
			op := operations[low]
			hs := row.requestHeaders
			if op.response {
				hs = row.responseHeaders
			}
			hs = append(append([]Header(nil), hs...), op.headers...)
			setOpcode(Opcode(uint8(t)<<5|low), OpInfo{
				Name:      t.String() + "_" + op.name,
				Valid:     true,
				Transport: t,
				Operation: op.op,
				Position:  op.pos,
				Headers:   hs,
				Payload:   op.payload,
				Response:  op.response,
			})
		}
	}
	setOpcode(CNPOpcode, OpInfo{
		Name: "CNP", Valid: true, Transport: CNP, Operation: OpCongestionNotification,
		Headers: []Header{HdrCNPReserved},
	})
}

func setOpcode(o Opcode, info OpInfo) {
	info.HeaderLen = BTHLen
	for _, h := range info.Headers {
		info.offsets[h] = uint8(info.HeaderLen)
		info.HeaderLen += h.Len()
	}
	opTable[o] = info
}

// Info returns the table row of o. It is never nil; Valid says whether
// IBA 1.4 defines the opcode.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether IBA 1.4 defines o.
func (o Opcode) Valid() bool { return opTable[o].Valid }

func (o Opcode) Transport() Transport { return Transport(o >> 5) }

func (o Opcode) String() string {
	if i := &opTable[o]; i.Valid {
		return i.Name
	}
	return "UNKNOWN_0x" + hex2(uint8(o))
}

func hex2(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&0xF]})
}

// Opcodes lists every opcode IBA 1.4 defines, in numeric order.
func Opcodes() []Opcode {
	var s []Opcode
	for o := range opTable {
		if opTable[o].Valid {
			s = append(s, Opcode(o))
		}
	}
	return s
}

// Opcode constants for the ones the transport engine names in code. The
// others are reached as Transport<<5 | operation code through the table.
const (
	RCSendFirst              Opcode = 0x00
	RCSendMiddle             Opcode = 0x01
	RCSendLast               Opcode = 0x02
	RCSendLastWithImmediate  Opcode = 0x03
	RCSendOnly               Opcode = 0x04
	RCSendOnlyWithImmediate  Opcode = 0x05
	RCRDMAWriteFirst         Opcode = 0x06
	RCRDMAWriteMiddle        Opcode = 0x07
	RCRDMAWriteLast          Opcode = 0x08
	RCRDMAWriteLastWithImm   Opcode = 0x09
	RCRDMAWriteOnly          Opcode = 0x0A
	RCRDMAWriteOnlyWithImm   Opcode = 0x0B
	RCRDMAReadRequest        Opcode = 0x0C
	RCRDMAReadResponseFirst  Opcode = 0x0D
	RCRDMAReadResponseMiddle Opcode = 0x0E
	RCRDMAReadResponseLast   Opcode = 0x0F
	RCRDMAReadResponseOnly   Opcode = 0x10
	RCAcknowledge            Opcode = 0x11
	RCAtomicAcknowledge      Opcode = 0x12
	RCCompareSwap            Opcode = 0x13
	RCFetchAdd               Opcode = 0x14
	RCSendLastWithInvalidate Opcode = 0x16
	RCSendOnlyWithInvalidate Opcode = 0x17
	UDSendOnly               Opcode = 0x64
	UDSendOnlyWithImmediate  Opcode = 0x65
)

// WithTransport returns the opcode of the same operation and position on
// transport t (for example RCSendOnly.WithTransport(UC) is UC_SEND_ONLY).
// The result may be invalid: not every transport has every operation.
func (o Opcode) WithTransport(t Transport) Opcode {
	return Opcode(uint8(t)<<5 | uint8(o)&0x1F)
}
