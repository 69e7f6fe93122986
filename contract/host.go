package contract

import (
	"net/netip"
	"strings"
)

// ParseHost reads a Host header (or an X-Forwarded-Host value): it returns the host, lower-cased,
// without port, brackets or a trailing dot, and ok true — only when h is exactly a name of
// [A-Za-z0-9.-] labels or an IP literal (IPv6 in brackets, no zone), with an optional decimal
// port 1-65535. Anything else is "", false: nothing rides after the port, and "[…]" holds only an
// IPv6 literal, so no "host:1,evil.example" is ever admitted and passed on.
func ParseHost(h string) (host string, ok bool) {
	host, _, ok = parseHost(h)
	return host, ok
}

// parseHost is ParseHost, and whether a name ended in a dot (which ParseHost drops).
func parseHost(h string) (host string, dotted, ok bool) {
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", false, false
		}
		lit, rest := h[1:end], h[end+1:]
		ip, err := netip.ParseAddr(lit)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", false, false
		}
		if rest != "" && (rest[0] != ':' || !validPort(rest[1:])) {
			return "", false, false
		}
		return strings.ToLower(lit), false, true
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if !validPort(h[i+1:]) {
			return "", false, false
		}
		h = h[:i]
	}
	name, dotted := strings.CutSuffix(h, ".")
	if name == "" || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return "", false, false // an empty label
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return "", false, false
		}
	}
	return strings.ToLower(name), dotted, true
}

// validPort reports whether p is a decimal port 1-65535: one to five digits, no sign.
func validPort(p string) bool {
	if len(p) == 0 || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n >= 1 && n <= 65535
}

var loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// IsLoopbackHost reports whether the Host header h names this machine's loopback as SPEC C2 means
// it: 127.0.0.1, [::1] or localhost (any case), with any port (1-65535) or none. Nothing else:
// not 127.0.0.2, not "localhost.", not [::ffff:127.0.0.1], not 127.0.0.1.evil.example.
func IsLoopbackHost(h string) bool {
	host, dotted, ok := parseHost(h)
	if !ok || dotted {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && (ip == loopback4 || ip == netip.IPv6Loopback())
}
