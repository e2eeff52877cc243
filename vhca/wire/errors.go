package wire

// ParseError says what was wrong with a frame that Parse refused. It is a
// small integer so that returning it allocates nothing and a receiver can
// count drops per reason in an array indexed by it.
type ParseError uint8

const (
	_                      ParseError = iota
	ErrTruncated                      // shorter than its headers or length fields say
	ErrBadIPHeader                    // IP version, header length, total length or header checksum
	ErrBadUDPHeader                   // UDP length disagrees with the IP length
	ErrBadUDPChecksum                 // a non-zero UDP checksum that does not verify
	ErrNotRoCE                        // Ethernet frame that is not RoCE (not UDP 4791 or ethertype 0x8915)
	ErrIPFragment                     // RoCEv2 senders set DF; fragments are not reassembled here
	ErrBadLRH                         // link version other than 0
	ErrRawPacket                      // native IB raw packet (LNH 0/1): no IBA transport
	ErrBadGRH                         // IPVer not 6 or NxtHdr not IBA
	ErrUnknownOpcode                  // reserved or manufacturer-specific opcode
	ErrBadTransportVersion            // BTH TVer not 0: silently dropped (IBA 1.4 §9.6)
	ErrBadPadCount                    // pad count on a first/middle packet, one with no payload, or more than the payload
	ErrBadLength                      // a length inconsistent with the opcode or with another length field
	ErrBadICRC                        // invariant CRC mismatch
	ErrBadVCRC                        // variant CRC mismatch (native IB)
	NumParseErrors                    // size of an array of counters indexed by ParseError
)

var parseErrorText = [NumParseErrors]string{
	"wire: no error",
	"wire: truncated packet",
	"wire: bad IP header",
	"wire: bad UDP header",
	"wire: bad UDP checksum",
	"wire: not a RoCE packet",
	"wire: IP fragment",
	"wire: bad LRH",
	"wire: raw IB packet, not IBA transport",
	"wire: bad GRH",
	"wire: unknown or reserved opcode",
	"wire: bad BTH transport version",
	"wire: bad pad count",
	"wire: length inconsistent with the opcode",
	"wire: bad ICRC",
	"wire: bad VCRC",
}

func (e ParseError) Error() string {
	if e < NumParseErrors {
		return parseErrorText[e]
	}
	return "wire: unknown parse error"
}
