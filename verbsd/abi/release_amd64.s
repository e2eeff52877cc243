//go:build amd64 && !race

#include "textflag.h"

// func storeRelease(p *uint32, v uint32)
//
// A plain MOV: on x86-64 every store has release ordering (TSO), and
// being a call, it is also a barrier to the compiler.
TEXT ·storeRelease(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET
