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
