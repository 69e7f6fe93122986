package pairing

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPairingRefusalsInTheCallersLanguage_U5: the pairing handler's refusals (a foreign origin's
// POST, a missing asset, a wrong method) answer JSON {error, detail} to a script and the refusal
// page to a browser, with the same status and X-Fleet-Reason.
func TestPairingRefusalsInTheCallersLanguage_U5(t *testing.T) {
	e := newPageEnv(t)
	h := NewHandler(HandlerConfig{Dir: e.dir, Register: e.reg, Fingerprint: testFP, Origin: "https://192.168.1.20:7443"})
	for _, row := range []struct {
		name, method, path, origin string
		status                     int
		reason                     string
	}{
		{"U5 cross-origin", "POST", PairPath, "https://evil.example", 403, ReasonOrigin},
		{"U5 not-found", "GET", AssetsPrefix + "nope.js", "", 404, "not-found"},
		{"U5 method", "PUT", PairPath, "", 405, "method"},
	} {
		for _, html := range []bool{false, true} {
			r := httptest.NewRequest(row.method, "https://192.168.1.20:7443"+row.path, nil)
			if row.origin != "" {
				r.Header.Set("Origin", row.origin)
			}
			if html {
				r.Header.Set("Accept", "text/html,*/*;q=0.8")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != row.status || w.Header().Get("X-Fleet-Reason") != row.reason {
				t.Errorf("%s (html %v): %d %q", row.name, html, w.Code, w.Header().Get("X-Fleet-Reason"))
				continue
			}
			ct, b := w.Header().Get("Content-Type"), w.Body.String()
			if html {
				if ct != "text/html; charset=utf-8" || !strings.Contains(b, "<code>"+row.reason+"</code>") || !strings.Contains(b, "What you can do") {
					t.Errorf("%s HTML: %q\n%s", row.name, ct, b)
				}
				continue
			}
			var body struct{ Error, Detail string }
			if ct != "application/json" || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error != row.reason || body.Detail == "" {
				t.Errorf("%s JSON: %q %s", row.name, ct, b)
			}
		}
	}
}
