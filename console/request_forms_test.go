package console

// Hostile requests against the console side (C1–C7): each test guards a trick that is handled.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/state"
)

// TestOtherUserIsLocal_C4: "local" is never decided by the peer's IP address alone. Were it, any
// process on the machine that can reach the console's 127.0.0.1 port — another user's, or
// tailscaled itself forwarding a tailnet peer straight to 127.0.0.1:<port> under userspace
// networking (the very case S5b guards the supervisor against) — would be scope local: it would
// pass LocalOnly (presence, starting runs) and the permission hook's C6 transport checks, and with
// a run token it got from a local-only endpoint it would answer permission requests. This test
// runs the client as another uid.
func TestOtherUserIsLocal_C4(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	e := newEnv(t, tokA, Config{})
	var runs Runs
	mux := http.NewServeMux()
	mux.Handle("POST /runs", e.v.LocalOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, tok, _ := runs.Start()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"token": tok})
	})))
	mux.Handle("POST /hooks/permission-request", e.v.PermissionHook(&runs, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"decision":"allow"}`)
	})))
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.v.Middleware(mux)}
	go srv.Serve(ln)
	defer srv.Close()

	out := otheruser.Run(t, "^TestConsoleHostileHelperProcess$", "FLEET_RT_CONSOLE_HELPER", "http://"+ln.Addr().String(), "")
	if !strings.Contains(out, "RUNS 403") {
		t.Errorf("another uid started a run: %q", out)
	}
	if strings.Contains(out, "HOOK 200") {
		t.Errorf("another uid answered the permission hook: %q", out)
	}
}

// TestProxiedCrossOriginBelieved_C4: proxied requests without an assertion are refused. S12's
// reasoning ("a tailnet identity is ambient, like a cookie") holds for a console published by its
// own proxy too: were Origin checked only for scope local, a proxied request (the console's own
// Tailscale Serve, Host admitted by AllowHost) from a foreign page would be believed as the user,
// and any web page the user visits could drive such a console as them.
func TestProxiedCrossOriginBelieved_C4(t *testing.T) {
	e := newEnv(t, tokA, Config{AllowHost: func(h string) bool { return h == "con.tail1234.ts.net" }})
	for _, o := range []string{"https://evil.example", "null"} {
		r := newReq("POST", "/runs", "con.tail1234.ts.net", "127.0.0.1:40000", []hdr{
			{"Tailscale-User-Login", alice}, {"X-Forwarded-For", "100.101.102.103"},
			{"X-Forwarded-Proto", "https"}, {"Origin", o},
		})
		if c, ref := e.v.Judge(r); ref == nil {
			t.Errorf("Origin %s: believed as %+v, want 403 cross-origin", o, c)
		}
	}
	// Even from its own origin, a proxy's word is not an assertion: only the supervisor's is.
	r := newReq("POST", "/runs", "con.tail1234.ts.net", "127.0.0.1:40000", []hdr{
		{"Tailscale-User-Login", alice}, {"X-Forwarded-For", "100.101.102.103"},
		{"X-Forwarded-Proto", "https"}, {"Origin", "https://con.tail1234.ts.net"},
	})
	if c, ref := e.v.Judge(r); ref == nil || ref.Reason != ReasonNoAssertion {
		t.Errorf("own origin: %+v %v, want 403 no-assertion", c, ref)
	}
}

// TestSupervisorSeesRotationFirst_C1: C1 wants "no request fails" across a rotation. The
// supervisor and each console poll the token file independently (1 s each); when the supervisor
// sees the new token first, it sends it to a console that does not know it yet, which re-reads the
// file (Token.MatchFresh) rather than answer 401 fleet-bad-token.
func TestSupervisorSeesRotationFirst_C1(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	e.writeToken(tokB) // fleet token rotate
	sup := state.NewTokenFollower(e.tokPath, nil)
	sent, err := sup.Current()
	if err != nil || sent != tokB {
		t.Fatalf("supervisor follower: %q %v", sent, err)
	}
	if c, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(sent, alice))); ref != nil {
		t.Errorf("the token the supervisor sends right after a rotation is refused: %v", ref)
	} else if c.Login != alice {
		t.Errorf("judged %+v", c)
	}
}

// TestGraceCountsFromRotation_C1: the previous token's 10 s grace counts from the file's mtime, the
// rotation, not from when the follower notices the change: else the old token would be believed up
// to 10 s + the poll interval after it was replaced ("at most 10 s ... never longer").
func TestGraceCountsFromRotation_C1(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	rotatedAt := e.clock.Now()
	e.writeToken(tokB)
	if err := os.Chtimes(e.tokPath, rotatedAt, rotatedAt); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(1500 * time.Millisecond) // the poll comes (C1 allows up to 2 s)
	e.refresh()
	e.clock.Advance(RotationGraceForTest() - 1500*time.Millisecond + 100*time.Millisecond) // 10.1 s after the rotation
	if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokA, alice))); ref == nil {
		t.Error("the previous token is still believed 10.1 s after the rotation")
	}
}

// TestGraceNeverSpansTwoRotations_C1: the previous token's grace also ends RotationGrace after the
// follower last confirmed the old token in the file. Taken from the file's mtime alone, it would
// count from the LAST rotation: when two rotations land between two looks at the file (both within
// one 1 s poll, or while the console was stopped — SIGTSTP, a debugger, a frozen cgroup), the
// follower never sees the middle token and keeps the first one as "previous", believed for 10 s
// after the second rotation: a token that stopped being current an hour ago would be believed
// again. C1: "after a rotation the previous token is still believed for at
// most 10 s ... never longer"; tokA is not even the previous token.
func TestGraceNeverSpansTwoRotations_C1(t *testing.T) {
	t.Run("C1 an hour between the rotations", func(t *testing.T) {
		e := newEnv(t, tokA, Config{})
		e.v.Close() // no background poll: the test says when the console looks (e.refresh)
		t0 := e.clock.Now()

		// fleet token rotate (tokA → tokB), then the console does not look at the file for an hour.
		e.writeToken(tokB)
		if err := os.Chtimes(e.tokPath, t0, t0); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour)
		// fleet token rotate again (tokB → tokC).
		e.writeToken(tokC)
		if err := os.Chtimes(e.tokPath, e.clock.Now(), e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(500 * time.Millisecond)
		e.refresh() // the console's next poll

		if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokC, alice))); ref != nil {
			t.Fatalf("current token refused: %v", ref)
		}
		if c, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokA, alice))); ref == nil {
			t.Errorf("tokA, replaced %v ago and never the previous token of the last rotation, is believed as %+v", time.Hour, c)
		}
	})
	t.Run("C1 two rotations within one poll", func(t *testing.T) {
		// Rotations 0.9 s apart, seen at the next poll: the first token is not believed 10.8 s
		// after it was replaced (the mtime alone would keep it until 10.9 s).
		e := newEnv(t, tokA, Config{})
		e.v.Close()
		r1 := e.clock.Now()
		e.writeToken(tokB)
		os.Chtimes(e.tokPath, r1, r1)
		e.clock.Advance(900 * time.Millisecond)
		e.writeToken(tokC)
		os.Chtimes(e.tokPath, e.clock.Now(), e.clock.Now())
		e.clock.Advance(100 * time.Millisecond)
		e.refresh()
		if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokA, alice))); ref != nil {
			t.Errorf("tokA refused 1 s after it was replaced: %v", ref)
		}
		e.clock.Advance(RotationGraceForTest() - time.Second + 800*time.Millisecond) // r1 + 10.8 s
		if c, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokA, alice))); ref == nil {
			t.Errorf("tokA believed 10.8 s after it was replaced: %+v", c)
		}
		if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokC, alice))); ref != nil {
			t.Errorf("current token refused: %v", ref)
		}
	})
}

// RotationGraceForTest is the spec's grace (C1).
func RotationGraceForTest() time.Duration { return state.RotationGrace }

// ---- Guards: C1 --------------------------------------------------------------------------------

func TestSpellingsAndDuplicates_C1(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	bad := http.StatusUnauthorized
	runJudge(t, e, []judgeRow{
		{name: "one of each, odd spellings", hs: []hdr{{"x_phase_console_fleet", tokA}, {"X.PHASE.CONSOLE.FLEET.LOGIN", alice}}, scope: Remote, login: alice},
		{name: "bearer twice across spellings, same value", hs: join(assert(tokA, alice), []hdr{{"X_Phase_Console_Fleet", tokA}}), status: bad, reason: ReasonBadToken},
		{name: "login twice across spellings", hs: join(assert(tokA, alice), []hdr{{"x-phase-console-fleet_login", "mallory"}}), status: bad, reason: ReasonBadToken},
		{name: "login twice, same spelling", hs: join(assert(tokA, alice), []hdr{{"X-Phase-Console-Fleet-Login", alice}}), status: bad, reason: ReasonBadToken},
		{name: "empty second bearer", hs: join(assert(tokA, alice), []hdr{{"X~Phase~Console~Fleet", ""}}), status: bad, reason: ReasonBadToken},
		{name: "bearer alone", hs: []hdr{{"X-Phase-Console-Fleet", tokA}}, status: bad, reason: ReasonBadToken},
		{name: "login alone", hs: []hdr{{"X-Phase-Console-Fleet-Login", alice}}, status: bad, reason: ReasonBadToken},
		{name: "bearer with padding", hs: assert(tokA+"=", alice), status: bad, reason: ReasonBadToken},
		{name: "bearer with trailing space kept", hs: assert(tokA+" ", alice), status: bad, reason: ReasonBadToken},
		{name: "bearer comma-joined twice", hs: assert(tokA+","+tokA, alice), status: bad, reason: ReasonBadToken},
		{name: "bearer of whitespace", hs: assert(" ", alice), status: bad, reason: ReasonBadToken},
		{name: "a name that only starts like the header", hs: join([]hdr{{"X-Phase-Console-Fleet-Login2", alice}}), scope: Local},
	})
}

// An assertion header declared as a trailer (net/http puts the name in r.Trailer) makes the
// assertion malformed, even beside a good pair.
func TestTrailerDeclared_C1(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	for _, name := range []string{"X-Phase-Console-Fleet", "X_Phase_Console_Fleet_Login"} {
		r := newReq("POST", "/whoami", "", "", assert(tokA, alice))
		r.Trailer = http.Header{name: nil}
		if c, ref := e.v.Judge(r); ref == nil || ref.Reason != ReasonBadToken {
			t.Errorf("%s declared as a trailer: %+v %v", name, c, ref)
		}
		// Without anything else: still an assertion (never local).
		r = newReq("POST", "/whoami", "", "", nil)
		r.Trailer = http.Header{name: nil}
		if c, ref := e.v.Judge(r); ref == nil {
			t.Errorf("%s declared as a trailer alone: believed as %+v", name, c)
		}
	}
}

// Rotation under load: while the file changes and is re-read, a token that is neither the current
// one nor the previous one within its grace is never believed (run with -race).
func TestRotationRace_C1(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	stranger := flipFirst(tokB)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad sync.Once
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(stranger, alice))); ref == nil {
					bad.Do(func() { t.Error("a stranger's token was believed during a rotation") })
				}
				e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokA, alice)))
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if i%2 == 0 {
			e.writeToken(tokB)
		} else {
			e.writeToken(tokA)
		}
		e.refresh()
	}
	close(stop)
	wg.Wait()
	// After the grace, only the current token is believed.
	e.writeToken(tokB)
	e.refresh()
	e.clock.Advance(state.RotationGrace + time.Millisecond)
	if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokA, alice))); ref == nil {
		t.Error("the previous token is believed after its grace")
	}
	if _, ref := e.v.Judge(newReq("GET", "/whoami", "", "", assert(tokB, alice))); ref != nil {
		t.Errorf("the current token is refused: %v", ref)
	}
}

// ---- Guards: C2 / C3 ---------------------------------------------------------------------------

func TestHostForms_C2(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var rows []judgeRow
	for _, h := range []string{
		"localhost.", "localhost.:9001", "127.0.0.1.", "127.0.0.1.:9001", "[::ffff:127.0.0.1]:9001",
		"[::ffff:7f00:1]", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:+80", "127.0.0.1:0x50",
		"127.0.0.1:99999999999999999999", "[::1]:", "[::1", "::1", "0:0:0:0:0:0:0:1", "[::1%25lo]:9001",
		"127.0.0.01", "127.000.000.001", "127.1", "2130706433", "localhost:9001:9001", "[localhost]:9001",
		"localhost\t", "xn--localhost", "loca%6Chost", "[127.0.0.1]:9001", "127.0.0.1:9001,evil.example",
		" ",
	} {
		rows = append(rows, judgeRow{name: "Host " + h, host: h, hs: assert(tokA, alice), status: http.StatusMisdirectedRequest, reason: ReasonNotLoopback})
	}
	for _, h := range []string{"LOCALHOST:9001", "LocalHost", "[0:0:0:0:0:0:0:1]:9001", "[::1]", "127.0.0.1:09001"} {
		rows = append(rows, judgeRow{name: "Host " + h, host: h, hs: assert(tokA, alice), scope: Remote, login: alice})
	}
	runJudge(t, e, rows)
	// newReq treats "" as the default Host; an empty Host must be refused too.
	r := newReq("GET", "/whoami", "", "", assert(tokA, alice))
	r.Host = ""
	if _, ref := e.v.Judge(r); ref == nil || ref.Reason != ReasonNotLoopback {
		t.Errorf("empty Host: %v", ref)
	}
}

func TestProxyHeaderSpellings_C3(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var rows []judgeRow
	for _, n := range []string{"TAILSCALE.USER.LOGIN", "tailscale_user_login", "Tailscale~User~Login"} {
		rows = append(rows, judgeRow{name: n, hs: join(assert(tokA, alice), []hdr{{n, ""}}), status: http.StatusForbidden, reason: ReasonAndProxy})
	}
	// C3 comes before C2 and C1: a foreign Host and a bad bearer still answer fleet-and-proxy.
	rows = append(rows, judgeRow{name: "order", host: "evil.example", hs: join(assert("x", ""), []hdr{{"Tailscale-User-Login", alice}}), status: http.StatusForbidden, reason: ReasonAndProxy})
	runJudge(t, e, rows)

	custom := newEnv(t, tokA, Config{ProxyHeader: "X-Auth-User"})
	runJudge(t, custom, []judgeRow{
		{name: "custom x_auth_user", hs: join(assert(tokA, alice), []hdr{{"x_auth_user", "bob"}}), status: http.StatusForbidden, reason: ReasonAndProxy},
		{name: "custom, default one is not C3", hs: join(assert(tokA, alice), []hdr{{"Tailscale-User-Login", "bob"}}), scope: Remote, login: alice},
	})
}

// ---- Guards: local callers ---------------------------------------------------------------------

// A local request whose Origin is not exactly this console's own origin is refused.
func TestLocalOriginForms_C(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	for _, o := range []string{
		"null", "http://localhost:9001", "http://127.0.0.1", "http://127.0.0.1:9002", "https://127.0.0.1:9001",
		"http://127.0.0.1:9001.", "http://127.0.0.1.:9001", "http://user@127.0.0.1:9001", "http://evil.example",
		"http://127.0.0.1:9001/x", "http://127.0.0.1:9001/", "http://127.0.0.1:9001?x", "http://[::ffff:127.0.0.1]:9001", "127.0.0.1:9001",
		"http:127.0.0.1:9001", "http://127.0.0.1:9001#x",
	} {
		r := newReq("POST", "/presence", "", "", []hdr{{"Origin", o}})
		if c, ref := e.v.Judge(r); ref == nil {
			t.Errorf("Origin %q: judged %+v, want cross-origin", o, c)
		}
	}
	r := newReq("POST", "/presence", "", "", []hdr{{"Origin", "http://127.0.0.1:9001"}, {"Origin", "http://evil.example"}})
	if _, ref := e.v.Judge(r); ref == nil {
		t.Error("two Origin headers: believed")
	}
	r = newReq("POST", "/presence", "", "", []hdr{{"Origin", "http://127.0.0.1:9001"}})
	if c, ref := e.v.Judge(r); ref != nil || c.Scope != Local {
		t.Errorf("own origin: %+v %v", c, ref)
	}
}

// Peers: only a loopback peer can be local; an IPv4-mapped loopback is loopback.
func TestPeerForms_C(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	for _, p := range []string{"100.101.102.103:1", "[fd7a:115c:a1e0::1]:1", "[::ffff:100.101.102.103]:1", "192.168.1.2:1", "", "garbage", "127.0.0.1"} {
		c, ref := e.v.Judge(newReq("GET", "/whoami", "", p, nil))
		if p == "" { // newReq's default peer
			continue
		}
		if ref == nil || ref.Reason != ReasonNoAssertion {
			t.Errorf("peer %q: %+v %v, want 403 no-assertion", p, c, ref)
		}
	}
	if c, _ := e.v.Judge(newReq("GET", "/whoami", "", "[::ffff:127.0.0.1]:1", nil)); c.Scope != Local {
		t.Errorf("IPv4-mapped loopback peer: %+v", c)
	}
}

// ---- Guards: C6 / C7 ---------------------------------------------------------------------------

// C6 comes first: any mark of a proxy — under any spelling, with any value — and a non-loopback
// peer are refused before the run token or C1–C3 are looked at, on every spelling of the hook path.
func TestTransportFirst_C6(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var runs Runs
	_, runTok, err := runs.Start()
	if err != nil {
		t.Fatal(err)
	}
	s := &seen{}
	h := e.v.Middleware(guarded(e.v, &runs, s))
	good := hdr{"Authorization", "Bearer " + runTok}
	marks := [][]hdr{
		assert(tokA, alice),
		{{"X_Phase_Console_Fleet_Login", ""}},
		{{"tailscale_user_login", alice}},
		{{"Tailscale-Funnel-Request", "?1"}},
		{{"X-Forwarded-For", "127.0.0.1"}},
		{{"x.forwarded.host", "127.0.0.1"}},
		{{"Forwarded", "for=127.0.0.1"}},
		{{"X_REAL_IP", "127.0.0.1"}},
	}
	for _, p := range []string{"/hooks/permission-request", "/HOOKS/permission-request", "//hooks/permission-request", "/x/../hooks/permission-request", "/%68ooks/permission-request"} {
		for _, m := range marks {
			*s = seen{}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newReq("POST", p, "", "", append([]hdr{good}, m...)))
			if w.Code != http.StatusForbidden || w.Header().Get("X-Fleet-Reason") != ReasonHookProxied || s.called {
				t.Errorf("%s with %v: %d %q", p, m[0].name, w.Code, w.Header().Get("X-Fleet-Reason"))
			}
		}
		for _, peer := range []string{"100.101.102.103:5", "[fd7a:115c:a1e0::1]:5", "10.0.0.1:5"} {
			*s = seen{}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newReq("POST", p, "", peer, []hdr{good}))
			if w.Code != http.StatusForbidden || w.Header().Get("X-Fleet-Reason") != ReasonHookPeer || s.called {
				t.Errorf("%s from %s: %d %q", p, peer, w.Code, w.Header().Get("X-Fleet-Reason"))
			}
		}
	}
	if !strings.Contains(e.logs.String(), EventHookRejected) {
		t.Error("no hook.rejected line")
	}
	e.noSecretInLogs(tokA, runTok)
}

// A run's token is dead the moment End returns, however it is written; and it never unlocks
// anything but the hook.
func TestRunTokens_C6(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var runs Runs
	id, runTok, err := runs.Start()
	if err != nil {
		t.Fatal(err)
	}
	s := &seen{}
	h := e.v.Middleware(guarded(e.v, &runs, s))
	call := func(hs ...hdr) int {
		*s = seen{}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, newReq("POST", "/hooks/permission-request", "", "", hs))
		return w.Code
	}
	for _, a := range []string{"Bearer " + runTok + " ", "bearer " + runTok, "BEARER  " + runTok} {
		if c := call(hdr{"Authorization", a}); c != 200 {
			t.Errorf("%q: %d", a, c)
		}
	}
	for _, hs := range [][]hdr{
		{{"Authorization", "Bearer " + runTok + "x"}},
		{{"Authorization", "Bearer " + runTok[1:]}},
		{{"Authorization", "Basic " + runTok}},
		{{"Authorization", runTok}},
		{{"Authorization", "Bearer"}},
		{{"Authorization", "Bearer  "}},
		{{"Authorization", "Bearer " + runTok}, {"Authorization", "Bearer " + runTok}},
		{{"authorization_", "Bearer " + runTok}},
		{{"Authorization", "Bearer " + tokA}}, // the fleet token is not a run token
	} {
		if c := call(hs...); c != http.StatusUnauthorized {
			t.Errorf("%v: %d, want 401", hs, c)
		}
	}
	// Concurrent End and Match: once End has returned, nothing matches.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); runs.Match(runTok) }()
	}
	runs.End(id)
	wg.Wait()
	if c := call(hdr{"Authorization", "Bearer " + runTok}); c != http.StatusUnauthorized {
		t.Errorf("after End: %d", c)
	}
	if _, ok := runs.Match(""); ok {
		t.Error("the empty token matched")
	}
	e.noSecretInLogs(runTok, tokA)
}

// C7: a device login under any case or RFC 2047 encoding may not change reach settings.
func TestDeviceLoginForms_C7(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	s := &seen{}
	h := e.v.Middleware(guarded(e.v, nil, s))
	logins := [][]hdr{
		assert(tokA, "device:phone#abcdef"),
		assert(tokA, "DEVICE:phone#abcdef"),
		assert(tokA, "Device:x"),
		{{"Tailscale-User-Login", "device:phone#abcdef"}},
		{{"Tailscale-User-Login", mime.QEncoding.Encode("utf-8", "device:phone#abcdef")}},
		{{"Tailscale-User-Login", "=?UTF-8?B?ZGV2aWNlOnBob25l?="}},
		{{"Tailscale-User-Login", "=?utf-8?q?DEVICE=3Aphone?="}},
	}
	for _, hs := range logins {
		for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "post"} {
			*s = seen{}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newReq(m, "/settings/reach", "", "", hs))
			if w.Code != http.StatusForbidden || s.called {
				t.Errorf("%s by %v: %d", m, hs, w.Code)
			}
		}
	}
}

// ---- helper process (another uid) --------------------------------------------------------------

// TestConsoleHostileHelperProcess is the other-uid client of TestOtherUserIsLocal_C4:
// it starts a run and answers the permission hook with the run's token, printing each status.
func TestConsoleHostileHelperProcess(t *testing.T) {
	base := os.Getenv("FLEET_RT_CONSOLE_HELPER")
	if base == "" {
		return
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(base+"/runs", "application/json", nil)
	if err != nil {
		fmt.Println("RUNS error", err)
		os.Exit(0)
	}
	var run struct{ Token string }
	json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&run)
	resp.Body.Close()
	fmt.Println("RUNS", resp.StatusCode)
	req, _ := http.NewRequest("POST", base+"/hooks/permission-request", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+run.Token)
	resp, err = c.Do(req)
	if err != nil {
		fmt.Println("HOOK error", err)
		os.Exit(0)
	}
	resp.Body.Close()
	fmt.Println("HOOK", resp.StatusCode)
	os.Exit(0)
}
