package refconsole

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/phase-console/fleet/console"
)

type refEnv struct {
	t    *testing.T
	srv  *httptest.Server
	logs *syncBuffer
}

func newRef(t *testing.T) *refEnv {
	t.Helper()
	home, _ := newStateHome(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	v, err := console.New(console.Config{StateDir: home, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	srv := httptest.NewServer(New(Config{ID: "alpha", Name: "Alpha <1>", Verifier: v, Tick: 5 * time.Millisecond, Logger: log}))
	t.Cleanup(srv.Close)
	return &refEnv{t: t, srv: srv, logs: logs}
}

type answer struct {
	status int
	reason string
	body   string
	header http.Header
}

// do sends a request; hs are header lines as "Name: value"; host "" keeps the server's address.
func (e *refEnv) do(method, path, host, body string, hs ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for _, h := range hs {
		name, value, _ := strings.Cut(h, ": ")
		req.Header[name] = append(req.Header[name], value)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), string(b), resp.Header}
}

func asserted(login string) []string {
	return []string{"X-Phase-Console-Fleet: " + testToken, "X-Phase-Console-Fleet-Login: " + login}
}

func TestReferenceConsole_Whoami(t *testing.T) {
	e := newRef(t)
	for _, tc := range []struct {
		name string
		host string
		hs   []string
		want string
	}{
		{"local caller: scope local, login empty", "", nil, `{"scope":"local","login":""}`},
		{"C4 asserted: scope remote", "", asserted("alice@example.com"), `{"scope":"remote","login":"alice@example.com"}`},
		{"C4 asserted with X-Forwarded-For 127.0.0.1: still remote", "", append(asserted("root"), "X-Forwarded-For: 127.0.0.1"), `{"scope":"remote","login":"root"}`},
		{"C2 Host localhost", "localhost", asserted("alice@example.com"), `{"scope":"remote","login":"alice@example.com"}`},
	} {
		a := e.do("GET", "/whoami", tc.host, "", tc.hs...)
		if a.status != 200 || strings.TrimSpace(a.body) != tc.want {
			t.Errorf("%s: %d %s, want %s", tc.name, a.status, a.body, tc.want)
		}
	}
}

// TestReferenceConsole_Host: a foreign Host is refused on every endpoint, asserted or not.
func TestReferenceConsole_Host(t *testing.T) {
	e := newRef(t)
	for _, p := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/whoami"}, {"GET", "/app.js"}, {"POST", "/presence"}, {"POST", "/runs"},
		{"GET", "/settings/reach"}, {"GET", "/events"}, {"GET", "/ws"}, {"GET", "/nothing"},
	} {
		for _, host := range []string{"evil.example", "127.0.0.1.evil.example"} {
			if a := e.do(p.method, p.path, host, ""); a.status != 421 || a.reason != "host" {
				t.Errorf("%s %s Host %s: %d %s, want 421 host", p.method, p.path, host, a.status, a.reason)
			}
			if a := e.do(p.method, p.path, host, "", asserted("alice")...); a.status != 421 || a.reason != "fleet-not-loopback" {
				t.Errorf("C2 %s %s Host %s asserted: %d %s, want 421 fleet-not-loopback", p.method, p.path, host, a.status, a.reason)
			}
		}
	}
}

func TestReferenceConsole_C5_C6(t *testing.T) {
	e := newRef(t)
	if a := e.do("POST", "/presence", "", ""); a.status != 200 {
		t.Fatalf("C5 local presence: %d %s", a.status, a.body)
	}
	if a := e.do("POST", "/presence", "", "", asserted("alice")...); a.status != 403 || a.reason != "local-only" {
		t.Fatalf("C5 remote presence: %d %s", a.status, a.reason)
	}
	if a := e.do("POST", "/runs", "", "", asserted("alice")...); a.status != 403 {
		t.Fatalf("a remote caller started a run: %d", a.status)
	}
	a := e.do("POST", "/runs", "", "")
	var run struct{ ID, Token string }
	if err := json.Unmarshal([]byte(a.body), &run); a.status != 201 || err != nil || run.ID == "" || run.Token == "" {
		t.Fatalf("POST /runs: %d %s", a.status, a.body)
	}
	bearer := "Authorization: Bearer " + run.Token
	if a := e.do("POST", "/hooks/permission-request", "", `{"tool":"Bash"}`, bearer); a.status != 200 || !strings.Contains(a.body, run.ID) {
		t.Fatalf("C6 hook with the run token: %d %s", a.status, a.body)
	}
	if a := e.do("POST", "/hooks/permission-request", "", "{}", bearer, "X-Forwarded-For: 127.0.0.1"); a.status != 403 || a.reason != "not local" {
		t.Fatalf("C6 hook through a proxy: %d %q", a.status, a.reason)
	}
	if a := e.do("POST", "/hooks/permission-request", "", "{}", append(asserted("alice"), bearer)...); a.status != 403 || a.reason != "not local" {
		t.Fatalf("C5/C6 asserted hook: %d %q", a.status, a.reason)
	}
	if a := e.do("DELETE", "/runs/"+run.ID, "", "", asserted("alice")...); a.status != 403 {
		t.Fatalf("a remote caller ended a run: %d", a.status)
	}
	if a := e.do("DELETE", "/runs/"+run.ID, "", ""); a.status != 204 {
		t.Fatalf("DELETE /runs/id: %d", a.status)
	}
	if a := e.do("POST", "/hooks/permission-request", "", "{}", bearer); a.status != 401 {
		t.Fatalf("C6 hook after the run ended: %d", a.status)
	}
	if a := e.do("DELETE", "/runs/"+run.ID, "", ""); a.status != 404 {
		t.Fatalf("DELETE of an ended run: %d", a.status)
	}
	if out := e.logs.String(); strings.Contains(out, run.Token) || strings.Contains(out, testToken) {
		t.Fatal("a token appears in the log")
	}
	if !strings.Contains(e.logs.String(), `"msg":"hook.rejected"`) {
		t.Fatal("no hook.rejected event")
	}
}

func TestReferenceConsole_C7(t *testing.T) {
	e := newRef(t)
	if a := e.do("POST", "/settings/reach", "", `{"mode":"direct"}`, asserted("device:phone#abc234")...); a.status != 403 || a.reason != "reach-settings" {
		t.Fatalf("C7 device POST: %d %q", a.status, a.reason)
	}
	if a := e.do("GET", "/settings/reach", "", "", asserted("device:phone#abc234")...); a.status != 200 || !strings.Contains(a.body, `"off"`) {
		t.Fatalf("C7 device GET: %d %s", a.status, a.body)
	}
	if a := e.do("POST", "/settings/reach", "", `{"mode":"direct"}`); a.status != 200 {
		t.Fatalf("local POST: %d %s", a.status, a.body)
	}
	if a := e.do("GET", "/settings/reach", "", ""); !strings.Contains(a.body, `"direct"`) {
		t.Fatalf("after POST: %s", a.body)
	}
	if a := e.do("POST", "/settings/reach", "", `{"mode":"wide"}`); a.status != 400 {
		t.Fatalf("bad mode: %d", a.status)
	}
}

func TestReferenceConsole_Page(t *testing.T) {
	e := newRef(t)
	a := e.do("GET", "/", "", "", asserted("<b>mallory</b>")...)
	if a.status != 200 || !strings.Contains(a.body, "remote") || !strings.Contains(a.body, "&lt;b&gt;mallory&lt;/b&gt;") || strings.Contains(a.body, "<b>mallory") {
		t.Fatalf("page: %d\n%s", a.status, a.body)
	}
	if !strings.Contains(a.body, "Alpha &lt;1&gt;") {
		t.Fatalf("page lacks the escaped name:\n%s", a.body)
	}
	if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Fatalf("CSP %q", csp)
	}
	if a := e.do("GET", "/", "", ""); !strings.Contains(a.body, "local") {
		t.Fatalf("local page: %s", a.body)
	}
	if a := e.do("GET", "/app.js", "", ""); a.status != 200 || !strings.Contains(a.body, "EventSource") {
		t.Fatalf("app.js: %d", a.status)
	}
}

func TestReferenceConsole_Events(t *testing.T) {
	e := newRef(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/events", nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var data []string
	for len(data) < 3 && sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	if strings.Join(data, " ") != `{"n":1} {"n":2} {"n":3}` {
		t.Fatalf("ticks %q", data)
	}
}

func TestReferenceConsole_WebSocket(t *testing.T) {
	e := newRef(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/ws"
	for _, tc := range []struct {
		name string
		h    http.Header
	}{
		{"local, same Origin", http.Header{"Origin": {e.srv.URL}}},
		{"asserted, Origin of the tailnet name (judged by the supervisor)", http.Header{
			"X-Phase-Console-Fleet": {testToken}, "X-Phase-Console-Fleet-Login": {"alice"}, "Origin": {"https://machine.tailnet.ts.net"}}},
	} {
		c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: tc.h})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := c.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		typ, msg, err := c.Read(ctx)
		if err != nil || typ != websocket.MessageText || string(msg) != "hello" {
			t.Fatalf("%s: echo %q %v", tc.name, msg, err)
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
	// A local caller from a foreign page is refused before the upgrade.
	_, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != 403 || resp.Header.Get("X-Fleet-Reason") != "cross-origin" {
		t.Fatalf("foreign Origin: %v %v", err, resp)
	}
}
