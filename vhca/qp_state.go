package vhca

import (
	"fmt"
	"strings"
)

// The QP state machine of Modify QP: which state changes a QP of each
// transport service may make, and which attributes each one must and may
// set (IBA 1.4 §10.3.1, QP states; the Modify Queue Pair verb and its
// table of required and optional attributes per transition, §11.2.4.2 and
// table 91 in the numbering the kernel's cm.c cites).
//
// The rules are the ones Linux enforces for every RDMA device, soft or hard:
// qp_state_table and ib_modify_qp_is_ok in drivers/infiniband/core/verbs.c
// (read at gregkh/linux 253c2ed71a53, identical in the rows below to the
// v4.x table in torvalds/linux 009f77383651), so that a verbs program that
// works on rxe or an mlx5 NIC works here and one that they refuse is refused
// here too. The required attributes of the Reset->Init->RTR->RTS path are the
// ones rdma-core's ibv_modify_qp(3) lists per transport service.
//
// Only RC, UC and UD are here. The kernel table also has columns for XRC
// INI/TGT (RC-like), RAW_PACKET (Reset->Init needs only the port; RTR->RTS
// and RTS->RTS accept IB_QP_RATE_LIMIT) and the special QPs SMI/GSI
// (UD-like); softib does not create those through this path.
//
// One departure: RTR->RTS and RTS->RTS accept QPAttrRateLimit
// (IB_QP_RATE_LIMIT, ratelimit.go) for RC, UC and UD, where the table
// read above has it for RAW_PACKET only. (Later kernels list it for RC
// too, in Init->RTR as well, for bnxt_re; a 2026 rdma-next series on
// packet pacing proposes to take it out of the table and leave it to the
// drivers.)

// qpTypeMasks is an attribute mask per transport service.
type qpTypeMasks struct{ RC, UC, UD QPAttrMask }

func (m *qpTypeMasks) of(t QPType) QPAttrMask {
	switch t {
	case QPTypeRC:
		return m.RC
	case QPTypeUC:
		return m.UC
	case QPTypeUD:
		return m.UD
	}
	return 0
}

// qpTypeSet is a set of transport services, one bit per QPType value.
type qpTypeSet uint8

const (
	qpTypesRC   qpTypeSet = 1 << QPTypeRC
	qpTypesUC   qpTypeSet = 1 << QPTypeUC
	qpTypesUD   qpTypeSet = 1 << QPTypeUD
	qpTypesAll            = qpTypesRC | qpTypesUC | qpTypesUD
	qpTypesUCUD           = qpTypesUC | qpTypesUD
)

func (s qpTypeSet) has(t QPType) bool { return t < 8 && s&(1<<t) != 0 }

// qpModifyRule is what Modify QP accepts for one (current state, next state)
// pair. A zero rule is a transition that does not exist.
type qpModifyRule struct {
	// allowed is the transport services for which the transition exists.
	allowed qpTypeSet
	// required must all be in the mask; optional may be. Anything else
	// but QPAttrState is refused: the verb would otherwise silently set
	// an attribute the state does not let change (a path MTU in RTS, say).
	required, optional qpTypeMasks
}

// qpPathMigAttrs is what automatic path migration needs of a connected QP:
// the alternate path and the migration state (arm, or migrate).
const qpPathMigAttrs = QPAttrAltPath | QPAttrPathMigState

// qpRuleBare is a transition that takes no attributes: to Reset and to
// Error, and the self transitions of Reset and Error.
var qpRuleBare = qpModifyRule{allowed: qpTypesAll}

// qpModifyRules is the QP state transition table, indexed [current][next].
// The diagonal is Modify QP without a state change (QPAttrState absent, or
// naming the current state), which only Reset, Init, RTS, SQD and Error
// have: in RTR and SQE nothing can be changed without moving on.
var qpModifyRules = [numQPStates][numQPStates]qpModifyRule{
	QPStateReset: {
		QPStateReset: qpRuleBare,
		// Reset->Init: the QP is bound to a port and partition, and
		// gets its Q_Key (UD) or remote access rights (RC, UC).
		QPStateInit: {
			allowed: qpTypesAll,
			required: qpTypeMasks{
				RC: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
				UC: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
				UD: QPAttrPKeyIndex | QPAttrPort | QPAttrQKey,
			},
		},
		// No Reset->Error, though "any state to Error" is the usual
		// summary: the kernel table has no such entry, so drivers
		// that consult ib_modify_qp_is_ok (rxe, mlx5) refuse it.
	},
	QPStateInit: {
		QPStateReset: qpRuleBare,
		QPStateError: qpRuleBare,
		// Init->Init: the Reset->Init attributes may be changed again.
		QPStateInit: {
			allowed: qpTypesAll,
			optional: qpTypeMasks{
				RC: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
				UC: QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
				UD: QPAttrPKeyIndex | QPAttrPort | QPAttrQKey,
			},
		},
		// Init->RTR: a connected QP learns its peer (primary path,
		// path MTU, destination QP, expected PSN) and, for RC, the
		// responder resources for RDMA READ and atomics and the RNR
		// NAK timer it asks for. UD has no peer: nothing is required.
		QPStateRTR: {
			allowed: qpTypesAll,
			required: qpTypeMasks{
				RC: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN |
					QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
				UC: QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN,
			},
			optional: qpTypeMasks{
				RC: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
				UC: QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
				UD: QPAttrPKeyIndex | QPAttrQKey,
			},
		},
	},
	QPStateRTR: {
		QPStateReset: qpRuleBare,
		QPStateError: qpRuleBare,
		// RTR->RTS: the send side starts: its first PSN and, for RC,
		// the local ACK timeout, retry counts and initiator depth.
		QPStateRTS: {
			allowed: qpTypesAll,
			required: qpTypeMasks{
				RC: QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry |
					QPAttrSQPSN | QPAttrMaxQPRdAtomic,
				UC: QPAttrSQPSN,
				UD: QPAttrSQPSN,
			},
			optional: qpTypeMasks{
				RC: QPAttrCurState | QPAttrAccessFlags | qpPathMigAttrs | QPAttrMinRNRTimer | QPAttrRateLimit,
				UC: QPAttrCurState | QPAttrAccessFlags | qpPathMigAttrs | QPAttrRateLimit,
				UD: QPAttrCurState | QPAttrQKey | QPAttrRateLimit,
			},
		},
	},
	QPStateRTS: {
		QPStateReset: qpRuleBare,
		QPStateError: qpRuleBare,
		// RTS->RTS: what may change while traffic flows.
		QPStateRTS: {
			allowed: qpTypesAll,
			optional: qpTypeMasks{
				RC: QPAttrCurState | QPAttrAccessFlags | qpPathMigAttrs | QPAttrMinRNRTimer | QPAttrRateLimit,
				UC: QPAttrCurState | QPAttrAccessFlags | qpPathMigAttrs | QPAttrRateLimit,
				UD: QPAttrCurState | QPAttrQKey | QPAttrRateLimit,
			},
		},
		// RTS->SQD: drain the send queue, optionally asking for the
		// SQ Drained affiliated asynchronous event when it is done.
		QPStateSQD: {
			allowed: qpTypesAll,
			optional: qpTypeMasks{
				RC: QPAttrEnSQDAsyncNotify,
				UC: QPAttrEnSQDAsyncNotify,
				UD: QPAttrEnSQDAsyncNotify,
			},
		},
	},
	QPStateSQD: {
		QPStateReset: qpRuleBare,
		QPStateError: qpRuleBare,
		// SQD->RTS: resume sending; the RTS->RTS set.
		QPStateRTS: {
			allowed: qpTypesAll,
			optional: qpTypeMasks{
				RC: QPAttrCurState | QPAttrAccessFlags | qpPathMigAttrs | QPAttrMinRNRTimer,
				UC: QPAttrCurState | QPAttrAccessFlags | qpPathMigAttrs,
				UD: QPAttrCurState | QPAttrQKey,
			},
		},
		// SQD->SQD: with the send queue drained, the send-side
		// parameters that are frozen in RTS may change: for RC the
		// port, primary path, ACK timeout, retry counts and both
		// RDMA READ/atomic depths; for UC the primary path.
		QPStateSQD: {
			allowed: qpTypesAll,
			optional: qpTypeMasks{
				RC: QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt |
					QPAttrRNRRetry | QPAttrMaxQPRdAtomic | QPAttrMaxDestRdAtomic |
					QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer |
					qpPathMigAttrs,
				UC: QPAttrAV | QPAttrAccessFlags | QPAttrPKeyIndex | qpPathMigAttrs,
				UD: QPAttrPKeyIndex | QPAttrQKey,
			},
		},
	},
	QPStateSQE: {
		QPStateReset: qpRuleBare,
		QPStateError: qpRuleBare,
		// SQE->RTS: the consumer resumes an unreliable QP whose send
		// queue failed. RC never enters SQE (a send error moves it to
		// Error, IBA 1.4 §10.3.1), so RC has no such transition. The
		// kernel table leaves RC's masks empty here but, having one
		// valid flag for all types, would accept RC SQE->RTS.
		QPStateRTS: {
			allowed: qpTypesUCUD,
			optional: qpTypeMasks{
				UC: QPAttrCurState | QPAttrAccessFlags,
				UD: QPAttrCurState | QPAttrQKey,
			},
		},
	},
	QPStateError: {
		QPStateReset: qpRuleBare,
		QPStateError: qpRuleBare,
	},
}

// TransitionError is a ModifyQP that the state machine refuses. The QP is
// left as it was.
type TransitionError struct {
	Type       QPType
	From, To   QPState
	NotAllowed bool       // the transition itself is not allowed for this type
	Missing    QPAttrMask // required attributes absent from the mask
	Extra      QPAttrMask // attributes present that the transition does not accept
}

func (e *TransitionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "vhca: modify %s QP %s->%s: ", e.Type, e.From, e.To)
	if e.NotAllowed {
		b.WriteString("transition not allowed")
		return b.String()
	}
	if e.Missing != 0 {
		fmt.Fprintf(&b, "missing required %s", e.Missing)
	}
	if e.Extra != 0 {
		if e.Missing != 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s not accepted", e.Extra)
	}
	return b.String()
}

// CheckTransition reports whether a QP of type t in state from may be
// modified with the attribute mask given to ibv_modify_qp, moving to state
// to. It returns nil or a *TransitionError.
//
// As in the kernel's drivers, the next state is to only when the mask has
// QPAttrState; without it the modify stays in from (to is ignored) and is
// checked against the from->from row, which exists only for Reset, Init,
// RTS, SQD and Error. QPAttrState is never an extra attribute. QPAttrCurState
// is accepted only where the table lists it (leaving RTR, RTS, SQD or SQE for
// RTS); ib_modify_qp_is_ok's separate check that the current state is one of
// those four is implied by that.
func CheckTransition(t QPType, from, to QPState, mask QPAttrMask) error {
	if mask&QPAttrState == 0 {
		to = from
	}
	if from >= numQPStates || to >= numQPStates {
		return &TransitionError{Type: t, From: from, To: to, NotAllowed: true}
	}
	r := &qpModifyRules[from][to]
	if !r.allowed.has(t) {
		return &TransitionError{Type: t, From: from, To: to, NotAllowed: true}
	}
	req, opt := r.required.of(t), r.optional.of(t)
	missing := req &^ mask
	extra := mask &^ (req | opt | QPAttrState)
	if missing == 0 && extra == 0 {
		return nil
	}
	return &TransitionError{Type: t, From: from, To: to, Missing: missing, Extra: extra}
}

// qpAttrMaskNames are libibverbs' names of the QPAttrMask bits (enum
// ibv_qp_attr_mask), by bit number.
var qpAttrMaskNames = [...]string{
	0:  "IBV_QP_STATE",
	1:  "IBV_QP_CUR_STATE",
	2:  "IBV_QP_EN_SQD_ASYNC_NOTIFY",
	3:  "IBV_QP_ACCESS_FLAGS",
	4:  "IBV_QP_PKEY_INDEX",
	5:  "IBV_QP_PORT",
	6:  "IBV_QP_QKEY",
	7:  "IBV_QP_AV",
	8:  "IBV_QP_PATH_MTU",
	9:  "IBV_QP_TIMEOUT",
	10: "IBV_QP_RETRY_CNT",
	11: "IBV_QP_RNR_RETRY",
	12: "IBV_QP_RQ_PSN",
	13: "IBV_QP_MAX_QP_RD_ATOMIC",
	14: "IBV_QP_ALT_PATH",
	15: "IBV_QP_MIN_RNR_TIMER",
	16: "IBV_QP_SQ_PSN",
	17: "IBV_QP_MAX_DEST_RD_ATOMIC",
	18: "IBV_QP_PATH_MIG_STATE",
	19: "IBV_QP_CAP",
	20: "IBV_QP_DEST_QPN",
	25: "IBV_QP_RATE_LIMIT",
}

// String lists the set bits by their libibverbs names, lowest bit first,
// joined by "|" ("IBV_QP_PATH_MTU|IBV_QP_DEST_QPN"); a bit with no name is
// shown in hex, and the empty mask as "0".
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var b strings.Builder
	for i := 0; i < 32; i++ {
		bit := QPAttrMask(1) << i
		if m&bit == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		if i < len(qpAttrMaskNames) && qpAttrMaskNames[i] != "" {
			b.WriteString(qpAttrMaskNames[i])
		} else {
			fmt.Fprintf(&b, "%#x", uint32(bit))
		}
	}
	return b.String()
}

// Unwrap makes a refused transition an ErrInvalid (EINVAL), as the kernel
// reports it.
func (e *TransitionError) Unwrap() error { return ErrInvalid }
