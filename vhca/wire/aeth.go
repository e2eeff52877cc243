package wire

import "fmt"

// AETH is a view of the ACK Extended Transport Header (IBA 1.4 §9.5):
// Syndrome(8), MSN(24).
type AETH []byte

func (h AETH) Syndrome() Syndrome     { return Syndrome(h[0]) }
func (h AETH) MSN() uint32            { return get24(h[1:]) }
func (h AETH) SetSyndrome(s Syndrome) { h[0] = uint8(s) }
func (h AETH) SetMSN(v uint32)        { put24(h[1:], v) }

// Syndrome is the AETH syndrome byte (IBA 1.4 §9.7.5.2.2, table 44): bit 7
// reserved, bits 6..5 the kind, bits 4..0 a credit count, an RNR timer code
// or a NAK code.
type Syndrome uint8

// SyndromeKind is bits 6..5 of a syndrome.
type SyndromeKind uint8

const (
	SyndromeACK      SyndromeKind = 0
	SyndromeRNRNAK   SyndromeKind = 1
	SyndromeReserved SyndromeKind = 2
	SyndromeNAK      SyndromeKind = 3
)

// NAK codes (IBA 1.4 table 44).
const (
	NAKPSNSequenceError  = 0
	NAKInvalidRequest    = 1
	NAKRemoteAccessError = 2
	NAKRemoteOperational = 3
	NAKInvalidRDRequest  = 4
	CreditCountInvalid   = 0x1F // ACK: no end-to-end credit information
	maxSyndromeValue     = 0x1F
)

// ACKSyndrome returns the syndrome of an ACK carrying a credit count
// (0..30, or CreditCountInvalid).
func ACKSyndrome(credits uint8) Syndrome { return Syndrome(credits & maxSyndromeValue) }

// RNRNAKSyndrome returns the syndrome of an RNR NAK with the given RNR timer
// code (IBA 1.4 table 45).
func RNRNAKSyndrome(timer uint8) Syndrome {
	return Syndrome(uint8(SyndromeRNRNAK)<<5 | timer&maxSyndromeValue)
}

// NAKSyndrome returns the syndrome of a NAK with the given code.
func NAKSyndrome(code uint8) Syndrome {
	return Syndrome(uint8(SyndromeNAK)<<5 | code&maxSyndromeValue)
}

func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s>>5) & 0x3 }

// Value is the credit count, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & maxSyndromeValue }

func (s Syndrome) String() string {
	switch s.Kind() {
	case SyndromeACK:
		if s.Value() == CreditCountInvalid {
			return "ACK"
		}
		return fmt.Sprintf("ACK credits=%d", s.Value())
	case SyndromeRNRNAK:
		return fmt.Sprintf("RNR NAK timer=%d", s.Value())
	case SyndromeNAK:
		switch s.Value() {
		case NAKPSNSequenceError:
			return "NAK PSN sequence error"
		case NAKInvalidRequest:
			return "NAK invalid request"
		case NAKRemoteAccessError:
			return "NAK remote access error"
		case NAKRemoteOperational:
			return "NAK remote operational error"
		case NAKInvalidRDRequest:
			return "NAK invalid RD request"
		}
		return fmt.Sprintf("NAK reserved code %d", s.Value())
	}
	return fmt.Sprintf("reserved syndrome 0x%02x", uint8(s))
}
