package supervisor

import (
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
)

// TestHostRefused_S10: a foreign Host is 421 host before the supervisor's own pages judge
// anything: the index, and the API even with the bearer (every other Host form is package
// tailnet's).
func TestHostRefused_S10(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name string
		req  string
	}{
		{"S10 on the index", doortest.ServeReqHost("GET", "/", "evil.example")},
		{"S10 on the API with the bearer", "GET /fleet/v1/consoles HTTP/1.1\nHost: evil.example\n" + d.bearer() + "\n\n"},
		{"S10 on the API, rebinding to the door's port", "POST /fleet/v1/consoles HTTP/1.1\nHost: evil.example:" + strings.Split(d.Addr, ":")[1] +
			"\n" + d.bearer() + "\nContent-Length: 2\n\n{}"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, http.StatusMisdirectedRequest, "host")
		})
	}
}

// TestLoopbackHostNeedsNoLocalAPI_S10: a loopback Host is admitted without asking tailscaled, so
// consoles can register while tailscaled is down; the tailnet name cannot be, and is refused.
func TestLoopbackHostNeedsNoLocalAPI_S10(t *testing.T) {
	d := startDoor(t)
	d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.Down = true })
	if r := register(d, "beta", "127.0.0.1:9001"); r.Status != http.StatusCreated {
		t.Fatalf("register with tailscaled down: %d %q %q", r.Status, r.Reason, r.Body)
	}
	before := d.Alpha.Count()
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha/x"))
	if r.Status < 400 || d.Alpha.Count() != before {
		t.Fatalf("tailnet Host with tailscaled down: %d %q, console saw %d", r.Status, r.Reason, d.Alpha.Count()-before)
	}
}

// TestCrossOriginRefused_S12: a request whose Origin is present and is not its own origin
// (X-Forwarded-Proto's scheme + Host) is 403 cross-origin, for every method, upgrades, the index
// and the API (even with the bearer).
func TestCrossOriginRefused_S12(t *testing.T) {
	d := startDoor(t)
	ws := []string{"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", wsKey}
	rows := []struct {
		name string
		req  string
	}{
		{"S12 https://evil.example", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://evil.example")},
		{"S12 Origin null", doortest.ServeReq("GET", "/c/alpha/x", "Origin: null")},
		{"S12 empty Origin", doortest.ServeReq("GET", "/c/alpha/x", "Origin:")},
		{"S12 http scheme when Serve says https", doortest.ServeReq("GET", "/c/alpha/x", "Origin: http://"+doortest.TSName)},
		{"S12 other port", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://"+doortest.TSName+":8443")},
		{"S12 name as a prefix", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://"+doortest.TSName+".evil.example")},
		{"S12 subdomain", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://evil."+doortest.TSName)},
		{"S12 with a path", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://"+doortest.TSName+"/evil")},
		{"S12 with userinfo", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://evil@"+doortest.TSName)},
		{"S12 a loopback origin", doortest.ServeReq("GET", "/c/alpha/x", "Origin: http://localhost:3000")},
		{"S12 two Origin lines", doortest.ServeReq("GET", "/c/alpha/x", "Origin: https://"+doortest.TSName, "Origin: https://evil.example")},
		{"S12 POST", doortest.ServeReq("POST", "/c/alpha/x", "Origin: https://evil.example", "Content-Type: text/plain", "Content-Length: 2") + "hi"},
		{"S12 PUT", doortest.ServeReq("PUT", "/c/alpha/x", "Origin: https://evil.example", "Content-Length: 0")},
		{"S12 DELETE", doortest.ServeReq("DELETE", "/c/alpha/x", "Origin: https://evil.example")},
		{"S12 PATCH", doortest.ServeReq("PATCH", "/c/alpha/x", "Origin: https://evil.example", "Content-Length: 0")},
		{"S12 OPTIONS", doortest.ServeReq("OPTIONS", "/c/alpha/x", "Origin: https://evil.example", "Access-Control-Request-Method: POST")},
		{"S12 WebSocket upgrade", doortest.ServeReq("GET", "/c/alpha/ws", append(ws, "Origin: https://evil.example")...)},
		{"S12 WebSocket upgrade Origin null", doortest.ServeReq("GET", "/c/alpha/ws", append(ws, "Origin: null")...)},
		{"S12 on the index", doortest.ServeReq("GET", "/", "Origin: https://evil.example")},
		{"S12 POST to the API with the bearer", d.localReq("POST", "/fleet/v1/consoles", `{"id":"mallory","addr":"127.0.0.1:9009"}`,
			d.bearer(), "Origin: https://evil.example")},
		{"S12 DELETE to the API with the bearer, local origin", d.localReq("DELETE", "/fleet/v1/consoles/alpha", "",
			d.bearer(), "Origin: http://localhost:3000")},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, http.StatusForbidden, "cross-origin")
		})
	}
	if _, ok := d.srv.registry.Get("mallory"); ok {
		t.Error("a cross-origin POST registered a console")
	}
	if _, ok := d.srv.registry.Get("alpha"); !ok {
		t.Error("a cross-origin DELETE removed a console")
	}
}

// TestSameOriginForwarded_S12: the request's own origin, or no Origin at all, is judged as usual.
func TestSameOriginForwarded_S12(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name  string
		extra []string
	}{
		{"S12 no Origin", nil},
		{"S12 same origin", []string{"Origin: https://" + doortest.TSName}},
		{"S12 same origin, other case", []string{"Origin: HTTPS://SUP.tail1234.ts.net"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/x", row.extra...)), before, doortest.Alice, "/x")
		})
	}
	t.Run("S12 same-origin POST", func(t *testing.T) {
		before := d.Alpha.Count()
		s := d.WantForwarded(t, d.Raw(doortest.ServeReq("POST", "/c/alpha/x", "Origin: https://"+doortest.TSName, "Content-Length: 2")+"hi"), before, doortest.Alice, "/x")
		if s.Body != "hi" {
			t.Errorf("body %q", s.Body)
		}
	})
	t.Run("S12 same-origin WebSocket upgrade", func(t *testing.T) {
		conn, _, resp := d.Open(doortest.ServeReq("GET", "/c/alpha/ws", "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", wsKey, "Origin: https://"+doortest.TSName))
		defer conn.Close()
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
		}
	})
	t.Run("S12 local API from its own origin", func(t *testing.T) {
		r := d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "Origin: http://"+d.Addr))
		if r.Status != http.StatusOK {
			t.Fatalf("got %d %q", r.Status, r.Reason)
		}
	})
}

// TestRefusalsLoggedWithoutSecrets_S11: every refusal is one fleet.rejected JSON line with the
// reason, method, path (never the query) and peer; the fleet token sent along in a refused
// request — as a bearer, in the query, in a cookie, as an assertion — is in no log line and no
// page.
func TestRefusalsLoggedWithoutSecrets_S11(t *testing.T) {
	d := startDoor(t)
	tok := d.Token
	secret := []string{"Authorization: Bearer " + tok, "Cookie: fleet=" + tok}
	rows := []struct {
		name   string
		req    string
		status int
		reason string
	}{
		{"S11 hooks", doortest.ServeReq("GET", "/c/alpha/hooks?token="+tok, secret...), 403, "hooks"},
		{"S11 bad path", doortest.ServeReq("GET", "/c/alpha/a%2Fb?token="+tok, secret...), 400, "bad-path"},
		{"S11 unknown console", doortest.ServeReq("GET", "/c/nobody/x?token="+tok, secret...), 404, "unknown-console"},
		{"S11 host", doortest.ServeReqHost("GET", "/c/alpha/x?token="+tok, "evil.example", secret...), 421, "host"},
		{"S11 token as an assertion", doortest.ServeReq("GET", "/c/alpha/x?token="+tok, "X-Phase-Console-Fleet: "+tok), 400, "assertion-sent"},
		{"S11 cross-origin", doortest.ServeReq("POST", "/c/alpha/x?token="+tok, append(secret, "Origin: https://evil.example", "Content-Length: 0")...), 403, "cross-origin"},
		{"S11 bad upgrade", doortest.ServeReq("GET", "/c/alpha/x?token="+tok, append(secret, "Connection: Upgrade", "Upgrade: h2c")...), 400, "bad-upgrade"},
		{"S11 unverified", "GET /c/alpha/x?token=" + tok + " HTTP/1.1\nHost: 127.0.0.1\n" + strings.Join(secret, "\n") + "\n\n", 401, "unverified"},
		{"S11 local-only", doortest.ServeReq("GET", "/fleet/v1/consoles?token="+tok, secret...), 403, "local-only"},
		{"S11 bearer in the query only", d.localReq("GET", "/fleet/v1/consoles?token="+tok, ""), 401, "bearer"},
		{"S11 near-miss bearer", d.localReq("GET", "/fleet/v1/consoles?token="+tok, "", "Authorization: Bearer "+tok+"x"), 401, "bearer"},
		{"S11 bad registration", d.localReq("POST", "/fleet/v1/consoles?token="+tok, `{"id":"x","addr":"10.0.0.1:80"}`, "Authorization: Bearer "+tok), 400, "bad-registration"},
		{"S11 not found", d.localReq("GET", "/nowhere?token="+tok, "", secret...), 404, "not-found"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := d.WantRejected(t, row.req, row.status, row.reason)
			if strings.Contains(r.Body, tok) {
				t.Errorf("the error page shows the token: %q", r.Body)
			}
			for k, vs := range r.Header {
				for _, v := range vs {
					if strings.Contains(v, tok) {
						t.Errorf("response header %s shows the token", k)
					}
				}
			}
		})
	}
	t.Run("S11 console down", func(t *testing.T) {
		beta := d.addConsole(t, "beta")
		beta.Close()
		r := d.Raw(doortest.ServeReq("GET", "/c/beta/x?token="+tok, secret...))
		if r.Status != http.StatusBadGateway || strings.Contains(r.Body, tok) {
			t.Errorf("got %d %q", r.Status, r.Body)
		}
	})
	if got := len(d.Logs.Events("fleet.rejected")); got != len(rows) {
		t.Errorf("%d fleet.rejected lines for %d refusals", got, len(rows))
	}
	if strings.Contains(d.Logs.String(), tok) {
		t.Error("the fleet token appears in the log")
	}
	for _, l := range d.Logs.Events("fleet.rejected") {
		if p, _ := l["path"].(string); strings.Contains(p, "?") {
			t.Errorf("a logged path keeps its query: %q", p)
		}
	}
}

// TestOwnPagesRefuseFraming_S12: a tailnet identity is ambient (S12), and no SameSite cookie
// keeps it out of another site's frame: a cross-site <iframe> of the index is a request without
// Origin, answered with the operator's login. So every page the supervisor writes itself — the
// index, its JSON, a refusal, the 502 console-down page, the API's JSON and its refusals — says,
// as the pairing page does, that no site may frame it (X-Frame-Options DENY, CSP frame-ancestors
// 'none'), that its type is not to be sniffed, that it loads nothing and runs no script
// (default-src 'none') but fleet's own stylesheet (style-src 'self', SPEC U1), and sends its
// Referer to itself only. No inline style is allowed, never by 'unsafe-inline'.
func TestOwnPagesRefuseFraming_S12(t *testing.T) {
	d := startDoor(t)
	// What a browser sends when evil.example frames https://<machine>.ts.net/.
	framed := []string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Dest: iframe", "Sec-Fetch-Mode: navigate"}
	index := d.Raw(doortest.ServeReq("GET", "/", framed...))
	if index.Status != 200 || !strings.Contains(index.Body, "Signed in as <b>"+doortest.Alice+"</b>") {
		t.Fatalf("the index: %d %q", index.Status, index.Body)
	}
	wantOwnPageHeaders(t, "the index", index)
	// No inline style nor script: its one stylesheet is fleet's own (SPEC U1), allowed by
	// style-src 'self'.
	if strings.Contains(index.Body, "<style") || strings.Contains(index.Body, "<script") || strings.Contains(index.Body, " style=") {
		t.Errorf("the index should have no <style> element, script nor style attribute: %q", index.Body)
	}
	if !strings.Contains(index.Body, `<link rel="stylesheet" href="/fleet.css">`) {
		t.Errorf("the index does not link fleet's stylesheet: %q", index.Body)
	}

	pages := []struct {
		name string
		r    doortest.Response
	}{
		{"the index as JSON", d.Raw(doortest.ServeReq("GET", "/", append(framed, "Accept: application/json")...))},
		{"a refusal page", d.Raw(doortest.ServeReq("GET", "/c/nobody/", framed...))},
		{"the API's JSON", d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", d.bearer()))},
		{"an API refusal", d.Raw(d.localReq("GET", "/fleet/v1/consoles", "", "Accept: application/json"))},
	}
	beta := d.addConsole(t, "beta")
	beta.Close()
	pages = append(pages, struct {
		name string
		r    doortest.Response
	}{"the console-down page", d.Raw(doortest.ServeReq("GET", "/c/beta/", framed...))})
	for i, want := range []int{200, 404, 200, 401, 502} {
		if pages[i].r.Status != want {
			t.Errorf("%s: %d %q, want %d", pages[i].name, pages[i].r.Status, pages[i].r.Reason, want)
		}
	}
	for _, p := range pages {
		wantOwnPageHeaders(t, p.name, p.r)
		if csp := p.r.Header.Get("Content-Security-Policy"); strings.Count(csp, "style-src") != 1 || !strings.Contains(csp, "style-src 'self';") {
			t.Errorf("%s: a style other than fleet's own stylesheet is allowed: %q", p.name, csp)
		}
	}
}

// wantOwnPageHeaders checks what proxy.SetPageHeaders sends.
func wantOwnPageHeaders(t *testing.T, name string, r doortest.Response) {
	t.Helper()
	h := r.Header
	if got := h.Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("%s: X-Frame-Options %q, want DENY", name, got)
	}
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: Content-Security-Policy %q lacks %s", name, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "script-src") {
		t.Errorf("%s: Content-Security-Policy %q allows an inline style or a script", name, csp)
	}
	if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q, want nosniff", name, got)
	}
	if got := h.Get("Referrer-Policy"); got != "same-origin" {
		t.Errorf("%s: Referrer-Policy %q, want same-origin", name, got)
	}
}
