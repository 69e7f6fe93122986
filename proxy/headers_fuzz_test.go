package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/phase-console/fleet/contract"
)

// FuzzHeaderRules_S3_S4: whatever a header's name, a name that folds to an assertion header is
// refused (S3) and a name in an identity family is scrubbed (S4), and nothing else is.
func FuzzHeaderRules_S3_S4(f *testing.F) {
	for _, s := range []string{
		"X-Phase-Console-Fleet", "x_phase_console_fleet_login", "X.Phase.Console.Fleet", "X-Phase-Console-Fleet-Login2",
		"Tailscale-User-Login", "tailscale_user_login", "X-Forwarded-For", "Forwarded", "Forwarded-For",
		"X-Real-Ip", "Authorization", "Content-Type", "Cf-Access-Jwt-Assertion", "Remote-User", "Remoteuser",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		folded := contract.FoldName(name)
		if len(folded) != len(name) {
			t.Fatalf("FoldName changed the length of %q", name)
		}
		for i := 0; i < len(folded); i++ {
			c := folded[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				t.Fatalf("FoldName(%q) = %q has %q", name, folded, c)
			}
		}
		isAssertion := folded == "x-phase-console-fleet" || folded == "x-phase-console-fleet-login"
		r := &http.Request{Header: http.Header{name: {"v"}}}
		if got := CheckNoAssertion(r) != nil; got != isAssertion {
			t.Fatalf("CheckNoAssertion refuses %q: %v, want %v", name, got, isAssertion)
		}
		r = &http.Request{Header: http.Header{"Connection": {"keep-alive, " + name}}}
		// A Connection value is a list: its elements are trimmed and split on commas.
		wantConn := false
		for _, tok := range strings.Split(name, ",") {
			wantConn = wantConn || contract.IsAssertionName(textproto.TrimString(tok))
		}
		if got := CheckNoAssertion(r) != nil; got != wantConn {
			t.Fatalf("CheckNoAssertion on Connection: %q: %v, want %v", name, got, wantConn)
		}
		h := http.Header{name: {"v"}, "Content-Type": {"text/plain"}}
		ScrubIdentity(h)
		if isAssertion && len(h[name]) != 0 {
			t.Fatalf("ScrubIdentity kept assertion header %q", name)
		}
		if IsIdentityName(name) == (len(h[name]) != 0) && name != "Content-Type" {
			t.Fatalf("ScrubIdentity and IsIdentityName disagree on %q", name)
		}
		if len(h["Content-Type"]) != 1 {
			t.Fatal("ScrubIdentity removed Content-Type")
		}
	})
}

// FuzzFleetCookieDropped_R9: whatever a console's Set-Cookie line, a cookie that a browser would
// store from it (RFC 6265bis 5.6, without its newer refusal of a nameless "__Host-" value) and
// send back under a name that starts with FleetCookiePrefix, in any case, as net/http reads the
// Cookie line it sends (Request.Cookies: how the reach door finds a device's credential), is
// dropped by ScrubConsoleAnswer; and a cookie with a plain name of its own (a token) that does
// not start with the prefix is kept, whatever its value.
func FuzzFleetCookieDropped_R9(f *testing.F) {
	for _, s := range []string{
		"theme=dark", "=" + FleetCookiePrefix + "device=x; Secure", " = __host-FLEET-device=x", FleetCookiePrefix + "device",
		"theme=" + FleetCookiePrefix + "device=x", "=", ";=" + FleetCookiePrefix + "x", "\t=\t" + FleetCookiePrefix + "x=y",
		"a=b; Path=/", "__Host-fleet", "x; " + FleetCookiePrefix + "device=y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		h := http.Header{"Set-Cookie": {line}}
		ScrubConsoleAnswer(h)
		kept := len(h["Set-Cookie"]) == 1

		// The browser's reading of the line (RFC 6265bis 5.6, steps 1 to 5) ...
		pair, _, _ := strings.Cut(line, ";")
		name, value, named := strings.Cut(pair, "=")
		if !named {
			name, value = "", pair
		}
		name, value = strings.Trim(name, " \t"), strings.Trim(value, " \t")
		if name != "" || value != "" {
			// ... and the Cookie line it sends back (a nameless cookie as its value alone).
			sent := value
			if name != "" {
				sent = name + "=" + value
			}
			r := &http.Request{Header: http.Header{"Cookie": {sent}}}
			for _, c := range r.Cookies() {
				if len(c.Name) >= len(FleetCookiePrefix) && strings.EqualFold(c.Name[:len(FleetCookiePrefix)], FleetCookiePrefix) && kept {
					t.Fatalf("Set-Cookie %q kept: a browser sends it back as %q, read as cookie %q", line, sent, c.Name)
				}
			}
		}
		if raw, _, ok := strings.Cut(pair, "="); ok && isToken(raw) && !kept &&
			!(len(raw) >= len(FleetCookiePrefix) && strings.EqualFold(raw[:len(FleetCookiePrefix)], FleetCookiePrefix)) {
			t.Fatalf("Set-Cookie %q dropped: its cookie is named %q", line, raw)
		}
	})
}

// isToken reports whether s is an RFC 9110 token (a cookie name as net/http takes one).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
