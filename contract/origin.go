package contract

import "strings"

// SameOrigin reports whether origin, the value of a request's one Origin header, is the request's
// own origin: scheme ("http" or "https", as the request came in) plus host (its Host header).
//
// The comparison is RFC 6454's: a browser serialises an origin as exactly scheme "://" host
// [":" port] — no path (not even "/"), no userinfo, query or fragment — so anything else is not
// an origin and never the same. Scheme and host compare without regard to case, and the
// scheme's default port (:80 for http, :443 for https) is the same as none, on either side.
// Case is ASCII case (EqualFoldASCII): no other letter folds onto an ASCII one.
// "null" (an opaque origin: a sandboxed frame, a file: page, a redirect) is never the same.
//
// Both doors (SPEC S12) and the console library judge Origin with it, so a page is one origin or
// another by one rule. A caller with no Origin header, or more than one, decides that itself.
func SameOrigin(origin, scheme, host string) bool {
	oscheme, ohost, ok := strings.Cut(origin, "://")
	if !ok || !EqualFoldASCII(oscheme, scheme) || !validOriginHost(ohost) {
		return false
	}
	return EqualFoldASCII(withoutDefaultPort(ohost, scheme), withoutDefaultPort(host, scheme))
}

// validOriginHost reports whether h can be the host[:port] of a serialised origin: a non-empty
// host (an IPv6 literal in brackets) with no path, userinfo, query, fragment or space, and a port,
// if any, of 1-65535.
func validOriginHost(h string) bool {
	if h == "" || strings.ContainsAny(h, "/\\?#@ \t\r\n") {
		return false
	}
	name, port := h, ""
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		name, port = h[:i], h[i+1:]
		if !validPort(port) {
			return false
		}
	}
	if strings.HasPrefix(name, "[") {
		return strings.IndexByte(name, ']') == len(name)-1 && len(name) > 2 // an IPv6 literal
	}
	return name != "" && !strings.ContainsAny(name, ":[]")
}

// withoutDefaultPort drops scheme's default port from host.
func withoutDefaultPort(host, scheme string) string {
	switch {
	case EqualFoldASCII(scheme, "http"):
		return strings.TrimSuffix(host, ":80")
	case EqualFoldASCII(scheme, "https"):
		return strings.TrimSuffix(host, ":443")
	}
	return host
}
