package proxy

// Hostile requests against a door's shared judgement: tricks an attacker would try to get an
// assertion, an identity header or unjudged bytes past the hop, each a regression guard, raw
// bytes over a real listener.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// rtTry writes req on a fresh connection and reads up to n responses; it stops at the first read
// error (a closed connection, or nothing more within wait) and returns what it read.
func (d *testDoor) rtTry(req string, n int, wait time.Duration) ([]response, error) {
	d.t.Helper()
	conn, err := net.Dial("tcp", d.addr)
	if err != nil {
		d.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	rs, err := rawhttp.ExchangeUpTo(conn, req, n)
	return toResponses(rs), err
}

// rtSeen returns what alpha saw since before.
func (d *testDoor) rtSeen(before int) []seen { return d.alpha.Since(before) }

// newRTConsole is a console whose handler the test chooses; it records what reached it.
func newRTConsole(t *testing.T, d *testDoor, id string, h http.HandlerFunc) *echoConsole {
	t.Helper()
	c := newEchoConsole(t, echoconsole.Answer(h))
	d.setConsole(id, c.addr())
	return c
}

// An obs-fold continuation line is joined into the previous header's value: the text of an
// assertion header in it never becomes a header of its own on the hop.
func TestObsFoldContinuation_S3(t *testing.T) {
	d := startTestDoor(t)
	for _, fold := range []string{" X-Phase-Console-Fleet: evil", "\tX-Phase-Console-Fleet-Login: mallory"} {
		before := d.alpha.count()
		rs, _ := d.rtTry(serveReq("GET", "/c/alpha/", "X-Foo: a", fold), 1, 3*time.Second)
		for _, s := range d.rtSeen(before) {
			if got := foldedValues(s.Header, "X-Phase-Console-Fleet"); len(got) != 1 || got[0] != d.token {
				t.Errorf("%q: console saw bearer values %q", fold, got)
			}
			if got := foldedValues(s.Header, "X-Phase-Console-Fleet-Login"); len(got) != 1 || got[0] != alice {
				t.Errorf("%q: console saw login values %q", fold, got)
			}
		}
		if len(rs) == 1 && rs[0].status == 200 && d.alpha.count() != before+1 {
			t.Errorf("%q: 200 without a forward", fold)
		}
	}
}

// Header lines that are not well-formed never reach a console: a space before the colon, a bare
// CR, a NUL, a line without a colon, a header line starting with whitespace.
func TestMalformedHeaderLines_S3(t *testing.T) {
	d := startTestDoor(t)
	for _, extra := range []string{
		"X-Phase-Console-Fleet : evil",
		"X-Foo: a\rX-Phase-Console-Fleet: evil",
		"X-Foo: a\x00b",
		"X-Phase-Console-Fleet-Login",
		"X-Phase-Console-Fleet\t: evil",
	} {
		before := d.alpha.count()
		rs, _ := d.rtTry(serveReq("GET", "/c/alpha/", extra), 1, 3*time.Second)
		if d.alpha.count() != before {
			t.Errorf("%q: forwarded to the console", extra)
		}
		if len(rs) == 1 && rs[0].status < 400 {
			t.Errorf("%q: got %d", extra, rs[0].status)
		}
	}
}

// A console that answers an Upgrade with anything but 101 leaves the connection in HTTP: the next
// pipelined request is judged on its own (an assertion in it is 400, hooks is 403).
func TestPipelinedAfterRefusedUpgrade_S3(t *testing.T) {
	d := startTestDoor(t)
	c := newRTConsole(t, d, "refuser", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no websockets here", http.StatusForbidden)
	})
	up := serveReq("GET", "/c/refuser/ws", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey)
	rows := []struct {
		name, next, reason string
		status             int
	}{
		{"assertion", serveReq("GET", "/c/refuser/", "X-Phase-Console-Fleet: evil"), "assertion-sent", 400},
		{"hooks", serveReq("POST", "/c/refuser/hooks/permission-request"), "hooks", 403},
		{"foreign origin", serveReq("GET", "/c/refuser/", "Origin: https://evil.example"), "cross-origin", 403},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := c.count()
			rs, err := d.rtTry(up+row.next, 2, 5*time.Second)
			if len(rs) != 2 {
				t.Fatalf("got %d responses (%v)", len(rs), err)
			}
			if rs[0].status != 403 || rs[0].reason != "" {
				t.Errorf("upgrade: got %d %q, want the console's own 403", rs[0].status, rs[0].reason)
			}
			if rs[1].status != row.status || rs[1].reason != row.reason {
				t.Errorf("pipelined: got %d %q, want %d %q", rs[1].status, rs[1].reason, row.status, row.reason)
			}
			if n := c.count() - before; n != 1 {
				t.Errorf("console saw %d requests, want 1 (the upgrade)", n)
			}
		})
	}
}

// A console that "switches" to another protocol than asked is a 502, and the connection stays in
// HTTP: nothing the caller sends next is spliced through unjudged.
func TestBadSwitchIsNotSpliced_S9(t *testing.T) {
	d := startTestDoor(t)
	c := newRTConsole(t, d, "switcher", func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(io.Discard, brw)
	})
	for _, up := range []string{
		serveReq("GET", "/c/switcher/ws", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey),
		serveReq("GET", "/c/switcher/plain"), // a 101 to a request that asked for no upgrade
	} {
		before := c.count()
		rs, err := d.rtTry(up+serveReq("GET", "/c/switcher/hooks"), 2, 5*time.Second)
		if len(rs) == 0 || rs[0].status != http.StatusBadGateway {
			t.Fatalf("got %v (%v), want 502 first", rs, err)
		}
		if len(rs) == 2 && (rs[1].status != 403 || rs[1].reason != "hooks") {
			t.Errorf("pipelined hooks: got %d %q", rs[1].status, rs[1].reason)
		}
		if n := c.count() - before; n != 1 {
			t.Errorf("console saw %d requests, want 1", n)
		}
	}
}

// HTTP/1.0 keep-alive: every request on the connection is judged.
func TestHTTP10KeepAlive_S3(t *testing.T) {
	d := startTestDoor(t)
	first := strings.Replace(serveReq("GET", "/c/alpha/", "Connection: keep-alive"), "HTTP/1.1", "HTTP/1.0", 1)
	second := strings.Replace(serveReq("GET", "/c/alpha/", "X-Phase-Console-Fleet-Login: mallory"), "HTTP/1.1", "HTTP/1.0", 1)
	before := d.alpha.count()
	rs, _ := d.rtTry(first+second, 2, 3*time.Second)
	if len(rs) == 2 && (rs[1].status != 400 || rs[1].reason != "assertion-sent") {
		t.Errorf("second request: %d %q", rs[1].status, rs[1].reason)
	}
	if n := d.alpha.count() - before; n > 1 {
		t.Errorf("console saw %d requests", n)
	}
	for _, s := range d.rtSeen(before) {
		if got := foldedValues(s.Header, "X-Phase-Console-Fleet-Login"); len(got) != 1 || got[0] != alice {
			t.Errorf("console saw logins %q", got)
		}
	}
}

// S6: the caller's Connection line cannot delete what the hop sets.
func TestConnectionCannotDeleteHopHeaders_S6(t *testing.T) {
	d := startTestDoor(t)
	before := d.alpha.count()
	r := d.raw(serveReq("GET", "/c/alpha/x",
		"Connection: keep-alive, X-Forwarded-For, X-Forwarded-Prefix, X-Forwarded-Host, X-Forwarded-Proto, Host"))
	s := d.wantForwarded(t, r, before, alice, "/x")
	want := map[string]string{"X-Forwarded-For": aliceIP, "X-Forwarded-Prefix": "/c/alpha", "X-Forwarded-Host": tsName, "X-Forwarded-Proto": "https"}
	for k, v := range want {
		if got := s.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("console saw %s %q, want %q", k, got, v)
		}
	}
}

// S4: identity families under spellings a framework might read (CGI-style underscores, dots,
// upper case) never reach a console.
func TestIdentityFamiliesOddSpellings_S4(t *testing.T) {
	d := startTestDoor(t)
	names := []string{"REMOTE_USER", "Remote.User", "X.Webauth.User", "CF_ACCESS_JWT_ASSERTION",
		"Teleport_Jwt_Assertion", "x_forwarded_user", "X_FORWARDED_EMAIL", "Tailscale.User.Login",
		"tailscale_user_name", "X_Real_Ip", "x_auth_request_email", "X-Pomerium_Claim-Email",
		"FORWARDED", "Proxy_Authorization", "authorization"}
	var extra []string
	for _, n := range names {
		extra = append(extra, n+": mallory")
	}
	before := d.alpha.count()
	s := d.wantForwarded(t, d.raw(serveReq("GET", "/c/alpha/x", extra...)), before, alice, "/x")
	for k, vv := range s.Header {
		for _, v := range vv {
			if strings.Contains(v, "mallory") {
				t.Errorf("console saw %s: %s", k, v)
			}
		}
	}
}

// TestUnsentBodyRefusedAndClosed_S9: a request that declares a body (Content-Length: 1000, or
// chunked) and never sends it, to which the door answers itself without reading the body — a
// refusal that would keep the connection (403, 404, 405), the redirect of /c/<id>, a page of the
// door's own, the 502 of a console that is down, a refusal that closed the connection already —
// gets its answer at once, with "Connection: close", and the connection is closed. To keep it,
// net/http's server reads up to 256 KiB of that body with no deadline before it writes the
// answer, and again when it closes the body after the handler (even when the answer closes the
// connection): a caller could hold a goroutine and a descriptor for ever. (The read deadline is a
// guard against that hang, not a timing assertion.)
func TestUnsentBodyRefusedAndClosed_S9(t *testing.T) {
	d := startTestDoor(t)
	pages := startTestDoor(t, func(door *Door) {
		door.Pages = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Page", r.URL.Path) // answers without reading the body
		})
	})
	gone := newEchoConsole(t)
	d.setConsole("gone", gone.addr())
	gone.Close()
	const declared = "Content-Length: 1000"
	rows := []struct {
		name   string
		door   *testDoor
		req    string
		status int
		reason string
	}{
		{"S7 hooks", d, serveReq("POST", "/c/alpha/hooks", declared), http.StatusForbidden, "hooks"},
		{"S7 hooks, chunked", d, serveReq("POST", "/c/alpha/hooks", "Transfer-Encoding: chunked"), http.StatusForbidden, "hooks"},
		{"S8 unknown console", d, serveReq("POST", "/c/nosuch/x", declared), http.StatusNotFound, "unknown-console"},
		{"S12 cross-origin", d, serveReq("POST", "/c/alpha/x", declared, "Origin: https://evil.example"), http.StatusForbidden, "cross-origin"},
		{"method", d, serveReq("TRACE", "/c/alpha/x", declared), http.StatusMethodNotAllowed, "method"},
		{"no such page", d, serveReq("POST", "/fleet/v1/consoles", declared), http.StatusNotFound, "not-found"},
		{"S7 redirect", d, serveReq("POST", "/c/alpha", declared), http.StatusPermanentRedirect, ""},
		{"page", pages, serveReq("POST", "/fleet/v1/consoles", declared), http.StatusOK, ""},
		{"S8 console down", d, serveReq("POST", "/c/gone/x", declared), http.StatusBadGateway, "console-down"},
		// Closed already, but net/http still read the body when it closed it, with no deadline.
		{"S3 assertion-sent", d, serveReq("POST", "/c/alpha/x", declared, "X-Phase-Console-Fleet: x"), http.StatusBadRequest, "assertion-sent"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.alpha.count()
			conn := row.door.dial() // its deadline guards against the hang
			defer conn.Close()
			if _, err := io.WriteString(conn, crlf(row.req)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			method, _ := requestLine(row.req)
			res, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != row.status || res.Header.Get("X-Fleet-Reason") != row.reason {
				t.Errorf("got %d %q, want %d %q", res.StatusCode, res.Header.Get("X-Fleet-Reason"), row.status, row.reason)
			}
			if !res.Close {
				t.Errorf("the answer keeps the connection (Connection: %q)", res.Header.Get("Connection"))
			}
			wantClosed(t, conn, br, "the connection of a body never sent")
			if n := d.alpha.count(); n != before {
				t.Errorf("the console saw %d requests, want none", n-before)
			}
		})
	}
}

// TestBodylessRefusalKeepsConnection_S7: a refusal that keeps the connection (403 hooks) still
// keeps it for a request without a body, and for one whose body was all sent and is empty
// (Content-Length: 0): the next request on it is served.
func TestBodylessRefusalKeepsConnection_S7(t *testing.T) {
	d := startTestDoor(t)
	for _, extra := range [][]string{nil, {"Content-Length: 0"}} {
		rs := d.rawMany(serveReq("POST", "/c/alpha/hooks", extra...)+serveReq("GET", "/c/alpha/x"), 2)
		if rs[0].status != http.StatusForbidden || rs[0].reason != "hooks" || rs[1].status != http.StatusOK {
			t.Errorf("%q: got %d %q then %d, want 403 hooks then 200 on the same connection", extra,
				rs[0].status, rs[0].reason, rs[1].status)
		}
	}
}
