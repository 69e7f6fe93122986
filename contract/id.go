package contract

// MaxConsoleIDLen is the longest console id.
const MaxConsoleIDLen = 63

// ValidConsoleID reports whether id is a console id: [a-z0-9][a-z0-9-]{0,62}, lower case only,
// as registered (SPEC S8) and as it appears in /c/<id>/ (S7). It allocates nothing.
func ValidConsoleID(id string) bool {
	if len(id) == 0 || len(id) > MaxConsoleIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0:
		default:
			return false
		}
	}
	return true
}
