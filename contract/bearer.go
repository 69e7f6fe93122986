package contract

import (
	"net/http"
	"strings"
)

// ParseBearer reads the bearer token of h: ok only when h has exactly one Authorization header
// and it is the scheme "Bearer" (any case), then one or more spaces, then one token with no space
// or control byte, and nothing else (but trailing spaces and tabs, which HTTP does not count as
// part of a field's value). It compares nothing: the caller compares the token with
// what it expects in constant time (crypto/subtle).
func ParseBearer(h http.Header) (token string, ok bool) {
	vals := h.Values("Authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !EqualFoldASCII(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimRight(strings.TrimLeft(tok, " "), " \t")
	if tok == "" {
		return "", false
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c == 0x7f {
			return "", false
		}
	}
	return tok, true
}
