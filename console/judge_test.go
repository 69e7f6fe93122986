package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

type judgeRow struct {
	name   string
	host   string // default 127.0.0.1:9001
	peer   string // default 127.0.0.1:40000
	hs     []hdr
	status int    // 0: believed
	reason string // when refused
	scope  Scope  // when believed
	login  string // when believed
}

func runJudge(t *testing.T, e *env, rows []judgeRow) {
	t.Helper()
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			c, ref := e.v.Judge(newReq("GET", "/whoami", tc.host, tc.peer, tc.hs))
			if tc.status != 0 {
				if ref == nil {
					t.Fatalf("believed as %+v, want %d %s", c, tc.status, tc.reason)
				}
				if ref.Status != tc.status || ref.Reason != tc.reason {
					t.Fatalf("refused %d %s, want %d %s", ref.Status, ref.Reason, tc.status, tc.reason)
				}
				return
			}
			if ref != nil {
				t.Fatalf("refused %v, want %s %q", ref, tc.scope, tc.login)
			}
			if c.Scope != tc.scope || c.Login != tc.login {
				t.Fatalf("judged %+v, want %s %q", c, tc.scope, tc.login)
			}
		})
	}
	e.noSecretInLogs(tokA, tokB)
}

const alice = "alice@example.com"

func TestJudge_C1(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	bad := http.StatusUnauthorized
	runJudge(t, e, []judgeRow{
		{name: "C1 right bearer believed", hs: assert(tokA, alice), scope: Remote, login: alice},
		{name: "C1 bearer wrong by one byte (last)", hs: assert(flipLast(tokA), alice), status: bad, reason: ReasonBadToken},
		{name: "C1 bearer wrong by one byte (first)", hs: assert(flipFirst(tokA), alice), status: bad, reason: ReasonBadToken},
		{name: "C1 bearer one byte short", hs: assert(tokA[:len(tokA)-1], alice), status: bad, reason: ReasonBadToken},
		{name: "C1 bearer one byte too long", hs: assert(tokA+"A", alice), status: bad, reason: ReasonBadToken},
		{name: "C1 bearer with a Bearer prefix", hs: assert("Bearer "+tokA, alice), status: bad, reason: ReasonBadToken},
		{name: "C1 another valid token", hs: assert(tokB, alice), status: bad, reason: ReasonBadToken},
		{name: "C1 empty bearer", hs: assert("", alice), status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: empty login", hs: assert(tokA, ""), status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: bearer only", hs: []hdr{{"X-Phase-Console-Fleet", tokA}}, status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: login only", hs: []hdr{{"X-Phase-Console-Fleet-Login", alice}}, status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: empty login header alone", hs: []hdr{{"X-Phase-Console-Fleet-Login", ""}}, status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: two bearer values", hs: join(assert(tokA, alice), []hdr{{"X-Phase-Console-Fleet", tokA}}), status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: two login values", hs: join(assert(tokA, alice), []hdr{{"X-Phase-Console-Fleet-Login", "bob@example.com"}}), status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: two spellings of the bearer", hs: join(assert(tokA, alice), []hdr{{"X_phase_console_fleet", tokA}}), status: bad, reason: ReasonBadToken},
		{name: "C1 malformed: two spellings of the login", hs: join(assert(tokA, alice), []hdr{{"X-Phase-Console-Fleet_Login", alice}}), status: bad, reason: ReasonBadToken},
		{name: "C1 underscore spelling with a wrong bearer is an assertion", hs: []hdr{{"X_phase_console_fleet", flipLast(tokA)}, {"X-Phase-Console-Fleet-Login", alice}}, status: bad, reason: ReasonBadToken},
		{name: "C1 underscore login spelling alone is an assertion", hs: []hdr{{"X_phase_console_fleet_login", alice}}, status: bad, reason: ReasonBadToken},
		{name: "C1 dotted spelling alone is an assertion", hs: []hdr{{"X.phase.console.fleet", ""}}, status: bad, reason: ReasonBadToken},
		{name: "C1 one value under another spelling is well-formed", hs: []hdr{{"X_phase_console_fleet", tokA}, {"X-Phase-Console-Fleet-Login", alice}}, scope: Remote, login: alice},
	})

	t.Run("C1 assertion declared as a trailer", func(t *testing.T) {
		r := newReq("POST", "/whoami", "", "", assert(tokA, alice))
		r.Trailer = http.Header{"X-Phase-Console-Fleet": nil}
		if _, ref := e.v.Judge(r); ref == nil || ref.Reason != ReasonBadToken {
			t.Fatalf("got %v, want 401 %s", ref, ReasonBadToken)
		}
	})
}

// TestJudge_C1_Rotation: after a rotation the old token is believed for RotationGrace on the
// (fake) clock, never longer; the new one at once.
func TestJudge_C1_Rotation(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	believed := func(tok string) bool {
		_, ref := e.v.Judge(newReq("GET", "/", "", "", assert(tok, alice)))
		return ref == nil
	}
	if !believed(tokA) || believed(tokB) {
		t.Fatal("before rotation: want A believed, B refused")
	}
	e.writeToken(tokB)
	e.refresh()
	for _, step := range []struct {
		name      string
		advance   time.Duration
		old, new_ bool
	}{
		{"C1 token rotated: old and new believed at once", 0, true, true},
		{"C1 token rotated: old believed just within the grace", state.RotationGrace - time.Nanosecond, true, true},
		{"C1 token rotated: old refused when the grace ends", time.Nanosecond, false, true},
		{"C1 token rotated: old refused after the grace", time.Hour, false, true},
	} {
		e.clock.Advance(step.advance)
		if got := believed(tokA); got != step.old {
			t.Errorf("%s: old believed = %v", step.name, got)
		}
		if got := believed(tokB); got != step.new_ {
			t.Errorf("%s: new believed = %v", step.name, got)
		}
	}
	e.noSecretInLogs(tokA, tokB)
}

// TestJudge_C1_FailClosed: an unusable token file believes no assertion, logs why, and still
// serves local callers; a good file again is believed again.
func TestJudge_C1_FailClosed(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	check := func(name string, wantBelieved bool) {
		t.Helper()
		_, ref := e.v.Judge(newReq("GET", "/", "", "", assert(tokA, alice)))
		if wantBelieved != (ref == nil) {
			t.Errorf("%s: believed = %v, want %v (%v)", name, ref == nil, wantBelieved, ref)
		}
		if !wantBelieved && ref != nil && ref.Reason != ReasonBadToken {
			t.Errorf("%s: reason %s", name, ref.Reason)
		}
		if c, ref := e.v.Judge(newReq("GET", "/", "", "", nil)); ref != nil || c.Scope != Local {
			t.Errorf("%s: a local caller is %+v %v", name, c, ref)
		}
	}
	check("C1 good file", true)

	chmod(t, e.tokPath, 0o644)
	e.refresh()
	check("C1 token file too open", false)

	chmod(t, e.tokPath, 0o600)
	e.refresh()
	check("C1 token file fixed", true)

	if err := state.WriteFileAtomic(e.tokPath, []byte("not a token\n")); err != nil {
		t.Fatal(err)
	}
	e.refresh()
	check("C1 token file malformed", false)

	if err := os.Remove(e.tokPath); err != nil {
		t.Fatal(err)
	}
	e.refresh()
	check("C1 token file missing", false)

	e.writeToken(tokA)
	e.refresh()
	check("C1 token file back", true)

	logs := e.logs.String()
	for _, want := range []string{`"msg":"console.token"`, "group- or world-accessible", "chmod 600"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	e.noSecretInLogs(tokA)
}

func TestJudge_C1_MissingAtStart(t *testing.T) {
	e := newEnv(t, "", Config{})
	if _, ref := e.v.Judge(newReq("GET", "/", "", "", assert(tokA, alice))); ref == nil || ref.Status != 401 {
		t.Fatalf("no token file: got %v, want 401", ref)
	}
	if _, err := e.v.Bearer(); err == nil {
		t.Fatal("Bearer without a token file: want an error")
	}
	if !strings.Contains(e.logs.String(), "console.token") {
		t.Fatalf("the missing file is not logged:\n%s", e.logs.String())
	}
	e.writeToken(tokA)
	e.refresh()
	if _, ref := e.v.Judge(newReq("GET", "/", "", "", assert(tokA, alice))); ref != nil {
		t.Fatalf("after the file appears: %v", ref)
	}
	if got, err := e.v.Bearer(); err != nil || got != tokA {
		t.Fatalf("Bearer = %v", err)
	}
}

// TestJudge_C1_Watch: the Verifier picks up a rotation by itself (its 1 s poll), believing the old
// token all along. The clock is frozen, so the grace cannot run out under a slow test machine.
func TestJudge_C1_Watch(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	e.writeToken(tokB)
	for {
		_, refOld := e.v.Judge(newReq("GET", "/", "", "", assert(tokA, alice)))
		if refOld != nil {
			t.Fatalf("C1 old token refused during the rotation: %v", refOld)
		}
		if _, ref := e.v.Judge(newReq("GET", "/", "", "", assert(tokB, alice))); ref == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestJudge_C2(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var rows []judgeRow
	for _, h := range []string{"127.0.0.1", "127.0.0.1:9001", "localhost", "localhost:1", "LocalHost:65535", "[::1]", "[::1]:9001", "[0:0:0:0:0:0:0:1]:9001"} {
		rows = append(rows, judgeRow{name: "C2 Host " + h + " believed", host: h, hs: assert(tokA, alice), scope: Remote, login: alice})
	}
	for _, h := range []string{
		"127.0.0.1.evil.example", "127.0.0.1.evil.example:9001", "localhost.evil.example", "evil.example",
		"evil.example:9001", "localhost.", "127.0.0.2", "127.1", "0x7f.0.0.1", "2130706433", "[::ffff:127.0.0.1]:9001",
		"[::1%lo]:9001", "::1", "[::1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:80:80", "127.0.0.1:+80",
		"machine.tailnet.ts.net", "100.64.0.1", " ", "localhost@evil.example",
	} {
		rows = append(rows, judgeRow{name: "C2 Host " + h + " refused", host: h, hs: assert(tokA, alice), status: http.StatusMisdirectedRequest, reason: ReasonNotLoopback})
	}
	runJudge(t, e, rows)

	t.Run("C2 no Host refused", func(t *testing.T) {
		r := newReq("GET", "/", "", "", assert(tokA, alice))
		r.Host = ""
		if _, ref := e.v.Judge(r); ref == nil || ref.Reason != ReasonNotLoopback {
			t.Fatalf("got %v, want 421 %s", ref, ReasonNotLoopback)
		}
	})
}

func TestJudge_C3(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	runJudge(t, e, []judgeRow{
		{name: "C3 proxy header beside the assertion", hs: join(assert(tokA, alice), []hdr{{"Tailscale-User-Login", alice}}), status: 403, reason: ReasonAndProxy},
		{name: "C3 proxy header empty", hs: join(assert(tokA, alice), []hdr{{"Tailscale-User-Login", ""}}), status: 403, reason: ReasonAndProxy},
		{name: "C3 proxy header spelled tailscale_user_login", hs: join(assert(tokA, alice), []hdr{{"Tailscale_user_login", alice}}), status: 403, reason: ReasonAndProxy},
		{name: "C3 other Tailscale header is not the proxy header", hs: join(assert(tokA, alice), []hdr{{"Tailscale-User-Name", "Alice"}}), scope: Remote, login: alice},
	})

	e2 := newEnv(t, tokA, Config{ProxyHeader: "X-Remote-User"})
	runJudge(t, e2, []judgeRow{
		{name: "C3 configured proxy header", hs: join(assert(tokA, alice), []hdr{{"X-Remote-User", alice}}), status: 403, reason: ReasonAndProxy},
		{name: "C3 configured proxy header spelled x_remote_user", hs: join(assert(tokA, alice), []hdr{{"X_remote_user", alice}}), status: 403, reason: ReasonAndProxy},
	})
}

func TestJudge_Order(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	proxyHdr := []hdr{{"Tailscale-User-Login", alice}}
	runJudge(t, e, []judgeRow{
		{name: "order C3 before C2: proxy header + foreign Host + right bearer", host: "evil.example", hs: join(assert(tokA, alice), proxyHdr), status: 403, reason: ReasonAndProxy},
		{name: "order C3 before C2 before C1: proxy header + foreign Host + bad bearer", host: "evil.example", hs: join(assert(flipLast(tokA), alice), proxyHdr), status: 403, reason: ReasonAndProxy},
		{name: "order C3 before C1: proxy header + bad bearer", hs: join(assert(flipLast(tokA), alice), proxyHdr), status: 403, reason: ReasonAndProxy},
		{name: "order C3 before C1: proxy header + malformed assertion", hs: join([]hdr{{"X-Phase-Console-Fleet-Login", ""}}, proxyHdr), status: 403, reason: ReasonAndProxy},
		{name: "order C2 before C1: foreign Host + bad bearer", host: "evil.example", hs: assert(flipLast(tokA), alice), status: 421, reason: ReasonNotLoopback},
		{name: "order C2 before C1: foreign Host + malformed assertion", host: "evil.example", hs: join(assert(tokA, alice), assert(tokA, alice)), status: 421, reason: ReasonNotLoopback},
	})
}

func TestJudge_C4(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	runJudge(t, e, []judgeRow{
		{name: "C4 asserted from a loopback peer is remote", peer: "127.0.0.1:5555", hs: assert(tokA, alice), scope: Remote, login: alice},
		{name: "C4 asserted from [::1] is remote", peer: "[::1]:5555", hs: assert(tokA, alice), scope: Remote, login: alice},
		{name: "C4 asserted from another peer is remote", peer: "192.0.2.7:5555", hs: assert(tokA, alice), scope: Remote, login: alice},
		{name: "C4 login root is remote", hs: assert(tokA, "root"), scope: Remote, login: "root"},
		{name: "C4 login local is remote", hs: assert(tokA, "local"), scope: Remote, login: "local"},
		{name: "C4 X-Forwarded-For 127.0.0.1 is remote", hs: join(assert(tokA, alice), []hdr{{"X-Forwarded-For", "127.0.0.1"}}), scope: Remote, login: alice},
		{name: "C4 device login is remote", hs: assert(tokA, "device:phone#abc234"), scope: Remote, login: "device:phone#abc234"},
	})
}

// TestJudge_NoAssertion: what a request without an assertion is.
// TestJudge_LocalNeedsSameUser: a local caller's socket must be this console's own user's.
func TestJudge_LocalNeedsSameUser(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	r := newReq("GET", "/whoami", "", "", nil)
	r = r.WithContext(context.WithValue(r.Context(), peerKey, &peerVerdict{err: errors.New("uid 4242")}))
	if _, ref := e.v.Judge(r); ref == nil || ref.Status != 403 || ref.Reason != ReasonNoAssertion {
		t.Fatalf("another user's request: %v, want 403 no-assertion", ref)
	}
	// Without any connection facts at all, nobody is local (fail closed).
	r = httptest.NewRequest("GET", "/whoami", nil)
	r.Host, r.RemoteAddr = "127.0.0.1:9001", "127.0.0.1:40000"
	if _, ref := e.v.Judge(r); ref == nil || ref.Reason != ReasonNoAssertion {
		t.Fatalf("a request with no connection: %v, want 403 no-assertion", ref)
	}
}

func TestJudge_NoAssertion(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	runJudge(t, e, []judgeRow{
		{name: "plain loopback request is local", scope: Local},
		{name: "Host localhost is local", host: "localhost:9001", scope: Local},
		{name: "foreign Host is 421 host", host: "evil.example", status: 421, reason: ReasonHost},
		{name: "Host 127.0.0.1.evil.example is 421 host", host: "127.0.0.1.evil.example:9001", status: 421, reason: ReasonHost},
		// Only the supervisor's assertion makes a caller remote: through a proxy, or from
		// another machine, without one, the caller is nobody (403 no-assertion).
		{name: "X-Forwarded-For without assertion is 403", hs: []hdr{{"X-Forwarded-For", "127.0.0.1"}}, status: 403, reason: ReasonNoAssertion},
		{name: "X_Forwarded_For without assertion is 403", hs: []hdr{{"X_forwarded_for", "127.0.0.1"}}, status: 403, reason: ReasonNoAssertion},
		{name: "Forwarded without assertion is 403", hs: []hdr{{"Forwarded", "for=127.0.0.1"}}, status: 403, reason: ReasonNoAssertion},
		{name: "X-Real-Ip without assertion is 403", hs: []hdr{{"X-Real-Ip", "127.0.0.1"}}, status: 403, reason: ReasonNoAssertion},
		{name: "a forged proxy header is believed as nobody", hs: []hdr{{"Tailscale-User-Login", alice}}, status: 403, reason: ReasonNoAssertion},
		{name: "proxy header RFC 2047 believed as nobody", hs: []hdr{{"Tailscale-User-Login", "=?utf-8?q?j=C3=B6rg@example.com?="}}, status: 403, reason: ReasonNoAssertion},
		{name: "peer not loopback is 403", peer: "192.0.2.7:5555", status: 403, reason: ReasonNoAssertion},
		{name: "same Origin is local", hs: []hdr{{"Origin", "http://127.0.0.1:9001"}}, scope: Local},
		{name: "foreign Origin is 403 cross-origin", hs: []hdr{{"Origin", "http://evil.example"}}, status: 403, reason: ReasonCrossOrigin},
		{name: "Origin null is 403 cross-origin", hs: []hdr{{"Origin", "null"}}, status: 403, reason: ReasonCrossOrigin},
		{name: "Origin of another port is 403 cross-origin", hs: []hdr{{"Origin", "http://127.0.0.1:9002"}}, status: 403, reason: ReasonCrossOrigin},
		{name: "Origin https is 403 cross-origin", hs: []hdr{{"Origin", "https://127.0.0.1:9001"}}, status: 403, reason: ReasonCrossOrigin},
	})

	e2 := newEnv(t, tokA, Config{AllowHost: func(h string) bool { return h == "machine.tailnet.ts.net" }})
	runJudge(t, e2, []judgeRow{
		{name: "AllowHost admits a Host for this user's own requests", host: "machine.tailnet.ts.net", scope: Local},
		{name: "AllowHost never makes a proxied request remote", host: "machine.tailnet.ts.net", hs: []hdr{{"Tailscale-User-Login", alice}}, status: 403, reason: ReasonNoAssertion},
		{name: "C2 AllowHost never admits an assertion", host: "machine.tailnet.ts.net", hs: assert(tokA, alice), status: 421, reason: ReasonNotLoopback},
	})
}
