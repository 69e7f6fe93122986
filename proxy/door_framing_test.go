package proxy

// Hostile requests against a door's shared judgement: tricks an attacker would try to get an
// assertion, an identity header or unjudged bytes past the hop, each a regression guard, raw
// bytes over a real listener.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// newAnsweringConsole is a console whose handler the test chooses; it records what reached it.
func newAnsweringConsole(t *testing.T, d *testDoor, id string, h http.HandlerFunc) *echoconsole.Console {
	t.Helper()
	c := echoconsole.New(t, echoconsole.Answer(h))
	d.setConsole(id, c.Addr())
	return c
}

// An obs-fold continuation line is joined into the previous header's value: the text of an
// assertion header in it never becomes a header of its own on the hop.
func TestObsFoldContinuation_S3(t *testing.T) {
	d := startTestDoor(t)
	for _, fold := range []string{" X-Phase-Console-Fleet: evil", "\tX-Phase-Console-Fleet-Login: mallory"} {
		before := d.Alpha.Count()
		rs, _ := d.RawUpTo(doortest.ServeReq("GET", "/c/alpha/", "X-Foo: a", fold), 1, 3*time.Second)
		for _, s := range d.Alpha.Since(before) {
			if got := rawhttp.FoldedValues(s.Header, "X-Phase-Console-Fleet"); len(got) != 1 || got[0] != d.Token {
				t.Errorf("%q: console saw bearer values %q", fold, got)
			}
			if got := rawhttp.FoldedValues(s.Header, "X-Phase-Console-Fleet-Login"); len(got) != 1 || got[0] != doortest.Alice {
				t.Errorf("%q: console saw login values %q", fold, got)
			}
		}
		if len(rs) == 1 && rs[0].Status == 200 && d.Alpha.Count() != before+1 {
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
		before := d.Alpha.Count()
		rs, _ := d.RawUpTo(doortest.ServeReq("GET", "/c/alpha/", extra), 1, 3*time.Second)
		if d.Alpha.Count() != before {
			t.Errorf("%q: forwarded to the console", extra)
		}
		if len(rs) == 1 && rs[0].Status < 400 {
			t.Errorf("%q: got %d", extra, rs[0].Status)
		}
	}
}

// A console that answers an Upgrade with anything but 101 leaves the connection in HTTP: the next
// pipelined request is judged on its own (an assertion in it is 400, hooks is 403).
func TestPipelinedAfterRefusedUpgrade_S3(t *testing.T) {
	d := startTestDoor(t)
	c := newAnsweringConsole(t, d, "refuser", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no websockets here", http.StatusForbidden)
	})
	up := doortest.ServeReq("GET", "/c/refuser/ws", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey)
	rows := []struct {
		name, next, reason string
		status             int
	}{
		{"assertion", doortest.ServeReq("GET", "/c/refuser/", "X-Phase-Console-Fleet: evil"), "assertion-sent", 400},
		{"hooks", doortest.ServeReq("POST", "/c/refuser/hooks/permission-request"), "hooks", 403},
		{"foreign origin", doortest.ServeReq("GET", "/c/refuser/", "Origin: https://evil.example"), "cross-origin", 403},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := c.Count()
			rs, err := d.RawUpTo(up+row.next, 2, 5*time.Second)
			if len(rs) != 2 {
				t.Fatalf("got %d responses (%v)", len(rs), err)
			}
			if rs[0].Status != 403 || rs[0].Reason != "" {
				t.Errorf("upgrade: got %d %q, want the console's own 403", rs[0].Status, rs[0].Reason)
			}
			if rs[1].Status != row.status || rs[1].Reason != row.reason {
				t.Errorf("pipelined: got %d %q, want %d %q", rs[1].Status, rs[1].Reason, row.status, row.reason)
			}
			if n := c.Count() - before; n != 1 {
				t.Errorf("console saw %d requests, want 1 (the upgrade)", n)
			}
		})
	}
}

// A console that "switches" to another protocol than asked is a 502, and the connection stays in
// HTTP: nothing the caller sends next is spliced through unjudged.
func TestBadSwitchIsNotSpliced_S9(t *testing.T) {
	d := startTestDoor(t)
	c := newAnsweringConsole(t, d, "switcher", func(w http.ResponseWriter, r *http.Request) {
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
		doortest.ServeReq("GET", "/c/switcher/ws", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey),
		doortest.ServeReq("GET", "/c/switcher/plain"), // a 101 to a request that asked for no upgrade
	} {
		before := c.Count()
		rs, err := d.RawUpTo(up+doortest.ServeReq("GET", "/c/switcher/hooks"), 2, 5*time.Second)
		if len(rs) == 0 || rs[0].Status != http.StatusBadGateway {
			t.Fatalf("got %v (%v), want 502 first", rs, err)
		}
		if len(rs) == 2 && (rs[1].Status != 403 || rs[1].Reason != "hooks") {
			t.Errorf("pipelined hooks: got %d %q", rs[1].Status, rs[1].Reason)
		}
		if n := c.Count() - before; n != 1 {
			t.Errorf("console saw %d requests, want 1", n)
		}
	}
}

// HTTP/1.0 keep-alive: every request on the connection is judged.
func TestHTTP10KeepAlive_S3(t *testing.T) {
	d := startTestDoor(t)
	first := strings.Replace(doortest.ServeReq("GET", "/c/alpha/", "Connection: keep-alive"), "HTTP/1.1", "HTTP/1.0", 1)
	second := strings.Replace(doortest.ServeReq("GET", "/c/alpha/", "X-Phase-Console-Fleet-Login: mallory"), "HTTP/1.1", "HTTP/1.0", 1)
	before := d.Alpha.Count()
	rs, _ := d.RawUpTo(first+second, 2, 3*time.Second)
	if len(rs) == 2 && (rs[1].Status != 400 || rs[1].Reason != "assertion-sent") {
		t.Errorf("second request: %d %q", rs[1].Status, rs[1].Reason)
	}
	if n := d.Alpha.Count() - before; n > 1 {
		t.Errorf("console saw %d requests", n)
	}
	for _, s := range d.Alpha.Since(before) {
		if got := rawhttp.FoldedValues(s.Header, "X-Phase-Console-Fleet-Login"); len(got) != 1 || got[0] != doortest.Alice {
			t.Errorf("console saw logins %q", got)
		}
	}
}

// S6: the caller's Connection line cannot delete what the hop sets.
func TestConnectionCannotDeleteHopHeaders_S6(t *testing.T) {
	d := startTestDoor(t)
	before := d.Alpha.Count()
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha/x",
		"Connection: keep-alive, X-Forwarded-For, X-Forwarded-Prefix, X-Forwarded-Host, X-Forwarded-Proto, Host"))
	s := d.WantForwarded(t, r, before, doortest.Alice, "/x")
	want := map[string]string{"X-Forwarded-For": doortest.AliceIP, "X-Forwarded-Prefix": "/c/alpha", "X-Forwarded-Host": doortest.TSName, "X-Forwarded-Proto": "https"}
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
	before := d.Alpha.Count()
	s := d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/x", extra...)), before, doortest.Alice, "/x")
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
	gone := echoconsole.New(t)
	d.setConsole("gone", gone.Addr())
	gone.Close()
	const declared = "Content-Length: 1000"
	rows := []struct {
		name   string
		door   *testDoor
		req    string
		status int
		reason string
	}{
		{"S7 hooks", d, doortest.ServeReq("POST", "/c/alpha/hooks", declared), http.StatusForbidden, "hooks"},
		{"S7 hooks, chunked", d, doortest.ServeReq("POST", "/c/alpha/hooks", "Transfer-Encoding: chunked"), http.StatusForbidden, "hooks"},
		{"S8 unknown console", d, doortest.ServeReq("POST", "/c/nosuch/x", declared), http.StatusNotFound, "unknown-console"},
		{"S12 cross-origin", d, doortest.ServeReq("POST", "/c/alpha/x", declared, "Origin: https://evil.example"), http.StatusForbidden, "cross-origin"},
		{"method", d, doortest.ServeReq("TRACE", "/c/alpha/x", declared), http.StatusMethodNotAllowed, "method"},
		{"no such page", d, doortest.ServeReq("POST", "/fleet/v1/consoles", declared), http.StatusNotFound, "not-found"},
		{"S7 redirect", d, doortest.ServeReq("POST", "/c/alpha", declared), http.StatusPermanentRedirect, ""},
		{"page", pages, doortest.ServeReq("POST", "/fleet/v1/consoles", declared), http.StatusOK, ""},
		{"S8 console down", d, doortest.ServeReq("POST", "/c/gone/x", declared), http.StatusBadGateway, "console-down"},
		// Closed already, but net/http still read the body when it closed it, with no deadline.
		{"S3 assertion-sent", d, doortest.ServeReq("POST", "/c/alpha/x", declared, "X-Phase-Console-Fleet: x"), http.StatusBadRequest, "assertion-sent"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			conn := row.door.Dial() // its deadline guards against the hang
			defer conn.Close()
			if _, err := io.WriteString(conn, rawhttp.CRLF(row.req)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			method, _ := rawhttp.RequestLine(row.req)
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
			doortest.WantClosed(t, conn, br, "the connection of a body never sent")
			if n := d.Alpha.Count(); n != before {
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
		rs := d.RawMany(doortest.ServeReq("POST", "/c/alpha/hooks", extra...)+doortest.ServeReq("GET", "/c/alpha/x"), 2)
		if rs[0].Status != http.StatusForbidden || rs[0].Reason != "hooks" || rs[1].Status != http.StatusOK {
			t.Errorf("%q: got %d %q then %d, want 403 hooks then 200 on the same connection", extra,
				rs[0].Status, rs[0].Reason, rs[1].Status)
		}
	}
}

// lineConsole is a console that records the request line of each request exactly as it came
// (what a console's own HTTP/1 parser, in any language, has to read) and answers 200.
func lineConsole(t *testing.T) (addr string, lines <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				ch <- strings.TrimRight(line, "\r\n")
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// h2Get sends one GET for path over a new HTTP/2 connection to addr, its :path written as given
// (net/http's client would escape it), and returns the answer's :status and X-Fleet-Reason ("RST"
// for a reset stream).
func h2Get(t *testing.T, addr, path string) (status, reason string) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(doortest.WaitLimit))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "127.0.0.1"}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			fields, _ := hpack.NewDecoder(4096, nil).DecodeFull(f.HeaderBlockFragment())
			for _, hf := range fields {
				switch hf.Name {
				case ":status":
					status = hf.Value
				case "x-fleet-reason":
					reason = hf.Value
				}
			}
			return status, reason
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "RST", ""
			}
		}
	}
}

// TestHTTP2TargetWithSpaceRefused_S7: over HTTP/2 (the direct-reach door speaks it), a paired
// phone can send a :path whose query holds a space — net/http's HTTP/2 server and
// url.ParseRequestURI take it, where the HTTP/1 door's parser refuses such a request line
// outright. Were rewrite to copy In.URL.RawQuery as it came, net/http's Transport would write it
// as it was, and the console would be sent "GET /x?a /hooks HTTP/1.1": a request line that is
// not HTTP, whose target each console's parser reads its own way (one that takes the token before
// the version reads "/hooks"). The target forwarded is the target judged, in a request line every
// parser splits alike: the Door refuses a target with a space (or a control byte) anywhere, 400
// bad-path, before anything is forwarded; an escaped space still goes through as it came.
func TestHTTP2TargetWithSpaceRefused_S7(t *testing.T) {
	d := startTestDoor(t)
	addr, lines := lineConsole(t)
	d.setConsole("line", addr)
	ts := httptest.NewUnstartedServer(d.door) // the shared Door behind net/http's HTTP/2, as on the reach door
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	addr = ts.Listener.Addr().String()

	for _, path := range []string{
		"/c/line/x?a /hooks",
		"/c/line/x? ",
		"/c/line/x?a=1 HTTP/1.0",
		"/c/line/x /hooks", // the path's own judgement refused this one already
		"/?a b",            // a door's own page: refused alike
	} {
		status, reason := h2Get(t, addr, path)
		if status != "400" || reason != ReasonBadPath {
			t.Errorf(":path %q: answered %s %q, want 400 bad-path", path, status, reason)
		}
		select {
		case line := <-lines:
			t.Errorf(":path %q: the console was sent the request line %q", path, line)
		default:
		}
	}
	// An escaped space is a query like any other: forwarded as it came.
	if status, reason := h2Get(t, addr, "/c/line/x?a%20/hooks"); status != "200" {
		t.Errorf("an escaped space: answered %s %q, want the console's 200", status, reason)
	}
	select {
	case line := <-lines:
		if line != "GET /x?a%20/hooks HTTP/1.1" {
			t.Errorf("the console was sent %q", line)
		}
	case <-time.After(doortest.WaitLimit):
		t.Error("the escaped query never reached the console")
	}
}

// switchingConsole answers every request, once its head and body are read, with a 101 to
// WebSocket, asked for or not, and reports for each connection how it ended: the error of its
// next read (nil: it was still open after hold).
func switchingConsole(t *testing.T, hold time.Duration) (addr string, ended <-chan error) {
	ch := make(chan error, 4)
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		io.Copy(io.Discard, r.Body)
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(hold))
		_, err := c.Read(make([]byte, 1))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil
		}
		ch <- err
		return false
	})
	return rc.Addr(), ch
}

// TestUnaskedSwitchClosesConsoleConnection_S9: a console that answers 101 to a request that
// asked for no switch gets 502 (TestBadSwitchIsNotSpliced_S9) and its connection closed at once,
// on the net/http path too (a body, the direct-reach door's HTTP/2): ReverseProxy's own refusal
// of the switch leaves the connection that the Transport handed over with the 101 open until the
// garbage collector finds it — a descriptor, and a console left waiting, per such answer. (The
// fast loop closes it itself: proxy/fastloop.)
func TestUnaskedSwitchClosesConsoleConnection_S9(t *testing.T) {
	d := startTestDoor(t)
	addr, ended := switchingConsole(t, 3*time.Second)
	d.setConsole("switcher", addr)
	ts := httptest.NewUnstartedServer(d.door) // the shared Door behind net/http's HTTP/2, as on the reach door
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	h2 := ts.Client()

	for _, row := range []struct {
		name string
		ask  func() (int, error)
	}{
		{"S9 a POST over HTTP/1 (net/http)", func() (int, error) {
			r := d.RawAs(doortest.ServeReq("POST", "/c/switcher/form", "Content-Length: 2") + "hi")
			return r.Status, nil
		}},
		{"S9 a GET over HTTP/2 (net/http)", func() (int, error) {
			resp, err := h2.Get(ts.URL + "/c/switcher/page")
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			if resp.ProtoMajor != 2 {
				t.Errorf("asked over HTTP/%d, want 2", resp.ProtoMajor)
			}
			return resp.StatusCode, nil
		}},
	} {
		t.Run(row.name, func(t *testing.T) {
			status, err := row.ask()
			if err != nil || status != http.StatusBadGateway {
				t.Errorf("answered %d (%v), want 502", status, err)
			}
			select {
			case err := <-ended:
				if err == nil {
					t.Error("the console's connection was still open 3 s after its 101 was refused")
				}
			case <-time.After(doortest.WaitLimit):
				t.Fatal("the console never answered")
			}
		})
	}
}
