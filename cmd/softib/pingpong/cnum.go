package pingpong

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The C programs read every numeric option with strtol or strtoul and base
// 0, so "0x1000" and "010" (octal 8) are valid sizes. numFlag accepts the
// same spellings; it is stricter than strtol in rejecting what C silently
// reads as 0 or truncates ("", "abc", "12kb", negative unsigned values).

// parseCInt parses s as strtol(s, NULL, 0) would, whole-string only: an
// optional sign, then 0x/0X and hex digits, 0 and octal digits, or decimal.
func parseCInt(s string) (int64, error) {
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	base := 10
	switch {
	case len(digits) > 2 && (digits[:2] == "0x" || digits[:2] == "0X"):
		base, digits = 16, digits[2:]
	case len(digits) > 1 && digits[0] == '0':
		base, digits = 8, digits[1:]
	}
	if digits == "" || digits[0] == '+' || digits[0] == '-' {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	v, err := strconv.ParseInt(digits, base, 64)
	if err != nil {
		var numErr *strconv.NumError
		if errors.As(err, &numErr) && numErr.Err == strconv.ErrRange {
			return 0, fmt.Errorf("number %q out of range", s)
		}
		return 0, fmt.Errorf("invalid number %q", s)
	}
	if s[0] == '-' {
		v = -v
	}
	return v, nil
}

// numFlag is a flag.Value for an integer option with C's syntax, kept
// within [min, max]: the range of the C variable, or a check main() makes.
type numFlag[T ~int | ~uint32] struct {
	p        *T
	min, max int64
}

func (f numFlag[T]) String() string {
	if f.p == nil {
		return ""
	}
	return strconv.FormatInt(int64(*f.p), 10)
}

func (f numFlag[T]) Set(s string) error {
	v, err := parseCInt(s)
	if err != nil {
		return err
	}
	if v < f.min || v > f.max {
		return fmt.Errorf("%s out of range [%d, %d]", s, f.min, f.max)
	}
	*f.p = T(v)
	return nil
}
