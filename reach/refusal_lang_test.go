package reach

import (
	"net/http"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/pairing"
)

// TestRefusalsInTheCallersLanguage_U5: the direct-reach door's refusals, as raw bytes over TLS
// to a real listener — without Accept (a script), and with a browser's Accept — answer JSON
// {"error","detail"} to the first and the refusal page to the second, with the same status and
// X-Fleet-Reason; nothing is forwarded.
func TestRefusalsInTheCallersLanguage_U5(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	rows := []struct {
		name, method, path string
		extra              []string
		status             int
		reason             string
	}{
		{"U5 reach-settings", "GET", "/fleet/v1/reach", []string{cookie}, 403, "reach-settings"},
		{"U5 not-found", "GET", "/nowhere", []string{cookie}, 404, "not-found"},
		{"U5 unknown-console", "GET", "/c/nobody/", []string{cookie}, 404, "unknown-console"},
		{"U5 bad-path", "GET", "/c/alpha/a%2Fb", []string{cookie}, 400, "bad-path"},
		{"U5 hooks", "GET", "/c/alpha/hooks", []string{cookie}, 403, "hooks"},
		{"U5 assertion-sent", "GET", "/c/alpha/", []string{cookie, "X-Phase-Console-Fleet-Login: mallory"}, 400, "assertion-sent"},
		{"U5 cross-origin", "GET", "/c/alpha/", []string{cookie, "Origin: https://evil.example"}, 403, "cross-origin"},
	}
	for _, row := range rows {
		doortest.InBothLanguages(t, row.name, row.extra, func(t *testing.T, extra []string, html bool) {
			before := d.Alpha.Count()
			r := d.RawAs(d.req(row.method, row.path, extra...))
			doortest.WantRefusalIn(t, r, row.status, row.reason, html)
			if d.Alpha.Count() != before {
				t.Error("the console saw the request")
			}
		})
	}
	t.Run("U5 host", func(t *testing.T) {
		for _, html := range []bool{false, true} {
			extra := []string{cookie}
			if html {
				extra = append(extra, doortest.BrowserAccept)
			}
			doortest.WantRefusalIn(t, d.RawAs(reqHost("GET", "/c/alpha/", "evil.example", extra...)), http.StatusMisdirectedRequest, "host", html)
		}
	})
}

// TestStylesheetForAnyone_R7_U1: fleet's one stylesheet is served at /fleet.css to any caller —
// an unpaired one too, as an asset of the pairing page (R7) — as text/css, not to be sniffed,
// and a POST of it is not served (an unpaired caller is sent to /pair, R7).
func TestStylesheetForAnyone_R7_U1(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	for _, row := range []struct {
		name  string
		extra []string
	}{{"R7 unpaired", nil}, {"U1 a paired device", []string{cookie}}, {"R10 an unknown cookie", []string{"Cookie: " + pairing.CookieName + "=nope"}}} {
		r := d.RawAs(d.req("GET", look.StylePath, row.extra...))
		if r.Status != 200 || r.Header.Get("Content-Type") != "text/css; charset=utf-8" ||
			r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Body != string(look.Stylesheet) {
			t.Errorf("%s: %d %q %q", row.name, r.Status, r.Header.Get("Content-Type"), r.Header.Get("X-Content-Type-Options"))
		}
	}
	if r := d.RawAs(d.req("POST", look.StylePath, "Content-Length: 0")); r.Status != http.StatusSeeOther || r.Header.Get("Location") != PairPath {
		t.Errorf("R7 POST %s unpaired: %d %q, want 303 to %s", look.StylePath, r.Status, r.Header.Get("Location"), PairPath)
	}
}
