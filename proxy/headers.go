package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
)

// The assertion headers: only the supervisor writes them, on the hop to a console (SPEC S6).
const (
	HeaderFleet      = "X-Phase-Console-Fleet"
	HeaderFleetLogin = "X-Phase-Console-Fleet-Login"
)

// FoldName is how fleet compares header names (SPEC S3): lower-cased, with every character that is
// not a letter or digit folded to '-'. So "x_phase.console-FLEET" and "X-Phase-Console-Fleet" are one
// name, as they may be to some console framework.
func FoldName(name string) string {
	b := make([]byte, len(name))
	for i := 0; i < len(name); i++ {
		b[i] = foldByte(name[i])
	}
	return string(b)
}

func foldByte(c byte) byte {
	switch {
	case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return c
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return '-'
}

// foldedEqual reports whether FoldName(name) == folded, without allocating.
func foldedEqual(name, folded string) bool {
	return len(name) == len(folded) && foldedHasPrefix(name, folded)
}

// foldedHasPrefix reports whether FoldName(name) starts with folded, without allocating.
func foldedHasPrefix(name, folded string) bool {
	if len(name) < len(folded) {
		return false
	}
	for i := 0; i < len(folded); i++ {
		if foldByte(name[i]) != folded[i] {
			return false
		}
	}
	return true
}

var (
	foldedFleet      = FoldName(HeaderFleet)
	foldedFleetLogin = FoldName(HeaderFleetLogin)
)

// IsAssertionName reports whether name is either assertion header under any S3 spelling.
func IsAssertionName(name string) bool {
	return foldedEqual(name, foldedFleet) || foldedEqual(name, foldedFleetLogin)
}

// identityPrefixes and identityNames are the header families that a caller may use to claim an
// identity (SPEC S4), folded, by the folded name's first byte (so that a name is compared with a
// few of them only). A name is removed when it equals one of identityNames or starts with one of
// identityPrefixes.
var (
	identityPrefixes = [256][]string{
		't': {"tailscale-"},
		'x': {"x-forwarded-", "x-remote-", "x-webauth-", "x-auth-request-", "x-pomerium-"},
		'r': {"remote-"},
		'c': {"cf-access-"},
	}
	identityNames = [256][]string{
		'f': {"forwarded"},
		'x': {"x-real-ip", foldedFleet, foldedFleetLogin},
		't': {"teleport-jwt-assertion"},
		'a': {"authorization"},
		'p': {"proxy-authorization"},
	}
)

// IsIdentityName reports whether name belongs to a family that S4 removes on every hop (assertion
// headers included), under any S3 spelling. It allocates nothing.
func IsIdentityName(name string) bool {
	if name == "" {
		return false
	}
	first := foldByte(name[0])
	for _, n := range identityNames[first] {
		if foldedEqual(name, n) {
			return true
		}
	}
	for _, p := range identityPrefixes[first] {
		if foldedHasPrefix(name, p) {
			return true
		}
	}
	return false
}

// CheckNoAssertion refuses (400 assertion-sent, SPEC S3) a request that carries an assertion header
// under any spelling, with any value (empty too), names one in Connection, or declares one as a
// trailer.
func CheckNoAssertion(r *http.Request) *Refusal {
	for name := range r.Header {
		if IsAssertionName(name) {
			return Refuse(http.StatusBadRequest, "assertion-sent", "the request carries an assertion header; only the supervisor writes it")
		}
	}
	if listsAssertionName(r.Header.Values("Connection")) {
		return Refuse(http.StatusBadRequest, "assertion-sent", "the request names an assertion header in Connection")
	}
	// net/http moves the names declared in "Trailer:" into r.Trailer; look at both.
	for name := range r.Trailer {
		if IsAssertionName(name) {
			return Refuse(http.StatusBadRequest, "assertion-sent", "the request declares an assertion header as a trailer")
		}
	}
	if listsAssertionName(r.Header.Values("Trailer")) {
		return Refuse(http.StatusBadRequest, "assertion-sent", "the request declares an assertion header as a trailer")
	}
	return nil
}

// listsAssertionName reports whether comma-separated header values name an assertion header.
func listsAssertionName(values []string) bool {
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if IsAssertionName(textproto.TrimString(tok)) {
				return true
			}
		}
	}
	return false
}

// ScrubIdentity removes from h every header that S4 names, under any spelling, in one pass over h
// that allocates nothing.
func ScrubIdentity(h http.Header) {
	for name := range h {
		if IsIdentityName(name) {
			delete(h, name)
		}
	}
}

// HasHeaderFold reports whether h has a header whose folded name is FoldName(name).
func HasHeaderFold(h http.Header, name string) bool {
	f := FoldName(name)
	for k := range h {
		if foldedEqual(k, f) {
			return true
		}
	}
	return false
}
