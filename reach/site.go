package reach

import (
	"net/http"
	"strings"

	"github.com/phase-console/fleet/proxy"
)

// This file is R6b: what a browser says of the site a request comes from (Fetch Metadata).

// crossSite is R6b: a request that a browser marks as another site's — a Sec-Fetch-Site of
// cross-site, on any line, in any case — is 403 cross-origin, unless it is a top-level GET
// navigation (Sec-Fetch-Mode navigate and Sec-Fetch-Dest document, each said once), so that a
// link followed from another site still opens the door's pages. Such a refusal is never a
// failure: any page a phone visits can make its browser send one, and it guesses nothing.
//
// The door asks it in S12's place: itself for what it answers without proxy.Door (an unpaired
// caller, and the routes any caller gets), and through proxy.Door's Site for the rest of a
// paired device's requests, so that S3 and S7 come first there as S7 says.
func crossSite(r *http.Request) *proxy.Refusal {
	if !anyToken(r.Header["Sec-Fetch-Site"], "cross-site") {
		return nil
	}
	if r.Method == http.MethodGet && onlyToken(r.Header["Sec-Fetch-Mode"], "navigate") &&
		onlyToken(r.Header["Sec-Fetch-Dest"], "document") {
		return nil
	}
	return proxy.Refuse(http.StatusForbidden, "cross-origin", "the request comes from a page of another site")
}

// anyToken reports whether any comma-separated token of lines is tok, in any case.
func anyToken(lines []string, tok string) bool {
	for _, l := range lines {
		for _, v := range strings.Split(l, ",") {
			if strings.EqualFold(strings.TrimSpace(v), tok) {
				return true
			}
		}
	}
	return false
}

// onlyToken reports whether lines are one line holding tok alone, in any case.
func onlyToken(lines []string, tok string) bool {
	return len(lines) == 1 && strings.EqualFold(strings.TrimSpace(lines[0]), tok)
}
