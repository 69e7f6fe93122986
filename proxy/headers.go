package proxy

import (
	"net/http"
	"net/textproto"
	"strings"

	"github.com/phase-console/fleet/contract"
)

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
		'x': {"x-real-ip", contract.FoldedFleet, contract.FoldedFleetLogin},
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
	first := contract.FoldByte(name[0])
	for _, n := range identityNames[first] {
		if contract.FoldedEqual(name, n) {
			return true
		}
	}
	for _, p := range identityPrefixes[first] {
		if contract.FoldedHasPrefix(name, p) {
			return true
		}
	}
	return false
}

// CheckNoAssertion refuses (400 assertion-sent, SPEC S3) a request that carries an assertion header
// under any spelling, with any value (empty too), names one in Connection, or declares one as a
// trailer.
func CheckNoAssertion(r *http.Request) *Refusal {
	_, named := scanHeader(r.Header)
	return checkNoAssertion(r, named)
}

// checkNoAssertion is CheckNoAssertion, told whether a name of r.Header is an assertion header's
// (scanHeader).
func checkNoAssertion(r *http.Request, named bool) *Refusal {
	if named {
		return Refuse(http.StatusBadRequest, "assertion-sent", "the request carries an assertion header; only the supervisor writes it")
	}
	if listsAssertionName(r.Header.Values("Connection")) {
		return Refuse(http.StatusBadRequest, "assertion-sent", "the request names an assertion header in Connection")
	}
	// net/http moves the names declared in "Trailer:" into r.Trailer; look at both.
	for name := range r.Trailer { // nil but for a request with a body that declares trailers
		if contract.IsAssertionName(name) {
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
			if contract.IsAssertionName(textproto.TrimString(tok)) {
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

// FleetCookiePrefix starts the name of every cookie that fleet itself sets (the direct-reach
// door's device credential, SPEC R9). The browser keeps one cookie jar per host for the door and
// every console behind it, so a console's Set-Cookie of such a name would overwrite fleet's
// (an HTTP answer may replace an HttpOnly cookie): log a phone out, or fixate it on a device of
// the console's choosing. DropFleetCookies keeps consoles from it.
const FleetCookiePrefix = "__Host-fleet-"

// DropFleetCookies removes from a console's answer h every Set-Cookie that sets a cookie a
// browser may send back under a name that starts with FleetCookiePrefix (isFleetCookie), in any
// case (browsers match the __Host- prefix without case), and keeps the console's other cookies as
// they were.
func DropFleetCookies(h http.Header) {
	lines, ok := h["Set-Cookie"]
	if !ok {
		return
	}
	kept := lines[:0:0]
	for _, l := range lines {
		if !isFleetCookie(l) {
			kept = append(kept, l)
		}
	}
	if len(kept) == 0 {
		delete(h, "Set-Cookie")
		return
	}
	h["Set-Cookie"] = kept
}

// isFleetCookie reports whether a Set-Cookie value sets a cookie whose name starts with
// FleetCookiePrefix, in any case — or a nameless one whose value does. A cookie without a name
// ("=v", RFC 6265bis 5.6; or "v" without any "=", which the name's check below already sees
// whole) is sent back by a browser as its value alone, so "=__Host-fleet-device=x" comes back
// as the line "__Host-fleet-device=x": fleet's cookie, wherever 6265bis's refusal of a nameless
// cookie whose value starts with "__Host-" is not yet kept. Spaces around the name and the value
// are trimmed, as a browser trims them (strings.TrimSpace trims more: it only drops more).
func isFleetCookie(setCookie string) bool {
	name, value, _ := strings.Cut(setCookie, "=")
	name = strings.TrimSpace(name)
	if name == "" {
		name = strings.TrimSpace(value)
	}
	return len(name) >= len(FleetCookiePrefix) && strings.EqualFold(name[:len(FleetCookiePrefix)], FleetCookiePrefix)
}

// originWide are the answer headers by which one console would act on the whole origin it shares
// with the door's own pages and every other console: Service-Worker-Allowed lets its script
// register a service worker for "/" (one that outlives the console and serves its own /pair),
// Clear-Site-Data wipes every cookie of the origin (fleet's device credential too).
var originWide = []string{"Service-Worker-Allowed", "Clear-Site-Data"}

// isOriginWide reports whether name is one of originWide, in any case.
func isOriginWide(name string) bool {
	for _, o := range originWide {
		if contract.EqualFoldASCII(name, o) {
			return true
		}
	}
	return false
}

// ScrubbedFromAnswer reports whether ScrubConsoleAnswer removes the header line "name: value"
// (name in any case) from a console's answer (R9): one of the originWide headers, or a Set-Cookie
// of one of fleet's own cookies. It is for a writer that passes an answer on from its lines, not
// from a header map.
func ScrubbedFromAnswer(name, value string) bool {
	if contract.EqualFoldASCII(name, "Set-Cookie") {
		return isFleetCookie(value)
	}
	return isOriginWide(name)
}

// ScrubConsoleAnswer removes from a console's answer h what no console may say for the whole
// origin: fleet's own cookies (DropFleetCookies) and the originWide headers. A console's service
// worker stays confined to its own /c/<id>/, the browser's default scope.
func ScrubConsoleAnswer(h http.Header) {
	DropFleetCookies(h)
	for _, name := range originWide {
		delete(h, name)
	}
}
