package vhca

import (
	"errors"
	"strings"
	"testing"
)

// The expectations here are written out by hand from the sources, not read
// back from qpModifyRules, so that a wrong table fails.

// ibvAttrNames is every ibv_qp_attr_mask bit by its libibverbs name.
var ibvAttrNames = map[string]QPAttrMask{
	"IBV_QP_STATE":               QPAttrState,
	"IBV_QP_CUR_STATE":           QPAttrCurState,
	"IBV_QP_EN_SQD_ASYNC_NOTIFY": QPAttrEnSQDAsyncNotify,
	"IBV_QP_ACCESS_FLAGS":        QPAttrAccessFlags,
	"IBV_QP_PKEY_INDEX":          QPAttrPKeyIndex,
	"IBV_QP_PORT":                QPAttrPort,
	"IBV_QP_QKEY":                QPAttrQKey,
	"IBV_QP_AV":                  QPAttrAV,
	"IBV_QP_PATH_MTU":            QPAttrPathMTU,
	"IBV_QP_TIMEOUT":             QPAttrTimeout,
	"IBV_QP_RETRY_CNT":           QPAttrRetryCnt,
	"IBV_QP_RNR_RETRY":           QPAttrRNRRetry,
	"IBV_QP_RQ_PSN":              QPAttrRQPSN,
	"IBV_QP_MAX_QP_RD_ATOMIC":    QPAttrMaxQPRdAtomic,
	"IBV_QP_ALT_PATH":            QPAttrAltPath,
	"IBV_QP_MIN_RNR_TIMER":       QPAttrMinRNRTimer,
	"IBV_QP_SQ_PSN":              QPAttrSQPSN,
	"IBV_QP_MAX_DEST_RD_ATOMIC":  QPAttrMaxDestRdAtomic,
	"IBV_QP_PATH_MIG_STATE":      QPAttrPathMigState,
	"IBV_QP_CAP":                 QPAttrCap,
	"IBV_QP_DEST_QPN":            QPAttrDestQPN,
	"IBV_QP_RATE_LIMIT":          QPAttrRateLimit,
}

// parseIBVNames turns "IBV_QP_A, IBV_QP_B" into a mask.
func parseIBVNames(tb testing.TB, list string) QPAttrMask {
	tb.Helper()
	var m QPAttrMask
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		bit, ok := ibvAttrNames[f]
		if !ok {
			tb.Fatalf("unknown attribute name %q", f)
		}
		m |= bit
	}
	return m
}

// manPageRequired is the "Required attributes" tables of rdma-core's
// ibv_modify_qp(3), copied as they are printed there: the attributes that
// must be set on the way Reset -> Init -> RTR -> RTS, by next state.
var manPageRequired = map[QPType]map[QPState]string{
	QPTypeUD: {
		QPStateInit: "IBV_QP_STATE, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY",
		QPStateRTR:  "IBV_QP_STATE",
		QPStateRTS:  "IBV_QP_STATE, IBV_QP_SQ_PSN",
	},
	QPTypeUC: {
		QPStateInit: "IBV_QP_STATE, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_ACCESS_FLAGS",
		QPStateRTR:  "IBV_QP_STATE, IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN",
		QPStateRTS:  "IBV_QP_STATE, IBV_QP_SQ_PSN",
	},
	QPTypeRC: {
		QPStateInit: "IBV_QP_STATE, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_ACCESS_FLAGS",
		QPStateRTR: "IBV_QP_STATE, IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN, " +
			"IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER",
		QPStateRTS: "IBV_QP_STATE, IBV_QP_SQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC, " +
			"IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_TIMEOUT",
	},
}

// existingTransition is one transition the kernel's qp_state_table marks
// valid, with its optional attributes per type (the kernel's opt_param; no
// transition off the Reset->Init->RTR->RTS path has required attributes).
// A type absent from opt has the transition with no optional attributes;
// only lists which of RC, UC, UD have it at all (all when empty).
type existingTransition struct {
	from, to QPState
	only     []QPType
	opt      map[QPType]string
}

var existingTransitions = []existingTransition{
	{from: QPStateReset, to: QPStateReset},
	{from: QPStateReset, to: QPStateInit},

	{from: QPStateInit, to: QPStateReset},
	{from: QPStateInit, to: QPStateError},
	{from: QPStateInit, to: QPStateInit, opt: map[QPType]string{
		QPTypeRC: "IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_ACCESS_FLAGS",
		QPTypeUC: "IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_ACCESS_FLAGS",
		QPTypeUD: "IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY",
	}},
	{from: QPStateInit, to: QPStateRTR, opt: map[QPType]string{
		QPTypeRC: "IBV_QP_ALT_PATH, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX",
		QPTypeUC: "IBV_QP_ALT_PATH, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX",
		QPTypeUD: "IBV_QP_PKEY_INDEX, IBV_QP_QKEY",
	}},

	{from: QPStateRTR, to: QPStateReset},
	{from: QPStateRTR, to: QPStateError},
	// IBV_QP_RATE_LIMIT in RTR->RTS and RTS->RTS: the kernel table read
	// has it for RAW_PACKET QPs only; softib takes it for RC, UC and UD
	// (ratelimit.go, and the note in qp_state.go).
	{from: QPStateRTR, to: QPStateRTS, opt: map[QPType]string{
		QPTypeRC: "IBV_QP_CUR_STATE, IBV_QP_ALT_PATH, IBV_QP_ACCESS_FLAGS, IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MIG_STATE, IBV_QP_RATE_LIMIT",
		QPTypeUC: "IBV_QP_CUR_STATE, IBV_QP_ALT_PATH, IBV_QP_ACCESS_FLAGS, IBV_QP_PATH_MIG_STATE, IBV_QP_RATE_LIMIT",
		QPTypeUD: "IBV_QP_CUR_STATE, IBV_QP_QKEY, IBV_QP_RATE_LIMIT",
	}},

	{from: QPStateRTS, to: QPStateReset},
	{from: QPStateRTS, to: QPStateError},
	{from: QPStateRTS, to: QPStateRTS, opt: map[QPType]string{
		QPTypeRC: "IBV_QP_CUR_STATE, IBV_QP_ACCESS_FLAGS, IBV_QP_ALT_PATH, IBV_QP_PATH_MIG_STATE, IBV_QP_MIN_RNR_TIMER, IBV_QP_RATE_LIMIT",
		QPTypeUC: "IBV_QP_CUR_STATE, IBV_QP_ACCESS_FLAGS, IBV_QP_ALT_PATH, IBV_QP_PATH_MIG_STATE, IBV_QP_RATE_LIMIT",
		QPTypeUD: "IBV_QP_CUR_STATE, IBV_QP_QKEY, IBV_QP_RATE_LIMIT",
	}},
	{from: QPStateRTS, to: QPStateSQD, opt: map[QPType]string{
		QPTypeRC: "IBV_QP_EN_SQD_ASYNC_NOTIFY",
		QPTypeUC: "IBV_QP_EN_SQD_ASYNC_NOTIFY",
		QPTypeUD: "IBV_QP_EN_SQD_ASYNC_NOTIFY",
	}},

	{from: QPStateSQD, to: QPStateReset},
	{from: QPStateSQD, to: QPStateError},
	{from: QPStateSQD, to: QPStateRTS, opt: map[QPType]string{
		QPTypeRC: "IBV_QP_CUR_STATE, IBV_QP_ALT_PATH, IBV_QP_ACCESS_FLAGS, IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MIG_STATE",
		QPTypeUC: "IBV_QP_CUR_STATE, IBV_QP_ALT_PATH, IBV_QP_ACCESS_FLAGS, IBV_QP_PATH_MIG_STATE",
		QPTypeUD: "IBV_QP_CUR_STATE, IBV_QP_QKEY",
	}},
	{from: QPStateSQD, to: QPStateSQD, opt: map[QPType]string{
		QPTypeRC: "IBV_QP_PORT, IBV_QP_AV, IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, " +
			"IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_ALT_PATH, " +
			"IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX, IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MIG_STATE",
		QPTypeUC: "IBV_QP_AV, IBV_QP_ALT_PATH, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX, IBV_QP_PATH_MIG_STATE",
		QPTypeUD: "IBV_QP_PKEY_INDEX, IBV_QP_QKEY",
	}},

	{from: QPStateSQE, to: QPStateReset},
	{from: QPStateSQE, to: QPStateError},
	// An RC QP never is in SQE; the kernel's single valid flag would
	// accept RC SQE->RTS with an empty mask, softib does not.
	{from: QPStateSQE, to: QPStateRTS, only: []QPType{QPTypeUC, QPTypeUD}, opt: map[QPType]string{
		QPTypeUC: "IBV_QP_CUR_STATE, IBV_QP_ACCESS_FLAGS",
		QPTypeUD: "IBV_QP_CUR_STATE, IBV_QP_QKEY",
	}},

	{from: QPStateError, to: QPStateReset},
	{from: QPStateError, to: QPStateError},
	// Not in the kernel table, so refused: Reset->Error, RTR->RTR,
	// SQE->SQE, and every other pair not listed.
}

type transitionWant struct {
	allowed   bool
	needState bool // the man page lists IBV_QP_STATE (always, for a state change)
	req, opt  QPAttrMask
}

// expectTransition assembles the expectation for one (type, from, to).
func expectTransition(tb testing.TB, t QPType, from, to QPState) transitionWant {
	tb.Helper()
	var w transitionWant
	for _, e := range existingTransitions {
		if e.from != from || e.to != to {
			continue
		}
		w.allowed = len(e.only) == 0
		for _, o := range e.only {
			w.allowed = w.allowed || o == t
		}
		if w.allowed {
			w.opt = parseIBVNames(tb, e.opt[t])
		}
	}
	mainPath := (from == QPStateReset && to == QPStateInit) ||
		(from == QPStateInit && to == QPStateRTR) ||
		(from == QPStateRTR && to == QPStateRTS)
	if mainPath {
		if !w.allowed {
			tb.Fatalf("%s %s->%s: on the man page's path but not in existingTransitions", t, from, to)
		}
		w.req = parseIBVNames(tb, manPageRequired[t][to])
		w.needState = w.req&QPAttrState != 0
		w.req &^= QPAttrState
	}
	return w
}

var allQPTypes = []QPType{QPTypeRC, QPTypeUC, QPTypeUD}

func allQPStates() []QPState {
	var s []QPState
	for st := QPStateReset; st <= QPStateError; st++ {
		s = append(s, st)
	}
	return s
}

// maskBits lists the set bits of m.
func maskBits(m QPAttrMask) []QPAttrMask {
	var out []QPAttrMask
	for i := 0; i < 32; i++ {
		if b := QPAttrMask(1) << i; m&b != 0 {
			out = append(out, b)
		}
	}
	return out
}

func allIBVAttrs() QPAttrMask {
	var m QPAttrMask
	for _, b := range ibvAttrNames {
		m |= b
	}
	return m
}

// asTransitionError fails unless err is a *TransitionError naming t, from, to.
func asTransitionError(tb testing.TB, err error, t QPType, from, to QPState) *TransitionError {
	tb.Helper()
	if err == nil {
		tb.Fatalf("%s %s->%s: accepted, want refused", t, from, to)
	}
	var te *TransitionError
	if !errors.As(err, &te) {
		tb.Fatalf("%s %s->%s: error %T %v, want *TransitionError", t, from, to, err, err)
	}
	if te.Type != t || te.From != from || te.To != to {
		tb.Fatalf("%s %s->%s: error names %s %s->%s", t, from, to, te.Type, te.From, te.To)
	}
	return te
}

// TestTransitionTable checks every (from, to) pair of the seven states for
// RC, UC and UD.
func TestTransitionTable(t *testing.T) {
	nAllowed := 0
	for _, qt := range allQPTypes {
		for _, from := range allQPStates() {
			for _, to := range allQPStates() {
				w := expectTransition(t, qt, from, to)
				name := qt.String() + "/" + from.String() + "->" + to.String()
				t.Run(name, func(t *testing.T) {
					if !w.allowed {
						checkRefused(t, qt, from, to)
						return
					}
					nAllowed++
					checkAllowed(t, qt, from, to, w)
				})
			}
		}
	}
	// 21 transitions for each of RC, UC, UD, and SQE->RTS for UC and UD.
	if nAllowed != 3*21+2 {
		t.Errorf("%d allowed (type, from, to), want %d", nAllowed, 3*21+2)
	}
}

func checkRefused(t *testing.T, qt QPType, from, to QPState) {
	t.Helper()
	for _, mask := range []QPAttrMask{QPAttrState, allIBVAttrs()} {
		te := asTransitionError(t, CheckTransition(qt, from, to, mask), qt, from, to)
		if !te.NotAllowed || te.Missing != 0 || te.Extra != 0 {
			t.Errorf("mask %s: got %+v, want NotAllowed only", mask, te)
		}
	}
	if from == to {
		// Without QPAttrState the target given is ignored: the modify
		// stays in from, which has no such row.
		other := (to + 1) % numQPStates
		te := asTransitionError(t, CheckTransition(qt, from, other, 0), qt, from, from)
		if !te.NotAllowed {
			t.Errorf("no QPAttrState: got %+v, want NotAllowed", te)
		}
	}
}

func checkAllowed(t *testing.T, qt QPType, from, to QPState, w transitionWant) {
	t.Helper()
	// Exactly the required attributes, then all that are accepted.
	if err := CheckTransition(qt, from, to, QPAttrState|w.req); err != nil {
		t.Errorf("required %s: %v", w.req, err)
	}
	if err := CheckTransition(qt, from, to, QPAttrState|w.req|w.opt); err != nil {
		t.Errorf("required|optional %s: %v", w.req|w.opt, err)
	}
	if from == to {
		// The same, as a modify without a state change: to is ignored.
		other := (to + 1) % numQPStates
		if err := CheckTransition(qt, from, other, w.req|w.opt); err != nil {
			t.Errorf("no QPAttrState, %s: %v", w.req|w.opt, err)
		}
	} else if w.needState {
		// The man page's IBV_QP_STATE is needed: without it the mask
		// means a modify in from, which does not accept these.
		err := CheckTransition(qt, from, to, w.req)
		if err == nil && w.req != 0 {
			t.Errorf("required %s without QPAttrState: accepted", w.req)
		}
		if err != nil {
			te := asTransitionError(t, err, qt, from, from)
			if !te.NotAllowed && te.Extra == 0 {
				t.Errorf("required without QPAttrState: %+v", te)
			}
		}
	}
	// Each required attribute left out is reported missing.
	for _, b := range maskBits(w.req) {
		te := asTransitionError(t, CheckTransition(qt, from, to, QPAttrState|(w.req|w.opt)&^b), qt, from, to)
		if te.NotAllowed || te.Missing != b || te.Extra != 0 {
			t.Errorf("without %s: got %+v, want Missing %s", b, te, b)
		}
	}
	// Each attribute the transition does not accept is reported extra.
	others := maskBits(allIBVAttrs() &^ (w.req | w.opt | QPAttrState))
	if len(others) == 0 {
		t.Fatal("no attribute left to add")
	}
	for _, b := range others {
		te := asTransitionError(t, CheckTransition(qt, from, to, QPAttrState|w.req|b), qt, from, to)
		if te.NotAllowed || te.Extra != b || te.Missing != 0 {
			t.Errorf("with %s: got %+v, want Extra %s", b, te, b)
		}
	}
}

// TestTransitionManPagePath walks each type from Reset to RTS with exactly
// the man page's attributes, as a verbs program does.
func TestTransitionManPagePath(t *testing.T) {
	for _, qt := range allQPTypes {
		state := QPStateReset
		for _, next := range []QPState{QPStateInit, QPStateRTR, QPStateRTS} {
			mask := parseIBVNames(t, manPageRequired[qt][next])
			if err := CheckTransition(qt, state, next, mask); err != nil {
				t.Errorf("%s %s->%s with %s: %v", qt, state, next, mask, err)
			}
			state = next
		}
	}
}

// TestTransitionCurState: IBV_QP_CUR_STATE only where the kernel takes it,
// a move to RTS out of RTR, RTS, SQD or SQE.
func TestTransitionCurState(t *testing.T) {
	for _, c := range []struct {
		qt       QPType
		from, to QPState
		mask     QPAttrMask
		ok       bool
	}{
		{QPTypeRC, QPStateRTS, QPStateRTS, QPAttrCurState, true},
		{QPTypeUD, QPStateSQE, QPStateRTS, QPAttrState | QPAttrCurState, true},
		{QPTypeUC, QPStateSQD, QPStateRTS, QPAttrState | QPAttrCurState, true},
		{QPTypeRC, QPStateInit, QPStateInit, QPAttrCurState, false},
		{QPTypeRC, QPStateRTS, QPStateError, QPAttrState | QPAttrCurState, false},
		{QPTypeUD, QPStateSQD, QPStateSQD, QPAttrCurState, false},
		{QPTypeRC, QPStateReset, QPStateInit, QPAttrState | QPAttrCurState |
			QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags, false},
	} {
		err := CheckTransition(c.qt, c.from, c.to, c.mask)
		if c.ok {
			if err != nil {
				t.Errorf("%s %s->%s %s: %v", c.qt, c.from, c.to, c.mask, err)
			}
			continue
		}
		te := asTransitionError(t, err, c.qt, c.from, c.to)
		if te.Extra != QPAttrCurState {
			t.Errorf("%s %s->%s %s: %+v, want Extra IBV_QP_CUR_STATE", c.qt, c.from, c.to, c.mask, te)
		}
	}
}

// TestTransitionBadArguments: unknown types and states are refused, not
// looked up out of range.
func TestTransitionBadArguments(t *testing.T) {
	for _, qt := range []QPType{0, 1, 5, 255} {
		te := asTransitionError(t, CheckTransition(qt, QPStateReset, QPStateReset, QPAttrState), qt, QPStateReset, QPStateReset)
		if !te.NotAllowed {
			t.Errorf("type %d: %+v, want NotAllowed", qt, te)
		}
	}
	for _, st := range []QPState{numQPStates, 200} {
		te := asTransitionError(t, CheckTransition(QPTypeRC, st, QPStateReset, QPAttrState), QPTypeRC, st, QPStateReset)
		if !te.NotAllowed {
			t.Errorf("from %d: %+v, want NotAllowed", st, te)
		}
		te = asTransitionError(t, CheckTransition(QPTypeRC, QPStateInit, st, QPAttrState), QPTypeRC, QPStateInit, st)
		if !te.NotAllowed {
			t.Errorf("to %d: %+v, want NotAllowed", st, te)
		}
	}
}

func TestTransitionErrorText(t *testing.T) {
	for _, c := range []struct {
		err  error
		want []string
	}{
		{
			CheckTransition(QPTypeRC, QPStateInit, QPStateRTR,
				QPAttrState|QPAttrAV|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer|QPAttrQKey),
			[]string{"RC", "INIT", "RTR", "IBV_QP_PATH_MTU|IBV_QP_DEST_QPN", "IBV_QP_QKEY", "missing"},
		},
		{
			CheckTransition(QPTypeUD, QPStateRTS, QPStateRTS, QPAttrPathMTU),
			[]string{"UD", "RTS", "IBV_QP_PATH_MTU", "not accepted"},
		},
		{
			CheckTransition(QPTypeUC, QPStateRTR, QPStateSQD, QPAttrState),
			[]string{"UC", "RTR", "SQD", "not allowed"},
		},
		{
			CheckTransition(QPTypeRC, QPStateSQE, QPStateRTS, QPAttrState),
			[]string{"RC", "SQE", "RTS", "not allowed"},
		},
	} {
		if c.err == nil {
			t.Errorf("accepted, want an error mentioning %q", c.want)
			continue
		}
		msg := c.err.Error()
		for _, s := range c.want {
			if !strings.Contains(msg, s) {
				t.Errorf("%q does not mention %q", msg, s)
			}
		}
	}
}

func TestTransitionMaskString(t *testing.T) {
	for name, b := range ibvAttrNames {
		if got := b.String(); got != name {
			t.Errorf("%#x: %q, want %q", uint32(b), got, name)
		}
	}
	for _, c := range []struct {
		m    QPAttrMask
		want string
	}{
		{0, "0"},
		{QPAttrDestQPN | QPAttrPathMTU, "IBV_QP_PATH_MTU|IBV_QP_DEST_QPN"},
		{QPAttrState | 1<<21, "IBV_QP_STATE|0x200000"},
		{1 << 31, "0x80000000"},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("%#x: %q, want %q", uint32(c.m), got, c.want)
		}
	}
}
