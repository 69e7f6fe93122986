package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// TestAssertionHeadersRefused_S3: every spelling of either assertion header is refused before
// anything is forwarded.
func TestAssertionHeadersRefused_S3(t *testing.T) {
	d := startTestDoor(t)
	rows := []struct {
		name  string
		extra []string
	}{
		{"S3 canonical", []string{"X-Phase-Console-Fleet: x"}},
		{"S3 login header", []string{"X-Phase-Console-Fleet-Login: alice@example.com"}},
		{"S3 empty value", []string{"X-Phase-Console-Fleet:"}},
		{"S3 lower case", []string{"x-phase-console-fleet: x"}},
		{"S3 upper case", []string{"X-PHASE-CONSOLE-FLEET-LOGIN: x"}},
		{"S3 underscores", []string{"X_Phase_Console_Fleet: x"}},
		{"S3 underscores login", []string{"x_phase_console_fleet_login: mallory"}},
		{"S3 dots", []string{"X.Phase.Console.Fleet: x"}},
		{"S3 mixed token chars", []string{"X-Phase_Console.Fleet~Login: x"}},
		{"S3 duplicated", []string{"X-Phase-Console-Fleet: a", "X-Phase-Console-Fleet: b"}},
		{"S3 named in Connection", []string{"Connection: X-Phase-Console-Fleet"}},
		{"S3 named in Connection, spelled", []string{"Connection: keep-alive, x_phase_console_fleet_login"}},
		{"S3 declared in Trailer", []string{"Trailer: X-Phase-Console-Fleet", "Transfer-Encoding: chunked"}},
		{"S3 on a WebSocket upgrade", []string{"Connection: Upgrade", "Upgrade: websocket", "X-Phase-Console-Fleet-Login: x"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			req := doortest.ServeReq("GET", "/c/alpha/", row.extra...)
			if strings.Contains(req, "chunked") {
				req += "0\r\nX-Phase-Console-Fleet: x\r\n\r\n"
			}
			r := d.Raw(req)
			d.WantRefused(t, r, before, http.StatusBadRequest, "assertion-sent")
		})
	}
	// S11: one log line per refusal, with the reason word, and never the token.
	if got := len(d.Logs.Events("fleet.rejected")); got != len(rows) {
		t.Errorf("%d fleet.rejected lines for %d refusals", got, len(rows))
	}
	if strings.Contains(d.Logs.String(), d.Token) {
		t.Error("the fleet token appears in the log")
	}
}

// TestRequestTrailersNeverForwarded_S3: trailers a caller sends never reach the console.
func TestRequestTrailersNeverForwarded_S3(t *testing.T) {
	d := startTestDoor(t)
	before := d.Alpha.Count()
	req := doortest.ServeReq("POST", "/c/alpha/upload", "Transfer-Encoding: chunked", "Trailer: X-Checksum") +
		"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n"
	s := d.WantForwarded(t, d.Raw(req), before, doortest.Alice, "/upload")
	if s.Body != "hello" {
		t.Errorf("body %q", s.Body)
	}
	if len(s.Trailer) != 0 || s.Header.Get("X-Checksum") != "" {
		t.Errorf("console saw trailers %v", s.Trailer)
	}
}

// TestIdentityHeadersStripped_S4: every identity header family the caller wrote is removed, under
// any spelling, and the hop's own X-Forwarded-* are what the console sees.
func TestIdentityHeadersStripped_S4(t *testing.T) {
	d := startTestDoor(t)
	rows := []struct {
		name   string
		header string
	}{
		{"S4 Tailscale-User-Name", "Tailscale-User-Name: Mallory"},
		{"S4 Tailscale-User-Profile-Pic", "Tailscale-User-Profile-Pic: http://x"},
		{"S4 Tailscale_User_Login spelled", "Tailscale_User_Login: mallory@evil.example"},
		{"S4 tailscale.app.capabilities spelled", "tailscale.app.capabilities: {}"},
		{"S4 Forwarded", "Forwarded: for=1.2.3.4;host=evil"},
		{"S4 X-Forwarded-User", "X-Forwarded-User: mallory"},
		{"S4 X-Forwarded-Email", "X-Forwarded-Email: mallory@evil.example"},
		{"S4 X_Forwarded_Host spelled", "X_Forwarded_Host: evil.example"},
		{"S4 X-Real-Ip", "X-Real-Ip: 1.2.3.4"},
		{"S4 X_Real_IP spelled", "X_Real_IP: 1.2.3.4"},
		{"S4 Remote-User", "Remote-User: mallory"},
		{"S4 X-Remote-User", "X-Remote-User: mallory"},
		{"S4 X-Webauth-User", "X-Webauth-User: mallory"},
		{"S4 X-Auth-Request-Email", "X-Auth-Request-Email: mallory@evil.example"},
		{"S4 X-Pomerium-Claim-Email", "X-Pomerium-Claim-Email: mallory@evil.example"},
		{"S4 Cf-Access-Authenticated-User-Email", "Cf-Access-Authenticated-User-Email: mallory@evil.example"},
		{"S4 Cf-Access-Jwt-Assertion", "Cf-Access-Jwt-Assertion: eyJ"},
		{"S4 Teleport-Jwt-Assertion", "Teleport-Jwt-Assertion: eyJ"},
		{"S4 Authorization", "Authorization: Bearer stolen"},
		{"S4 Proxy-Authorization", "Proxy-Authorization: Basic bWFsbG9yeQ=="},
		{"S4 Connection names X-Forwarded-For", "Connection: X-Forwarded-For"},
		{"S4 Connection names X-Forwarded-Prefix", "Connection: X-Forwarded-Prefix, X-Forwarded-Host"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			s := d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/x", row.header)), before, doortest.Alice, "/x")
			name, _, _ := strings.Cut(row.header, ":")
			if !strings.HasPrefix(name, "Connection") && !strings.HasPrefix(rawhttp.Fold(name), "x-forwarded-") && rawhttp.HasFolded(s.Header, name) {
				t.Errorf("console saw %s", name)
			}
			for _, fam := range []string{"Tailscale-User-Login", "Tailscale-User-Name", "Forwarded", "X-Real-Ip",
				"Remote-User", "Authorization", "Proxy-Authorization", "X-Forwarded-User", "X-Forwarded-Email"} {
				if rawhttp.HasFolded(s.Header, fam) {
					t.Errorf("console saw %s", fam)
				}
			}
			wantHop := map[string]string{
				"X-Forwarded-For":    doortest.AliceIP,
				"X-Forwarded-Host":   doortest.TSName,
				"X-Forwarded-Proto":  "https",
				"X-Forwarded-Prefix": "/c/alpha",
			}
			for k, v := range wantHop {
				if got := rawhttp.FoldedValues(s.Header, k); len(got) != 1 || got[0] != v {
					t.Errorf("console saw %s %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestPipelinedRequestsJudgedEach_S3: a second request on the same connection is judged on its own.
func TestPipelinedRequestsJudgedEach_S3(t *testing.T) {
	d := startTestDoor(t)
	before := d.Alpha.Count()
	// (A 400 closes the connection, so it comes last.)
	rs := d.RawMany(doortest.ServeReq("GET", "/c/alpha/one")+doortest.ServeReq("GET", "/c/alpha/hooks/x")+doortest.ServeReq("GET", "/c/alpha/two", "X_Phase_Console_Fleet_Login: mallory"), 3)
	if rs[0].Status != 200 || rs[1].Status != 403 || rs[1].Reason != "hooks" || rs[2].Status != 400 || rs[2].Reason != "assertion-sent" {
		t.Fatalf("got %d, %d %s, %d %s", rs[0].Status, rs[1].Status, rs[1].Reason, rs[2].Status, rs[2].Reason)
	}
	if n := d.Alpha.Count() - before; n != 1 {
		t.Fatalf("console saw %d requests, want only the first", n)
	}
	if s, _ := d.Alpha.Last(); s.Path != "/one" {
		t.Fatalf("console saw %q", s.Path)
	}
}

// TestAssertionAndPrefix_S6: the hop sets both assertion headers, strips /c/<id>, sets Host to the
// console's own address, and keeps the query.
func TestAssertionAndPrefix_S6(t *testing.T) {
	d := startTestDoor(t)
	before := d.Alpha.Count()
	s := d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/a/b/?q=1&r=%2F")), before, doortest.Alice, "/a/b/")
	if s.RequestURI != "/a/b/?q=1&r=%2F" {
		t.Errorf("console saw request-target %q", s.RequestURI)
	}
	// The root of a console is /c/<id>/; /c/<id> redirects there.
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha"))
	if r.Status != http.StatusPermanentRedirect || r.Header.Get("Location") != "/c/alpha/" {
		t.Errorf("/c/alpha: %d Location %q", r.Status, r.Header.Get("Location"))
	}
}

// hintsConsole answers every request, after reading its body, with a 103 Early Hints that carries
// what ScrubConsoleAnswer keeps from a console's answers (fleet's own cookie, the origin-wide
// headers), then 200.
func hintsConsole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Link", "</c/hints/app.css>; rel=preload; as=style")
		h.Set("Set-Cookie", FleetCookiePrefix+"device=chosen-by-the-console; Path=/; Secure; HttpOnly; SameSite=Strict")
		h.Set("Clear-Site-Data", `"cookies"`)
		h.Set("Service-Worker-Allowed", "/")
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestConsoleEarlyHintsScrubbed_R9: no console sets fleet's own cookies nor speaks for the whole
// origin (R9: ScrubConsoleAnswer) — in an informational answer either, on each of the hop's three
// paths. The fast loop scrubs a 103's head (package proxy/fastloop, writeAnswerHead); on the
// net/http path — any request with a body, every upgrade, and the whole direct-reach door, where
// fleet's cookie lives — httputil.ReverseProxy passes a 103 on from its own Got1xxResponse hook,
// which ModifyResponse never sees. Unscrubbed, there (and in upgradeTransport, which calls that
// hook with the console's header as it came) the console's Set-Cookie for __Host-fleet-…,
// Clear-Site-Data and Service-Worker-Allowed would reach the caller; so the hop's Transport
// (hintsScrubbed) and upgradeTransport scrub a 1xx's header before that hook copies it.
func TestConsoleEarlyHintsScrubbed_R9(t *testing.T) {
	d := startTestDoor(t)
	d.setConsole("hints", hintsConsole(t))
	for _, row := range []struct{ name, req string }{
		{"R9 103 to a GET (fast loop)", doortest.ServeReq("GET", "/c/hints/page")},
		{"R9 103 to a POST (net/http)", doortest.ServeReq("POST", "/c/hints/form", "Content-Length: 2") + "hi"},
		{"R9 103 to a WebSocket upgrade (upgradeTransport)", doortest.ServeReq("GET", "/c/hints/ws",
			"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey)},
	} {
		t.Run(row.name, func(t *testing.T) {
			conn := d.Dial()
			defer conn.Close()
			if _, err := io.WriteString(conn, rawhttp.CRLF(row.req)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			hints, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if hints.StatusCode != http.StatusEarlyHints {
				t.Fatalf("first answer %d, want the console's 103", hints.StatusCode)
			}
			if hints.Header.Get("Link") == "" {
				t.Error("the 103's Link was not passed on")
			}
			for _, name := range []string{"Set-Cookie", "Clear-Site-Data", "Service-Worker-Allowed"} {
				if v := hints.Header.Values(name); len(v) != 0 {
					t.Errorf("the console's 103 reached the caller with %s: %q", name, v)
				}
			}
			final, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(final.Body)
			if final.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Errorf("final answer %d %q", final.StatusCode, body)
			}
		})
	}
}
