package contract

// EqualFoldASCII reports whether s and t are equal when ASCII letters are compared without regard
// to case, and every other byte exactly. Schemes, host names, header names and protocol tokens
// are ASCII, and RFC 6454, RFC 9110 and net/http compare them so; strings.EqualFold folds Unicode
// too, which makes "ſ" (U+017F) equal "s" and "K" (U+212A, the Kelvin sign) equal "k": an
// Origin of https://ſup.example would be the same as https://sup.example, and an Upgrade of
// "webſocket" a WebSocket.
func EqualFoldASCII(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}
