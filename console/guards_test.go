package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/phase-console/fleet/contract"
)

// seen is what a handler behind the guards saw.
type seen struct {
	mu        sync.Mutex
	called    bool
	caller    Caller
	hasCaller bool
	run       string
	header    http.Header
}

func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.called = true
		s.caller, s.hasCaller = CallerFrom(r.Context())
		s.run, _ = RunFrom(r.Context())
		s.header = r.Header.Clone()
		w.WriteHeader(http.StatusOK)
	})
}

// guarded is the mux of a console that uses every guard.
func guarded(v *Verifier, runs *Runs, s *seen) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", s.handler())
	mux.Handle("POST /presence", v.LocalOnly(s.handler()))
	mux.Handle("POST /hooks/permission-request", v.PermissionHook(runs, s.handler()))
	mux.Handle("/settings/reach", v.ReachSettings(s.handler()))
	return mux
}

type guardRow struct {
	name   string
	method string
	path   string
	host   string
	peer   string
	hs     []hdr
	status int    // 200: served
	reason string // when refused
	event  string // log event of the refusal
}

func runGuards(t *testing.T, e *env, h http.Handler, s *seen, rows []guardRow, secrets ...string) {
	t.Helper()
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			*s = seen{}
			before := len(e.logs.String())
			w := httptest.NewRecorder()
			h.ServeHTTP(w, newReq(tc.method, tc.path, tc.host, tc.peer, tc.hs))
			if w.Code != tc.status {
				t.Fatalf("status %d (%s), want %d %s", w.Code, w.Header().Get("X-Fleet-Reason"), tc.status, tc.reason)
			}
			if tc.status == http.StatusOK {
				if !s.called {
					t.Fatal("handler not called")
				}
				return
			}
			if s.called {
				t.Fatal("handler called on a refusal")
			}
			if got := w.Header().Get("X-Fleet-Reason"); got != tc.reason {
				t.Fatalf("X-Fleet-Reason %q, want %q", got, tc.reason)
			}
			var body struct{ Error string }
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != tc.reason {
				t.Fatalf("body %q, want {\"error\":%q}", w.Body.String(), tc.reason)
			}
			line := e.logs.String()[before:]
			var ev struct{ Msg, Reason string }
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("want one JSON log line, got %q", line)
			}
			if ev.Msg != tc.event || ev.Reason != tc.reason {
				t.Fatalf("log event %s {reason %q}, want %s {reason %q}", ev.Msg, ev.Reason, tc.event, tc.reason)
			}
		})
	}
	e.noSecretInLogs(secrets...)
}

func TestGuard_C5(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var s seen
	var runs Runs
	h := e.v.Middleware(guarded(e.v, &runs, &s))
	runGuards(t, e, h, &s, []guardRow{
		{name: "C5 presence open to local", method: "POST", path: "/presence", status: 200},
		{name: "C5 presence shut to an asserted caller", method: "POST", path: "/presence", hs: assert(tokA, alice), status: 403, reason: ReasonLocalOnly, event: EventRejected},
		{name: "C5 presence shut to a caller through a proxy", method: "POST", path: "/presence", hs: []hdr{{"X-Forwarded-For", "100.64.0.1"}}, status: 403, reason: ReasonNoAssertion, event: EventRejected},
		{name: "C5 presence shut to a non-loopback peer", method: "POST", path: "/presence", peer: "192.0.2.1:1", status: 403, reason: ReasonNoAssertion, event: EventRejected},
		{name: "C5 presence: C1 still answers first", method: "POST", path: "/presence", hs: assert(flipLast(tokA), alice), status: 401, reason: ReasonBadToken, event: EventRejected},
	}, tokA)

	// Without Middleware the guard judges by itself, the same way.
	hNo := guarded(e.v, &runs, &s)
	runGuards(t, e, hNo, &s, []guardRow{
		{name: "C5 guard alone: local", method: "POST", path: "/presence", status: 200},
		{name: "C5 guard alone: asserted", method: "POST", path: "/presence", hs: assert(tokA, alice), status: 403, reason: ReasonLocalOnly, event: EventRejected},
		{name: "C5 guard alone: bad bearer", method: "POST", path: "/presence", hs: assert(tokB, alice), status: 401, reason: ReasonBadToken, event: EventRejected},
	}, tokA)
}

func TestGuard_C6(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var runs Runs
	id, runTok, err := runs.Start()
	if err != nil {
		t.Fatal(err)
	}
	endedID, endedTok, _ := runs.Start()
	if !runs.End(endedID) {
		t.Fatal("End of a live run = false")
	}
	const hook = "/hooks/permission-request"
	bearer := func(tok string) []hdr { return []hdr{{"Authorization", "Bearer " + tok}} }
	ok := bearer(runTok)
	ev := EventHookRejected
	rows := []guardRow{
		{name: "C6 valid run token", method: "POST", path: hook, hs: ok, status: 200},
		{name: "C6 valid run token, scheme in lower case", method: "POST", path: hook, hs: []hdr{{"Authorization", "bearer " + runTok}}, status: 200},
		{name: "C6 valid run token but X-Forwarded-For", method: "POST", path: hook, hs: join(ok, []hdr{{"X-Forwarded-For", "127.0.0.1"}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token but X_Forwarded_For", method: "POST", path: hook, hs: join(ok, []hdr{{"X_forwarded_for", "127.0.0.1"}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token but X-Forwarded-Host", method: "POST", path: hook, hs: join(ok, []hdr{{"X-Forwarded-Host", "127.0.0.1"}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token but Forwarded", method: "POST", path: hook, hs: join(ok, []hdr{{"Forwarded", "for=127.0.0.1"}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token but X-Real-Ip", method: "POST", path: hook, hs: join(ok, []hdr{{"X-Real-Ip", "127.0.0.1"}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token but the proxy header", method: "POST", path: hook, hs: join(ok, []hdr{{"Tailscale-User-Login", alice}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token but a right assertion", method: "POST", path: hook, hs: join(ok, assert(tokA, alice)), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token but an empty login header", method: "POST", path: hook, hs: join(ok, []hdr{{"X-Phase-Console-Fleet-Login", ""}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 valid run token from a peer that is not loopback", method: "POST", path: hook, peer: "192.0.2.1:5555", hs: ok, status: 403, reason: ReasonHookPeer, event: ev},
		{name: "C6 order: peer before proxy marks", method: "POST", path: hook, peer: "192.0.2.1:5555", hs: join(ok, []hdr{{"X-Forwarded-For", "127.0.0.1"}}), status: 403, reason: ReasonHookPeer, event: ev},
		{name: "C6 order: before C1 (assertion with a bad bearer)", method: "POST", path: hook, hs: join(ok, assert(flipLast(tokA), alice)), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 order: before C3 and C2 (proxy header + foreign Host + assertion)", method: "POST", path: hook, host: "evil.example", hs: join(ok, assert(tokA, alice), []hdr{{"Tailscale-User-Login", alice}}), status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 order: before the token (no bearer, proxied)", method: "POST", path: hook, hs: []hdr{{"X-Forwarded-For", "127.0.0.1"}}, status: 403, reason: ReasonHookProxied, event: ev},
		{name: "C6 foreign Host", method: "POST", path: hook, host: "evil.example", hs: ok, status: 421, reason: ReasonHost, event: ev},
		{name: "C6 no bearer", method: "POST", path: hook, status: 401, reason: ReasonBadRunToken, event: ev},
		{name: "C6 run token wrong by one byte", method: "POST", path: hook, hs: bearer(flipLast(runTok)), status: 401, reason: ReasonBadRunToken, event: ev},
		{name: "C6 the fleet token as the bearer", method: "POST", path: hook, hs: bearer(tokA), status: 401, reason: ReasonBadRunToken, event: ev},
		{name: "C6 a run token after the run ended", method: "POST", path: hook, hs: bearer(endedTok), status: 401, reason: ReasonBadRunToken, event: ev},
		{name: "C6 empty bearer", method: "POST", path: hook, hs: []hdr{{"Authorization", "Bearer "}}, status: 401, reason: ReasonBadRunToken, event: ev},
		{name: "C6 Basic scheme", method: "POST", path: hook, hs: []hdr{{"Authorization", "Basic " + runTok}}, status: 401, reason: ReasonBadRunToken, event: ev},
		{name: "C6 two Authorization headers", method: "POST", path: hook, hs: join(ok, ok), status: 401, reason: ReasonBadRunToken, event: ev},
	}
	var s seen
	runGuards(t, e, e.v.Middleware(guarded(e.v, &runs, &s)), &s, rows, tokA, runTok, endedTok)
	runGuards(t, e, guarded(e.v, &runs, &s), &s, rows, tokA, runTok, endedTok)

	// What the hook handler saw.
	w := httptest.NewRecorder()
	e.v.Middleware(guarded(e.v, &runs, &s)).ServeHTTP(w, newReq("POST", hook, "", "", ok))
	if s.run != id || s.header.Get("Authorization") != "" || s.caller.Scope != Local {
		t.Fatalf("hook handler saw run %q, Authorization %q, caller %+v", s.run, s.header.Get("Authorization"), s.caller)
	}

	// Middleware applies the C6 transport checks to every path under /hooks, any case.
	for _, p := range []string{"/hooks/other", "/HOOKS/permission-request", "/hooks", "/x/../hooks/y"} {
		w := httptest.NewRecorder()
		e.v.Middleware(guarded(e.v, &runs, &s)).ServeHTTP(w, newReq("POST", p, "", "", join(ok, assert(tokA, alice))))
		if w.Code != 403 || w.Header().Get("X-Fleet-Reason") != ReasonHookProxied {
			t.Errorf("C6 %s with an assertion: %d %s, want 403 %s", p, w.Code, w.Header().Get("X-Fleet-Reason"), ReasonHookProxied)
		}
	}

	// The run ends: its token is dead at once.
	runs.End(id)
	w = httptest.NewRecorder()
	e.v.Middleware(guarded(e.v, &runs, &s)).ServeHTTP(w, newReq("POST", hook, "", "", ok))
	if w.Code != 401 {
		t.Fatalf("C6 a run token right after End: %d, want 401", w.Code)
	}

	// No runs at all: every hook request is refused.
	w = httptest.NewRecorder()
	e.v.PermissionHook(nil, s.handler()).ServeHTTP(w, newReq("POST", hook, "", "", ok))
	if w.Code != 401 {
		t.Fatalf("C6 nil Runs: %d, want 401", w.Code)
	}
	if strings.Contains(e.logs.String(), runTok) {
		t.Fatal("a run token appears in the log")
	}
}

func TestGuard_C7(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var s seen
	var runs Runs
	h := e.v.Middleware(guarded(e.v, &runs, &s))
	dev := assert(tokA, "device:phone#abc234")
	runGuards(t, e, h, &s, []guardRow{
		{name: "C7 device login cannot change reach settings (POST)", method: "POST", path: "/settings/reach", hs: dev, status: 403, reason: ReasonReachSettings, event: EventRejected},
		{name: "C7 device login cannot change reach settings (PUT)", method: "PUT", path: "/settings/reach", hs: dev, status: 403, reason: ReasonReachSettings, event: EventRejected},
		{name: "C7 device login cannot change reach settings (DELETE)", method: "DELETE", path: "/settings/reach", hs: dev, status: 403, reason: ReasonReachSettings, event: EventRejected},
		{name: "C7 device login in upper case", method: "POST", path: "/settings/reach", hs: assert(tokA, "DEVICE:phone#abc234"), status: 403, reason: ReasonReachSettings, event: EventRejected},
		{name: "C7 device login through a proxy, no assertion: nobody", method: "POST", path: "/settings/reach", hs: []hdr{{"Tailscale-User-Login", "device:phone#abc234"}}, status: 403, reason: ReasonNoAssertion, event: EventRejected},
		{name: "C7 device login may read reach settings", method: "GET", path: "/settings/reach", hs: dev, status: 200},
		{name: "C7 tailnet login may change reach settings", method: "POST", path: "/settings/reach", hs: assert(tokA, alice), status: 200},
		{name: "C7 local may change reach settings", method: "POST", path: "/settings/reach", status: 200},
		{name: "C7 a login that merely contains device:", method: "POST", path: "/settings/reach", hs: assert(tokA, "alice-device:x"), status: 200},
	}, tokA)
}

// TestMiddleware_StripsAssertion: a handler behind Middleware never sees the fleet token.
func TestMiddleware_StripsAssertion(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var s seen
	w := httptest.NewRecorder()
	e.v.Middleware(s.handler()).ServeHTTP(w, newReq("GET", "/", "", "", join(assert(tokA, alice), []hdr{{"X-Other", "kept"}})))
	if w.Code != 200 || !s.hasCaller || s.caller != (Caller{Remote, alice}) {
		t.Fatalf("%d %+v", w.Code, s.caller)
	}
	for name := range s.header {
		if contract.IsAssertionName(name) {
			t.Errorf("handler saw %s", name)
		}
	}
	if s.header.Get("X-Other") != "kept" {
		t.Error("other headers must be kept")
	}
}

func TestRuns(t *testing.T) {
	var rs Runs
	id1, t1, err := rs.Start()
	if err != nil {
		t.Fatal(err)
	}
	id2, t2, _ := rs.Start()
	if id1 == id2 || t1 == t2 || len(id1) != 16 {
		t.Fatalf("ids %q %q", id1, id2)
	}
	if got, ok := rs.Match(t2); !ok || got != id2 {
		t.Fatalf("Match(t2) = %q %v", got, ok)
	}
	if _, ok := rs.Match(""); ok {
		t.Fatal("empty token matched")
	}
	if _, ok := rs.Match(flipLast(t1)); ok {
		t.Fatal("C6 run token wrong by one byte matched")
	}
	if !rs.End(id1) || rs.End(id1) {
		t.Fatal("End twice")
	}
	if _, ok := rs.Match(t1); ok {
		t.Fatal("C6 run token after the run ended matched")
	}
	for i := 1; i < MaxRuns; i++ {
		if _, _, err := rs.Start(); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if _, _, err := rs.Start(); !errors.Is(err, ErrTooManyRuns) {
		t.Fatalf("over MaxRuns: %v", err)
	}
}
