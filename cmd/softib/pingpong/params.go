package pingpong

import "math/rand/v2"

// Constants the C programs hard-code, collected here so that the verbs half
// uses the same numbers as a C peer.
const (
	// DefaultPort is -p's default, the TCP port of the address exchange.
	DefaultPort = 18515
	// DefaultIBPort is -i's default.
	DefaultIBPort = 1
	// DefaultRxDepth is -r's default: receives kept posted.
	DefaultRxDepth = 500
	// DefaultIters is -n's default: messages each side sends.
	DefaultIters = 1000
	// DefaultMTU is -m's default path MTU in bytes (rc and uc only).
	DefaultMTU = 1024

	// UDQKey is the Q_Key ud_pingpong sets on its QP at INIT and on every
	// send. It is a constant on both sides, so it is never exchanged.
	UDQKey = 0x11111111
	// GRHSize is the room at the start of every UD receive buffer where the
	// HCA writes the GRH (ud_pingpong's "size + 40").
	GRHSize = 40
	// BufFill is the byte pp_init_ctx fills the work buffer with.
	BufFill = 0x7b

	// PSNMask keeps the 24 bits of a packet sequence number.
	PSNMask = 0xffffff
)

// The RC attributes rc_pingpong's pp_connect_ctx sets; uc and ud set none of
// them.
const (
	RCMinRNRTimer     = 12 // RTR min_rnr_timer
	RCMaxDestRdAtomic = 1  // RTR max_dest_rd_atomic
	RCTimeout         = 14 // RTS timeout
	RCRetryCnt        = 7  // RTS retry_cnt
	RCRNRRetry        = 7  // RTS rnr_retry (7: retry for ever)
	RCMaxRdAtomic     = 1  // RTS max_rd_atomic
)

// RandomPSN returns a random initial PSN, as main() does with
// lrand48() & 0xffffff. The C programs seed with getpid() * time(NULL); any
// source of randomness serves, since the peer learns the PSN from the
// exchange.
func RandomPSN() uint32 { return rand.Uint32() & PSNMask }

// MTUEnum maps a path MTU in bytes to its enum ibv_mtu value
// (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5), mirroring pp_mtu_to_enum; any
// other size gives 0, which the C programs reject.
func MTUEnum(bytes int) uint8 {
	switch bytes {
	case 256:
		return 1
	case 512:
		return 2
	case 1024:
		return 3
	case 2048:
		return 4
	case 4096:
		return 5
	}
	return 0
}
