package contract

import "net/http"

// The assertion headers: only the supervisor writes them, on the hop to a console (SPEC S3, S6).
// A console believes them only as SPEC C1–C4 say.
const (
	HeaderFleet      = "X-Phase-Console-Fleet"       // the fleet token
	HeaderFleetLogin = "X-Phase-Console-Fleet-Login" // the verified login
)

// FoldName is how fleet and a console compare header names (SPEC S3): lower-cased, with every
// byte that is not an ASCII letter or digit folded to '-'. So "x_phase.console-FLEET" and
// "X-Phase-Console-Fleet" are one name, as they may be to some console framework. The result
// has the length of name and holds only [a-z0-9-].
func FoldName(name string) string {
	b := make([]byte, len(name))
	for i := 0; i < len(name); i++ {
		b[i] = FoldByte(name[i])
	}
	return string(b)
}

// FoldByte is FoldName of one byte.
func FoldByte(c byte) byte {
	switch {
	case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return c
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return '-'
}

// FoldedEqual reports whether FoldName(name) == folded, without allocating: the hot path's way
// to compare a header name with an already folded one.
func FoldedEqual(name, folded string) bool {
	return len(name) == len(folded) && FoldedHasPrefix(name, folded)
}

// FoldedHasPrefix reports whether FoldName(name) starts with folded, without allocating.
func FoldedHasPrefix(name, folded string) bool {
	if len(name) < len(folded) {
		return false
	}
	for i := 0; i < len(folded); i++ {
		if FoldByte(name[i]) != folded[i] {
			return false
		}
	}
	return true
}

// The assertion header names, folded: FoldName(HeaderFleet) and FoldName(HeaderFleetLogin).
const (
	FoldedFleet      = "x-phase-console-fleet"
	FoldedFleetLogin = "x-phase-console-fleet-login"
)

// IsAssertionName reports whether name is either assertion header under any S3 spelling. It
// allocates nothing.
func IsAssertionName(name string) bool {
	return FoldedEqual(name, FoldedFleet) || FoldedEqual(name, FoldedFleetLogin)
}

// HasHeaderFold reports whether h has a header whose name folds as name does (any S3
// spelling of name). name may be given folded or not.
func HasHeaderFold(h http.Header, name string) bool {
	for k := range h {
		if len(k) == len(name) && foldedEqualNames(k, name) {
			return true
		}
	}
	return false
}

// foldedEqualNames reports whether FoldName(a) == FoldName(b), for a and b of equal length.
func foldedEqualNames(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if FoldByte(a[i]) != FoldByte(b[i]) {
			return false
		}
	}
	return true
}
