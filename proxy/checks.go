package proxy

import (
	"net/http"
	"strings"

	"github.com/phase-console/fleet/contract"
)

// CheckUpgrade lets a request through when it asks for no protocol upgrade, or for exactly
// "websocket" (SPEC S9); h2c and every other upgrade is 400 bad-upgrade.
func CheckUpgrade(r *http.Request) *Refusal {
	ups := r.Header.Values("Upgrade")
	if len(ups) == 0 {
		return nil
	}
	if len(ups) == 1 && contract.EqualFoldASCII(strings.TrimSpace(ups[0]), "websocket") &&
		headerHasToken(r.Header, "Connection", "upgrade") {
		return nil
	}
	return Refuse(http.StatusBadRequest, "bad-upgrade", "only a WebSocket upgrade is forwarded")
}

// CheckOrigin refuses a request whose Origin header is present and is not the request's own origin
// (SPEC S12): scheme (proto, from Serve's X-Forwarded-Proto, else "http") plus the Host, compared
// as contract.SameOrigin does (RFC 6454: no path, default ports the same as none). "null" and a
// second Origin are refused too: 403 cross-origin.
func CheckOrigin(r *http.Request, proto string) *Refusal {
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		return nil
	}
	if len(origins) != 1 || !contract.SameOrigin(origins[0], proto, r.Host) {
		return Refuse(http.StatusForbidden, "cross-origin", "the request comes from a page of another origin")
	}
	return nil
}

// RequestProto is the scheme a request came in with: "https" when the door itself terminated TLS
// or when fromServe is true and Serve said so in X-Forwarded-Proto; else "http".
func RequestProto(r *http.Request, fromServe bool) string {
	if r.TLS != nil {
		return "https"
	}
	if fromServe {
		if v := r.Header.Values("X-Forwarded-Proto"); len(v) == 1 && contract.EqualFoldASCII(v[0], "https") {
			return "https"
		}
	}
	return "http"
}

// headerHasToken reports whether a comma-separated header (all its lines) lists token, folding case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if contract.EqualFoldASCII(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
