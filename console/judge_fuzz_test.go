package console

import (
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/contract"
)

// FuzzJudge checks the guarantees of Judge on arbitrary Host, peer and three arbitrary header
// lines (name as spelled, value), against a token file holding tokA:
//
//   - scope local only without any assertion spelling, without proxy marks, from a loopback peer,
//     on a loopback Host, with login "";
//   - an assertion believed only when it is exactly one bearer value equal to tokA and exactly one
//     non-empty login value, on a loopback Host, without the proxy header — and then the caller
//     is remote with that login (C4);
//   - a refusal is 401, 403 or 421 with a known reason word, and never holds a header value.
func FuzzJudge(f *testing.F) {
	f.Add("127.0.0.1:9001", "127.0.0.1:40000", "X-Phase-Console-Fleet", tokA, "X-Phase-Console-Fleet-Login", "alice", "", "")
	f.Add("127.0.0.1:9001", "127.0.0.1:40000", "X_Phase_Console_Fleet", tokA, "X-Phase-Console-Fleet-Login", "alice", "Tailscale-User-Login", "alice")
	f.Add("evil.example", "127.0.0.1:40000", "X-Phase-Console-Fleet", tokA+"A", "X-Phase-Console-Fleet-Login", "alice", "", "")
	f.Add("localhost", "[::1]:1", "x-phase-console-fleet-login", "", "", "", "Origin", "null")
	f.Add("[::1]:80", "192.0.2.1:1", "X-Forwarded-For", "127.0.0.1", "Forwarded", "for=x", "X_Real_Ip", "1")
	e := newEnv(f, tokA, Config{})
	reasons := map[string]int{
		ReasonBadToken: 401, ReasonNotLoopback: 421, ReasonAndProxy: 403, ReasonHost: 421, ReasonCrossOrigin: 403, ReasonNoAssertion: 403,
	}
	f.Fuzz(func(t *testing.T, host, peer, n1, v1, n2, v2, n3, v3 string) {
		r, _ := http.NewRequest("GET", "http://127.0.0.1/", nil)
		r.Host, r.RemoteAddr = host, peer
		var bearers, logins []string
		proxyHdr, marks, assertion := false, false, false
		for _, h := range [][2]string{{n1, v1}, {n2, v2}, {n3, v3}} {
			if h[0] == "" {
				continue
			}
			r.Header[h[0]] = append(r.Header[h[0]], h[1])
			switch f := contract.FoldName(h[0]); {
			case f == "x-phase-console-fleet":
				assertion, bearers = true, append(bearers, h[1])
			case f == "x-phase-console-fleet-login":
				assertion, logins = true, append(logins, h[1])
			case f == "tailscale-user-login":
				proxyHdr, marks = true, true
			case f == "forwarded", f == "x-real-ip", strings.HasPrefix(f, "x-forwarded-"), strings.HasPrefix(f, "tailscale-"):
				marks = true
			}
		}
		c, ref := e.v.Judge(r)
		if ref != nil {
			if want, ok := reasons[ref.Reason]; !ok || want != ref.Status {
				t.Fatalf("refusal %d %q is not one of the known ones", ref.Status, ref.Reason)
			}
			for _, v := range []string{v1, v2, v3} {
				if len(v) >= 8 && (strings.Contains(ref.Detail, v) || strings.Contains(ref.Reason, v)) {
					t.Fatalf("refusal %v holds a header value", ref)
				}
			}
			return
		}
		switch c.Scope {
		case Local:
			if assertion || marks || !loopbackPeer(peer) || !contract.IsLoopbackHost(host) || c.Login != "" {
				t.Fatalf("local for assertion=%v marks=%v peer=%q host=%q login=%q", assertion, marks, peer, host, c.Login)
			}
		case Remote:
			if !assertion {
				return
			}
			if len(bearers) != 1 || bearers[0] != tokA || len(logins) != 1 || logins[0] == "" ||
				c.Login != logins[0] || proxyHdr || !contract.IsLoopbackHost(host) {
				t.Fatalf("believed bearers=%d logins=%q host=%q proxy=%v as %+v", len(bearers), logins, host, proxyHdr, c)
			}
		default:
			t.Fatalf("scope %q", c.Scope)
		}
	})
}
