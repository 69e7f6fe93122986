package reach

// What a page of another site can make a phone's browser send (R6b), and a paired device's
// exemption from both counts (R6). Rows carry the Fetch Metadata headers Chromium sends.

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// Fetch Metadata as Chromium sends it for each kind of request.
var (
	crossSiteNoCORS    = []string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors", "Sec-Fetch-Dest: empty"}
	crossSiteCORS      = []string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: cors", "Sec-Fetch-Dest: empty"}
	crossSiteImage     = []string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors", "Sec-Fetch-Dest: image"}
	crossSiteScript    = []string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors", "Sec-Fetch-Dest: script"}
	crossSiteIframe    = []string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: iframe"}
	crossSiteTopLevel  = []string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: document", "Sec-Fetch-User: ?1"}
	sameOriginTopLevel = []string{"Sec-Fetch-Site: same-origin", "Sec-Fetch-Mode: navigate", "Sec-Fetch-Dest: document", "Sec-Fetch-User: ?1"}
)

// pairingForm is a pairing POST's head lines and body, with a code that is not live.
func pairingForm(extra ...string) ([]string, string) {
	body := url.Values{"code": {"BCDF-GHJK"}, "password": {"a guess"}, "name": {"x"}}.Encode()
	return append([]string{"Content-Type: application/x-www-form-urlencoded", "Content-Length: " + strconv.Itoa(len(body))}, extra...), body
}

// TestCrossSiteRefusedUncounted_R6b: a request that a browser marks as another site's, but a
// top-level GET navigation, is 403 cross-origin and never a failure, however often it comes: a
// page the phone visits cannot lock it out before it pairs. A link followed from another site
// still opens the door's pages; a stranger's own failures count as before. A cross-site pairing
// POST — which any page can make a browser send, with fetch and mode no-cors — counted as a
// failure of the phone's own source would let that page lock the phone out.
func TestCrossSiteRefusedUncounted_R6b(t *testing.T) {
	d := startPairingDoor(t)
	evil := "Origin: https://evil.example"
	rows := []struct {
		name, method, target string
		extra                []string
		body                 string
		status               int
		reason               string
		counts               bool
	}{
		{name: "R6b no-cors pairing POST", method: "POST", target: "/pair", extra: append([]string{evil}, crossSiteNoCORS...), status: 403, reason: "cross-origin"},
		{name: "R6b cors pairing POST", method: "POST", target: "/pair", extra: append([]string{evil}, crossSiteCORS...), status: 403, reason: "cross-origin"},
		{name: "R6b a form posted across sites (a navigation, but a POST)", method: "POST", target: "/pair", extra: append([]string{evil}, crossSiteTopLevel...), status: 403, reason: "cross-origin"},
		{name: "R6b an image of a console path", method: "GET", target: "/c/alpha/x", extra: crossSiteImage, status: 403, reason: "cross-origin"},
		{name: "R6b a script of the pairing page's", method: "GET", target: "/pair/assets/pair.js", extra: crossSiteScript, status: 403, reason: "cross-origin"},
		{name: "R6b the pairing page in a frame", method: "GET", target: "/pair", extra: crossSiteIframe, status: 403, reason: "cross-origin"},
		{name: "R6b /ca.crt fetched", method: "GET", target: "/ca.crt", extra: crossSiteCORS, status: 403, reason: "cross-origin"},
		{name: "R6b a top-level HEAD", method: "HEAD", target: "/pair", extra: crossSiteTopLevel, status: 403, reason: "cross-origin"},
		{name: "R6b cross-site in another case", method: "GET", target: "/pair", extra: []string{"Sec-Fetch-Site: Cross-Site", "Sec-Fetch-Mode: no-cors", "Sec-Fetch-Dest: image"}, status: 403, reason: "cross-origin"},
		{name: "R6b cross-site on a second line", method: "GET", target: "/pair", extra: append([]string{"Sec-Fetch-Site: same-origin"}, crossSiteImage...), status: 403, reason: "cross-origin"},
		{name: "R6b a navigation whose mode says two things", method: "GET", target: "/pair", extra: append(crossSiteTopLevel, "Sec-Fetch-Mode: no-cors"), status: 403, reason: "cross-origin"},

		{name: "R6b a link followed from another site: the pairing page", method: "GET", target: "/pair", extra: crossSiteTopLevel, status: 200},
		{name: "R6b a link followed from another site: a console, sent to /pair", method: "GET", target: "/c/alpha/", extra: crossSiteTopLevel, status: 303},
		{name: "R6b S12 a foreign Origin without Fetch Metadata", method: "POST", target: "/pair", extra: []string{evil}, status: 403, reason: "cross-origin"},
		{name: "R6b S12 same-site", method: "POST", target: "/pair", extra: []string{"Origin: https://" + strings.Replace(d.Addr, "127.0.0.1", "localhost", 1), "Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: no-cors", "Sec-Fetch-Dest: empty"}, status: 403, reason: "cross-origin"},
		{name: "R6 a same-origin wrong code counts", method: "POST", target: "/pair", extra: append([]string{"Origin: https://" + d.Addr}, sameOriginTopLevel...), status: 403, reason: "pairing", counts: true},
		{name: "R6 a wrong code without Fetch Metadata counts", method: "POST", target: "/pair", status: 403, reason: "pairing", counts: true},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.clock.Advance(Window)
			before := d.Alpha.Count()
			for i := range 2 * SourceLimit {
				extra, body := row.extra, ""
				if row.method == "POST" {
					extra, body = pairingForm(row.extra...)
				}
				res := d.RawAs(d.req(row.method, row.target, extra...) + body)
				if row.counts && i >= SourceLimit {
					if res.Status != http.StatusTooManyRequests {
						t.Fatalf("request %d: %d %q, want 429: a stranger's own failures count", i+1, res.Status, res.Reason)
					}
					continue
				}
				if res.Status != row.status || res.Reason != row.reason {
					t.Fatalf("request %d: %d %q, want %d %q", i+1, res.Status, res.Reason, row.status, row.reason)
				}
				if want := 0; !row.counts && d.failures("127.0.0.1") != want {
					t.Fatalf("request %d: %d failures counted, want none", i+1, d.failures("127.0.0.1"))
				}
			}
			if after := d.Alpha.Count(); after != before {
				t.Errorf("the console saw %d requests", after-before)
			}
		})
	}
}

// TestCrossSiteOrder_R6b: the cross-site refusal stands in S12's place: a refused Host comes
// first (R5, a failure), and for a paired device so do S3, S7's bad-path and hooks; the device's
// refusals are never failures (R6).
func TestCrossSiteOrder_R6b(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	rows := []struct {
		name, target, host string
		extra              []string
		status             int
		reason             string
		counts             bool
	}{
		{"R5 before R6b: a stranger's Host", "/pair", "evil.example", crossSiteImage, 421, "host", true},
		{"R5 before R6b: a device's Host", "/c/alpha/x", "evil.example", append([]string{cookie}, crossSiteImage...), 421, "host", false},
		{"S3 before R6b", "/c/alpha/x", "", append([]string{cookie, "X-Phase-Console-Fleet: x"}, crossSiteImage...), 400, "assertion-sent", false},
		{"S7 bad-path before R6b", "/c/alpha/a%2Fb", "", append([]string{cookie}, crossSiteImage...), 400, "bad-path", false},
		{"S7 hooks before R6b", "/c/alpha/hooks", "", append([]string{cookie}, crossSiteImage...), 403, "hooks", false},
		{"R6b a device's image", "/c/alpha/x", "", append([]string{cookie}, crossSiteImage...), 403, "cross-origin", false},
		{"R6b a device's frame of its index", "/", "", append([]string{cookie}, crossSiteIframe...), 403, "cross-origin", false},
		{"R6b before R1 reach-settings", "/fleet/v1/reach", "", append([]string{cookie}, crossSiteCORS...), 403, "cross-origin", false},
		{"R6b a device's pairing page in a frame", "/pair", "", append([]string{cookie}, crossSiteIframe...), 403, "cross-origin", false},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.clock.Advance(Window)
			host := row.host
			if host == "" {
				host = d.Addr
			}
			res := d.RawAs(reqHost("GET", row.target, host, row.extra...))
			if res.Status != row.status || res.Reason != row.reason {
				t.Fatalf("%d %q, want %d %q", res.Status, res.Reason, row.status, row.reason)
			}
			if n := d.failures("127.0.0.1"); (n == 1) != row.counts || n > 1 {
				t.Errorf("%d failures counted, want counted: %v", n, row.counts)
			}
			if n := d.Alpha.Count(); n != 0 {
				t.Errorf("the console saw %d requests", n)
			}
		})
	}
	res := d.RawAs(d.req("GET", "/c/alpha/x", append([]string{cookie}, crossSiteTopLevel...)...))
	if res.Status != http.StatusOK {
		t.Errorf("a device's link followed from another site: %d %q, want 200", res.Status, res.Reason)
	}
}

// TestPairedDeviceNeverHeldBack_R6: a paired phone shares its source (a household's /64, here
// one address) with a stranger who fails fifty times, and strangers elsewhere fill the overall
// count; the phone sends ten malformed requests of its own, each refused and none a failure,
// and is still served — a pairing POST of its own too. The stranger stays held back, and the
// phone's refusals add nothing to its source's count.
func TestPairedDeviceNeverHeldBack_R6(t *testing.T) {
	d := startPairingDoor(t)
	_, cookie := d.pair("phone")
	const shared = "127.0.0.2"
	for i := range 5 * SourceLimit {
		res := d.rawFrom(shared, reqHost("GET", "/pair", "evil.example"))
		if want := http.StatusMisdirectedRequest; res.Status != want {
			t.Fatalf("the stranger's failure %d: %d, want %d", i+1, res.Status, want)
		}
	}
	for i := range OverallLimit {
		d.rawFrom("127.0.0."+strconv.Itoa(3+i/SourceLimit), reqHost("GET", "/pair", "evil.example"))
	}
	if res := d.rawFrom(shared, d.req("GET", "/pair")); res.Status != http.StatusTooManyRequests {
		t.Fatalf("the stranger after fifty failures: %d, want 429", res.Status)
	}
	counted := d.failures(shared)
	malformed := []struct {
		name, method, target, host string
		extra                      []string
		status                     int
		reason                     string
	}{
		{"R5 Host", "GET", "/c/alpha/x", "evil.example", nil, 421, "host"},
		{"S3 assertion", "GET", "/c/alpha/x", "", []string{"X-Phase-Console-Fleet-Login: device:other#aaaaaa"}, 400, "assertion-sent"},
		{"S7 bad-path", "GET", "/c/alpha/a%2Fb", "", nil, 400, "bad-path"},
		{"S7 dot segment", "GET", "/c/alpha/%2e%2e/x", "", nil, 400, "bad-path"},
		{"S7 hooks", "GET", "/c/alpha/hooks", "", nil, 403, "hooks"},
		{"S9 h2c", "GET", "/c/alpha/x", "", []string{"Connection: Upgrade", "Upgrade: h2c"}, 400, "bad-upgrade"},
		{"S12 Origin", "GET", "/c/alpha/x", "", []string{"Origin: https://evil.example"}, 403, "cross-origin"},
		{"R6b cross-site", "GET", "/c/alpha/x", "", crossSiteImage, 403, "cross-origin"},
		{"R1 settings", "GET", "/fleet/v1/reach", "", nil, 403, "reach-settings"},
		{"unknown console", "GET", "/c/nobody/", "", nil, 404, "unknown-console"},
	}
	for _, row := range malformed {
		host := row.host
		if host == "" {
			host = d.Addr
		}
		res := d.rawFrom(shared, reqHost(row.method, row.target, host, append([]string{cookie}, row.extra...)...))
		if res.Status != row.status || res.Reason != row.reason {
			t.Errorf("the phone's %s: %d %q, want %d %q", row.name, res.Status, res.Reason, row.status, row.reason)
		}
	}
	if n := d.failures(shared); n != counted {
		t.Errorf("the phone's refusals added %d failures to its source, want none", n-counted)
	}
	if res := d.rawFrom(shared, d.req("GET", "/c/alpha/x", cookie)); res.Status != http.StatusOK {
		t.Errorf("the phone after all that: %d %q, want 200", res.Status, res.Reason)
	}
	extra, body := pairingForm(cookie)
	if res := d.rawFrom(shared, d.req("POST", "/pair", extra...)+body); res.Status != http.StatusForbidden || res.Reason != "pairing" {
		t.Errorf("the phone's pairing POST: %d %q, want 403 pairing (judged, not held back)", res.Status, res.Reason)
	}
	if n := d.failures(shared); n != counted {
		t.Errorf("the phone's wrong code added %d failures to its source, want none", n-counted)
	}
	if res := d.rawFrom(shared, d.req("GET", "/pair")); res.Status != http.StatusTooManyRequests {
		t.Errorf("the stranger beside the phone: %d, want still 429", res.Status)
	}
	if n := d.Alpha.Count(); n != 1 {
		t.Errorf("the console saw %d requests, want the phone's one", n)
	}
}
