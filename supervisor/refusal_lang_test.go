package supervisor

import (
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/look"
)

// TestRefusalsInTheCallersLanguage_U5: every refusal the loopback door writes, as raw bytes over
// a real listener — without Accept (a script), and with a browser's Accept — answers JSON
// {"error","detail"} to the first and the refusal page to the second, with the same status and
// X-Fleet-Reason; the registry and metrics endpoints answer JSON to both. Nothing is forwarded.
func TestRefusalsInTheCallersLanguage_U5(t *testing.T) {
	d := startDoor(t)
	beta := d.addConsole(t, "beta")
	beta.Close()
	rows := []struct {
		name, method, path string
		extra              []string
		status             int
		reason             string
	}{
		{"U5 not-found", "GET", "/nowhere", nil, 404, "not-found"},
		{"U5 unknown-console", "GET", "/c/nobody/", nil, 404, "unknown-console"},
		{"U5 bad-path", "GET", "/c/alpha/a%2Fb", nil, 400, "bad-path"},
		{"U5 hooks", "GET", "/c/alpha/hooks", nil, 403, "hooks"},
		{"U5 assertion-sent", "GET", "/c/alpha/", []string{"X-Phase-Console-Fleet-Login: mallory"}, 400, "assertion-sent"},
		{"U5 cross-origin", "GET", "/c/alpha/", []string{"Origin: https://evil.example"}, 403, "cross-origin"},
		{"U5 method", "TRACE", "/c/alpha/", nil, 405, "method"},
		{"U5 console-down", "GET", "/c/beta/", nil, 502, "console-down"},
	}
	for _, row := range rows {
		doortest.InBothLanguages(t, row.name, row.extra, func(t *testing.T, extra []string, html bool) {
			before := d.Alpha.Count()
			r := d.RawAs(doortest.ServeReq(row.method, row.path, extra...))
			doortest.WantRefusalIn(t, r, row.status, row.reason, html)
			if d.Alpha.Count() != before {
				t.Error("the console saw the request")
			}
		})
	}
	t.Run("U5 host", func(t *testing.T) {
		for _, html := range []bool{false, true} {
			var extra []string
			if html {
				extra = []string{doortest.BrowserAccept}
			}
			r := d.RawAs(doortest.ServeReqHost("GET", "/c/alpha/", "evil.example", extra...))
			doortest.WantRefusalIn(t, r, http.StatusMisdirectedRequest, "host", html)
		}
	})
	t.Run("U5 identity-mismatch", func(t *testing.T) {
		for _, html := range []bool{false, true} {
			req := strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.Alice, "mallory@example.com", 1)
			if html {
				req = strings.Replace(req, "\n\n", "\n"+doortest.BrowserAccept+"\n\n", 1)
			}
			doortest.WantRefusalIn(t, d.RawAs(req), http.StatusUnauthorized, "identity-mismatch", html)
		}
	})
	// The registry and metrics endpoints: JSON, whatever the caller prefers.
	api := []struct {
		name, req string
		status    int
		reason    string
	}{
		{"U5 API local-only", d.localReq("GET", "/fleet/v1/consoles", "", d.bearer(), "X-Forwarded-For: 100.64.0.1", doortest.BrowserAccept), 403, "local-only"},
		{"U5 API bearer", d.localReq("GET", "/fleet/v1/consoles", "", doortest.BrowserAccept), 401, "bearer"},
		{"U5 API unknown-console", d.localReq("DELETE", "/fleet/v1/consoles/nope", "", d.bearer(), doortest.BrowserAccept), 404, "unknown-console"},
		{"U5 API bad-registration", d.localReq("POST", "/fleet/v1/consoles", `{"id":"x1"}`, d.bearer(), doortest.BrowserAccept), 400, "bad-registration"},
		{"U5 API method", d.localReq("PUT", "/fleet/v1/consoles", "", d.bearer(), doortest.BrowserAccept), 405, "method"},
		{"U5 API not-found", d.localReq("GET", "/fleet/v1/nothing", "", d.bearer(), doortest.BrowserAccept), 404, "not-found"},
		{"U5 metrics bearer", d.localReq("GET", "/fleet/v1/metrics", "", doortest.BrowserAccept), 401, "bearer"},
	}
	for _, row := range api {
		t.Run(row.name, func(t *testing.T) {
			doortest.WantRefusalIn(t, d.RawAs(row.req), row.status, row.reason, false)
		})
	}
}

// TestStylesheetForAnyone_U1: the loopback door serves fleet's one stylesheet at /fleet.css to
// anyone — a verified caller, and one it could not verify (whose refusal page links to it) — as
// text/css under the pages' own policy; it takes only GET and HEAD.
func TestStylesheetForAnyone_U1(t *testing.T) {
	d := startDoor(t)
	for _, row := range []struct{ name, req string }{
		{"U1 through Serve", doortest.ServeReq("GET", look.StylePath)},
		{"U1 unverified", strings.Replace(doortest.ServeReq("GET", look.StylePath), doortest.Alice, "mallory@example.com", 1)},
	} {
		r := d.RawAs(row.req)
		if r.Status != 200 || r.Header.Get("Content-Type") != "text/css; charset=utf-8" ||
			r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Body != string(look.Stylesheet) {
			t.Errorf("%s: %d %q", row.name, r.Status, r.Header.Get("Content-Type"))
		}
	}
	doortest.WantRefusalIn(t, d.RawAs(doortest.ServeReq("POST", look.StylePath, "Content-Length: 0")), http.StatusMethodNotAllowed, "method", false)
}
