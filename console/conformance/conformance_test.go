package conformance

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/state"
)

const testToken = "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE"

func check(t *testing.T, h http.Handler) []Result {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	res := Check(context.Background(), srv.URL, testToken)
	for _, r := range res {
		if strings.Contains(r.String(), testToken) {
			t.Fatalf("a result holds the fleet token: %s", r)
		}
	}
	return res
}

func failedRules(res []Result) []string {
	var rules []string
	for _, r := range res {
		if !r.OK && !slices.Contains(rules, r.Rule) {
			rules = append(rules, r.Rule)
		}
	}
	sort.Strings(rules)
	return rules
}

func dump(res []Result) string {
	var b strings.Builder
	for _, r := range res {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// tokenHome is a new <stateHome> whose fleet token is testToken.
func tokenHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	fleetDir := state.FleetDir(home)
	if err := state.EnsureDir(fleetDir); err != nil {
		t.Fatal(err)
	}
	if err := state.WriteFileAtomic(filepath.Join(fleetDir, state.TokenFile), []byte(testToken+"\n")); err != nil {
		t.Fatal(err)
	}
	return home
}

// TestCheck_ReferenceConsole: every probe passes against the reference console.
func TestCheck_ReferenceConsole(t *testing.T) {
	home := tokenHome(t)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	res := check(t, refconsole.New(refconsole.Config{ID: "alpha", Verifier: v, Logger: log}))
	if got := failedRules(res); len(got) != 0 {
		t.Fatalf("failed %v:\n%s", got, dump(res))
	}
	rules := map[string]bool{}
	for _, r := range res {
		rules[r.Rule] = true
	}
	for _, want := range []string{"C1", "C2", "C3", "C4", "C5", "C6", "C7"} {
		if !rules[want] {
			t.Errorf("no probe for %s", want)
		}
	}
	if len(res) < 50 {
		t.Errorf("only %d probes", len(res))
	}
}

// TestCheck_BrokenConsoles: a console that breaks one rule fails exactly the probes of that rule.
func TestCheck_BrokenConsoles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     breaks
		rules []string
	}{
		{"a second, independent implementation passes", breaks{}, nil},
		{"reason word in the body only passes", breaks{noReasonHeader: true}, nil},
		{"skips C2", breaks{skipC2: true}, []string{"C2"}},
		{"checks C1 before C3 and C2", breaks{c1First: true}, []string{"C2", "C3"}},
		{"believes the proxy header (no C3)", breaks{skipC3: true}, []string{"C3"}},
		{"prefix compare of the bearer", breaks{prefixCompare: true}, []string{"C1"}},
		{"believes the first of two values", breaks{firstValue: true}, []string{"C1"}},
		{"only canonical header spellings", breaks{noFold: true}, []string{"C1", "C3", "C6"}},
		{"no Host check without an assertion", breaks{noHostCheck: true}, []string{"C2"}},
		{"a prefix Host check without an assertion", breaks{prefixHostCheck: true}, []string{"C2"}},
		{"a local login for X-Forwarded-For 127.0.0.1", breaks{trustXFF: true}, []string{"C4"}},
		{"presence open to remote", breaks{presenceOpen: true}, []string{"C5"}},
		{"a proxied request without an assertion is remote", breaks{trustProxy: true}, []string{"C4"}},
		{"hook believes a proxied request", breaks{hookTrustsProxy: true}, []string{"C6"}},
		{"run tokens never expire", breaks{runsNeverEnd: true}, []string{"C6"}},
		{"device may change reach settings", breaks{deviceMayChange: true}, []string{"C7"}},
		{"echoes the headers it got", breaks{echo: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := check(t, &mini{breaks: tc.b, token: testToken})
			if got := failedRules(res); !slices.Equal(got, tc.rules) {
				t.Fatalf("failed rules %v, want %v:\n%s", got, tc.rules, dump(res))
			}
		})
	}
}

// TestCheckCatchesPrefixHostCheck_C2: the checker probed the DNS-rebinding Host check (a foreign
// Host without an assertion, C2's note) with "evil.example" only; its hostile Host forms —
// 127.0.0.1.evil.example, localhost.evil.example — were sent only beside an assertion, where they
// prove C2 proper. A console whose no-assertion Host check is a prefix match (here: the reference
// console with a sloppy Config.AllowHost; by hand, `host.startsWith("localhost")` in any
// language) passed every probe, and a page served from localhost.evil.example (DNS → 127.0.0.1)
// is then scope local in the user's browser: same origin by its own Host, so it starts a run,
// gets the run token and answers the agent's permission hook. The checker now sends a
// same-origin POST /presence without an assertion under every Host form that the contract says
// is not loopback, and such a console fails C2 — and nothing else.
func TestCheckCatchesPrefixHostCheck_C2(t *testing.T) {
	home := tokenHome(t)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	sloppy := func(h string) bool { return strings.HasPrefix(h, "localhost") || strings.HasPrefix(h, "127.0.0.1") }
	v, err := console.New(console.Config{StateDir: home, Logger: log, AllowHost: sloppy})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	h := refconsole.New(refconsole.Config{ID: "alpha", Verifier: v, Logger: log})

	srv := httptest.NewServer(h)
	defer srv.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")

	// The rebinding page: same origin by its own Host, from the user's browser (this uid).
	host := "localhost.evil.example:" + port
	req, _ := http.NewRequest("POST", srv.URL+"/runs", strings.NewReader("{}"))
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var run struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || run.Token == "" {
		t.Fatalf("the sloppy console is not rebindable after all: %d", resp.StatusCode)
	}

	res := Check(context.Background(), srv.URL, testToken)
	if got := failedRules(res); !slices.Equal(got, []string{"C2"}) {
		t.Fatalf("failed rules %v, want [C2]: a DNS-rebinding page at %s drives this console as the local user (it got a run token):\n%s", got, host, dump(res))
	}
	for _, name := range []string{"127.0.0.1.evil.example", "localhost.evil.example", "localhost."} {
		failed := false
		for _, r := range res {
			failed = failed || (!r.OK && strings.Contains(r.What, "Host "+name+","))
		}
		if !failed {
			t.Errorf("no probe without an assertion failed for Host %s:\n%s", name, dump(res))
		}
	}
}

// TestCheck_NeverPrintsAToken: a console that echoes every header it got, in the body and in an
// error, never makes the checker print a token or a near-copy of one.
func TestCheck_NeverPrintsAToken(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		for name, vals := range r.Header {
			b.WriteString(name + "=" + strings.Join(vals, ",") + " ")
		}
		w.Header().Set("X-Fleet-Reason", r.Header.Get("X-Phase-Console-Fleet"))
		if r.URL.Path == "/runs" {
			w.WriteHeader(201)
			json.NewEncoder(w).Encode(map[string]string{"id": "1", "token": "cnVuLXRva2VuLXJ1bi10b2tlbi1ydW4tdG9rZW4tcnVu"})
			return
		}
		w.WriteHeader(500)
		io.WriteString(w, b.String())
	})
	res := check(t, echo)
	for _, r := range res {
		s := r.String()
		for _, secret := range []string{testToken[:30], testToken[len(testToken)-30:], "cnVuLXRva2VuLXJ1bi10b2tlbi1y"} {
			if strings.Contains(s, secret) {
				t.Fatalf("printed (part of) a token: %s", s)
			}
		}
	}
	if got := failedRules(res); len(got) == 0 {
		t.Fatal("an echoing console passed")
	}
}

func TestCheck_RefusesNonLoopback(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:9001", "http://127.0.0.1:9001/", "http://[::1]:9001", "http://127.0.0.5:1",
		"127.0.0.1:9001", "[::1]:9001", "127.0.0.1:9001/"} { // without a scheme: http
		if u, err := CheckURL(ok); err != nil || u.Scheme != "http" {
			t.Errorf("%s: %v, %v", ok, u, err)
		}
	}
	for _, bad := range []string{
		"", "localhost:9001", "10.0.0.1:9001", "127.0.0.1", "https://127.0.0.1:9001", "http://localhost:9001", "http://10.0.0.1:9001",
		"http://127.0.0.1", "http://127.0.0.1:0", "http://user@127.0.0.1:9001", "http://127.0.0.1:9001/c/alpha/",
		"http://127.0.0.1:9001/?x=1", "http://[::ffff:127.0.0.1]:9001", "http://0.0.0.0:9001", "http://127.0.0.1.evil.example:9001",
	} {
		if _, err := CheckURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	res := Check(context.Background(), "http://192.0.2.1:9001", testToken)
	if len(res) != 1 || res[0].OK || strings.Contains(res[0].String(), testToken) {
		t.Fatalf("%v", res)
	}
}

// mini is a second console implementation, written from the contract without package console,
// with switches that break one rule each.
type mini struct {
	breaks
	token string

	mu   sync.Mutex
	runs map[string]string
}

// breaks are the rules a mini console breaks.
type breaks struct {
	skipC2, c1First, skipC3, prefixCompare, firstValue, noFold, noHostCheck, trustXFF  bool
	presenceOpen, hookTrustsProxy, runsNeverEnd, deviceMayChange, noReasonHeader, echo bool
	trustProxy                                                                         bool // a proxied request without an assertion is remote
	prefixHostCheck                                                                    bool // without an assertion, a Host that starts like a loopback name is admitted
}

func fold(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

func (m *mini) name(n string) string {
	if m.noFold {
		return strings.ToLower(n)
	}
	return fold(n)
}

func (m *mini) values(h http.Header, want string) []string {
	var out []string
	for k, v := range h {
		if m.name(k) == want {
			out = append(out, v...)
		}
	}
	return out
}

func (m *mini) proxied(h http.Header) bool {
	for k := range h {
		f := m.name(k)
		if f == "tailscale-user-login" || f == "forwarded" || f == "x-real-ip" || strings.HasPrefix(f, "x-forwarded-") {
			return true
		}
	}
	return false
}

type who struct {
	Scope string `json:"scope"`
	Login string `json:"login"`
}

func (m *mini) refuse(w http.ResponseWriter, status int, reason string) {
	if !m.noReasonHeader {
		w.Header().Set("X-Fleet-Reason", reason)
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": reason})
}

// judge returns the caller or a refusal (status, reason).
func (m *mini) judge(r *http.Request) (who, int, string) {
	bearers := m.values(r.Header, "x-phase-console-fleet")
	logins := m.values(r.Header, "x-phase-console-fleet-login")
	if len(bearers)+len(logins) > 0 {
		c3 := func() (int, string) {
			if !m.skipC3 && len(m.values(r.Header, "tailscale-user-login")) > 0 {
				return 403, "fleet-and-proxy"
			}
			return 0, ""
		}
		c2 := func() (int, string) {
			if !m.skipC2 && !contract.IsLoopbackHost(r.Host) {
				return 421, "fleet-not-loopback"
			}
			return 0, ""
		}
		c1 := func() (int, string) {
			if m.firstValue && len(bearers) > 0 && len(logins) > 0 {
				bearers, logins = bearers[:1], logins[:1]
			}
			if len(bearers) != 1 || len(logins) != 1 || bearers[0] == "" || logins[0] == "" {
				return 401, "fleet-bad-token"
			}
			ok := subtle.ConstantTimeCompare([]byte(bearers[0]), []byte(m.token)) == 1
			if m.prefixCompare {
				ok = strings.HasPrefix(bearers[0], m.token)
			}
			if !ok {
				return 401, "fleet-bad-token"
			}
			return 0, ""
		}
		order := []func() (int, string){c3, c2, c1}
		if m.c1First {
			order = []func() (int, string){c1, c3, c2}
		}
		for _, check := range order {
			if st, reason := check(); st != 0 {
				return who{}, st, reason
			}
		}
		if m.trustXFF && r.Header.Get("X-Forwarded-For") == "127.0.0.1" {
			return who{"local", ""}, 0, ""
		}
		return who{"remote", logins[0]}, 0, ""
	}
	loopbackHost := contract.IsLoopbackHost(r.Host)
	if m.prefixHostCheck {
		h := strings.ToLower(r.Host)
		loopbackHost = strings.HasPrefix(h, "localhost") || strings.HasPrefix(h, "127.") || strings.HasPrefix(h, "[::1]")
	}
	if !m.noHostCheck && !loopbackHost {
		return who{}, 421, "host"
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if m.proxied(r.Header) || err != nil || !ap.Addr().IsLoopback() {
		if m.trustProxy {
			return who{"remote", r.Header.Get("Tailscale-User-Login")}, 0, ""
		}
		return who{}, 403, "no-assertion"
	}
	return who{"local", ""}, 0, ""
}

func (m *mini) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/hooks/permission-request" {
		m.hook(w, r)
		return
	}
	c, st, reason := m.judge(r)
	if st != 0 {
		m.refuse(w, st, reason)
		return
	}
	switch {
	case r.URL.Path == "/whoami":
		if m.echo {
			json.NewEncoder(w).Encode(map[string]any{"scope": c.Scope, "login": c.Login, "headers": r.Header})
			return
		}
		json.NewEncoder(w).Encode(c)
	case r.URL.Path == "/presence":
		if c.Scope != "local" && !m.presenceOpen {
			m.refuse(w, 403, "local-only")
			return
		}
		w.Write([]byte("{}"))
	case r.URL.Path == "/runs" && r.Method == "POST":
		if c.Scope != "local" {
			m.refuse(w, 403, "local-only")
			return
		}
		id, tok := "r1", "cnVuLXRva2VuLXJ1bi10b2tlbi1ydW4tdG9rZW4tcnVu"
		m.mu.Lock()
		if m.runs == nil {
			m.runs = map[string]string{}
		}
		m.runs[id] = tok
		m.mu.Unlock()
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(map[string]string{"id": id, "token": tok})
	case strings.HasPrefix(r.URL.Path, "/runs/") && r.Method == "DELETE":
		if c.Scope != "local" {
			m.refuse(w, 403, "local-only")
			return
		}
		if !m.runsNeverEnd {
			m.mu.Lock()
			delete(m.runs, strings.TrimPrefix(r.URL.Path, "/runs/"))
			m.mu.Unlock()
		}
		w.WriteHeader(204)
	case r.URL.Path == "/settings/reach":
		if r.Method != "GET" && strings.HasPrefix(c.Login, "device:") && !m.deviceMayChange {
			m.refuse(w, 403, "reach-settings")
			return
		}
		w.Write([]byte(`{"mode":"off"}`))
	default:
		http.NotFound(w, r)
	}
}

func (m *mini) hook(w http.ResponseWriter, r *http.Request) {
	if !m.hookTrustsProxy {
		if len(m.values(r.Header, "x-phase-console-fleet"))+len(m.values(r.Header, "x-phase-console-fleet-login")) > 0 || m.proxied(r.Header) {
			m.refuse(w, 403, "not local")
			return
		}
	}
	c, st, reason := m.judge(r)
	if st != 0 {
		m.refuse(w, st, reason)
		return
	}
	if c.Scope != "local" {
		m.refuse(w, 403, "local-only")
		return
	}
	tok, _ := contract.ParseBearer(r.Header)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.runs {
		if tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			w.Write([]byte(`{"decision":"ask"}`))
			return
		}
	}
	m.refuse(w, 401, "bad-run-token")
}

// TestPreflight: before any probe (and any token), a URL where nothing listens, or where the fleet
// supervisor answers, is one clear error; a console passes.
func TestPreflight(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" || r.Header.Get("X-Phase-Console-Fleet") != "" {
			t.Errorf("preflight sent a secret: %v", r.Header)
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	if err := Preflight(context.Background(), srv.URL); err != nil {
		t.Errorf("a console: %v", err)
	}

	fleet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleet"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer fleet.Close()
	if err := Preflight(context.Background(), fleet.URL); !errors.Is(err, ErrSupervisor) {
		t.Errorf("the supervisor: %v, want ErrSupervisor", err)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	err := Preflight(context.Background(), strings.TrimPrefix(deadURL, "http://"))
	if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), strings.TrimPrefix(deadURL, "http://")) {
		t.Errorf("a dead port: %v, want ErrNoAnswer naming the address", err)
	}
}

// TestCheck_SkipsWhatAConsoleLacks_N5: a single-page app behind the Go verifier — every GET is its
// page (200 HTML), every other method 405 — lacks every probe route. Each probe that needs one is
// SKIP naming it, none FAILs, and the refusal probes still ran (on "/") and passed.
func TestCheck_SkipsWhatAConsoleLacks_N5(t *testing.T) {
	home := tokenHome(t)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	spa := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!doctype html><div id=app></div>")
	}))
	res := check(t, spa)
	needs := map[string]int{}
	passed := 0
	for _, r := range res {
		switch {
		case r.Failed():
			t.Errorf("FAIL on a console that breaks no rule: %s", r)
		case r.Skipped():
			needs[r.Needs]++
			if !strings.HasPrefix(r.String(), "SKIP "+r.Rule+" ") || !strings.HasSuffix(r.String(), ": needs "+r.Needs) {
				t.Errorf("SKIP line %q", r)
			}
		default:
			passed++
		}
	}
	for _, route := range []string{"/whoami", "/presence", "/runs", "/settings/reach"} {
		if needs[route] == 0 {
			t.Errorf("no SKIP names %s:\n%s", route, dump(res))
		}
	}
	if passed < 25 {
		t.Errorf("only %d refusal probes ran and passed:\n%s", passed, dump(res))
	}
	if r := (Result{Rule: "C4", What: "x", Needs: "/whoami"}).Required(); !r.Failed() || !strings.Contains(r.String(), "lacks /whoami") {
		t.Errorf("Required() of a SKIP: %s", r)
	}
}
