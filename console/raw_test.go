package console

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRawSpellings sends raw bytes over TCP to a real server (net/http's own header parsing, real
// loopback peer) and checks the answer and what the handler behind Middleware saw.
func TestRawSpellings(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	var runs Runs
	_, runTok, _ := runs.Start()
	var s seen
	srv := httptest.NewServer(e.v.Middleware(guarded(e.v, &runs, &s)))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	rows := []struct {
		name   string
		req    string // request head without the final blank line; {addr}, {tok}, {bad}, {run} expanded
		status int
		reason string
		caller Caller // when served
	}{
		{"C1 canonical spelling believed", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 200, "", Caller{Remote, alice}},
		{"C1 lower-case spelling believed", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nx-phase-console-fleet: {tok}\r\nx-phase-console-fleet-login: alice@example.com", 200, "", Caller{Remote, alice}},
		{"C1 X_Phase_Console_Fleet with the right bearer is one well-formed value", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX_Phase_Console_Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 200, "", Caller{Remote, alice}},
		{"C1 X_Phase_Console_Fleet wrong by one byte", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX_Phase_Console_Fleet: {bad}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 401, ReasonBadToken, Caller{}},
		{"C1 X_Phase_Console_Fleet_Login alone is an assertion, not local", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX_Phase_Console_Fleet_Login: alice@example.com", 401, ReasonBadToken, Caller{}},
		{"C1 X.Phase.Console.Fleet empty is an assertion", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX.Phase.Console.Fleet:", 401, ReasonBadToken, Caller{}},
		{"C1 two spellings of the bearer", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX-Phase-Console-Fleet: {tok}\r\nX_Phase_Console_Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 401, ReasonBadToken, Caller{}},
		{"C1 two bearer lines", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 401, ReasonBadToken, Caller{}},
		{"C1 empty login", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login:", 401, ReasonBadToken, Caller{}},
		{"C1 assertion declared as a trailer", "POST /whoami HTTP/1.1\r\nHost: {addr}\r\nTrailer: X-Phase-Console-Fleet\r\nTransfer-Encoding: chunked\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 401, ReasonBadToken, Caller{}},
		{"C2 Host 127.0.0.1.evil.example", "GET /whoami HTTP/1.1\r\nHost: 127.0.0.1.evil.example\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 421, ReasonNotLoopback, Caller{}},
		{"C2 Host localhost believed", "GET /whoami HTTP/1.1\r\nHost: localhost\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 200, "", Caller{Remote, alice}},
		{"C2 absolute-form target to a foreign host", "GET http://evil.example/whoami HTTP/1.1\r\nHost: {addr}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com", 421, ReasonNotLoopback, Caller{}},
		{"C3 Tailscale_User_Login beside the assertion", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com\r\nTailscale_User_Login: alice@example.com", 403, ReasonAndProxy, Caller{}},
		{"C4 asserted from this loopback peer is remote", "GET /whoami HTTP/1.1\r\nHost: {addr}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: root\r\nX-Forwarded-For: 127.0.0.1", 200, "", Caller{Remote, "root"}},
		{"local without assertion", "GET /whoami HTTP/1.1\r\nHost: {addr}", 200, "", Caller{Local, ""}},
		{"C6 hook with a run token", "POST /hooks/permission-request HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {run}\r\nContent-Length: 0", 200, "", Caller{Local, ""}},
		{"C6 hook with a run token but X_Forwarded_For", "POST /hooks/permission-request HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {run}\r\nX_Forwarded_For: 127.0.0.1\r\nContent-Length: 0", 403, ReasonHookProxied, Caller{}},
		{"C6 hook spelled %68ooks with an assertion", "POST /%68ooks/permission-request HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {run}\r\nX-Phase-Console-Fleet: {tok}\r\nX-Phase-Console-Fleet-Login: alice@example.com\r\nContent-Length: 0", 403, ReasonHookProxied, Caller{}},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			s = seen{}
			raw := strings.NewReplacer("{addr}", addr, "{tok}", tokA, "{bad}", flipLast(tokA), "{run}", runTok).Replace(tc.req)
			raw += "\r\nConnection: close\r\n\r\n"
			if strings.Contains(raw, "chunked") {
				raw += "0\r\nX-Phase-Console-Fleet: " + tokA + "\r\n\r\n"
			}
			resp := sendRaw(t, addr, raw)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %s, want %d %s", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), tc.status, tc.reason)
			}
			if tc.status != 200 {
				if s.called {
					t.Fatal("handler called on a refusal")
				}
				if got := resp.Header.Get("X-Fleet-Reason"); got != tc.reason {
					t.Fatalf("reason %q, want %q", got, tc.reason)
				}
				return
			}
			if !s.called || s.caller != tc.caller {
				t.Fatalf("handler saw %+v (called %v), want %+v", s.caller, s.called, tc.caller)
			}
			for name := range s.header {
				if strings.Contains(strings.ToLower(name), "phase") {
					t.Fatalf("handler saw header %s", name)
				}
			}
		})
	}
	e.noSecretInLogs(tokA, runTok)
}

func sendRaw(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprint(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
