package reach

// A paired device's own pages (SPEC U2, U3): its index, and Forget this device as raw POSTs —
// from its own page, from another origin, without a cookie, with a revoked one, naming another
// device — against the real door, the register on disk and the echo console behind it.

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/pairing"
)

// describedConsoles is consoleMap with names and health (ConsoleDescriber), as the supervisor's
// registry gives them.
type describedConsoles struct {
	consoleMap
	names, health map[string]string
}

func (c describedConsoles) Describe(id string) (string, string) { return c.names[id], c.health[id] }

// pairFor registers a device that may open consoles and returns it with its cookie line.
func (d *testDoor) pairFor(name string, consoles ...string) (pairing.Device, string) {
	d.t.Helper()
	g, err := access.NewGrant(consoles)
	if err != nil {
		d.t.Fatal(err)
	}
	dev, cred, err := d.register.AddFor(name, g, d.clock.Now())
	if err != nil {
		d.t.Fatal(err)
	}
	return dev, "Cookie: " + pairing.CookieName + "=" + cred
}

// paired reports which of ids the register on disk still holds.
func (d *testDoor) paired(ids ...string) []string {
	d.t.Helper()
	devs, err := pairing.ListDevices(d.reachDir)
	if err != nil {
		d.t.Fatal(err)
	}
	var out []string
	for _, id := range ids {
		if slices.ContainsFunc(devs, func(dev pairing.Device) bool { return dev.ID6 == id }) {
			out = append(out, id)
		}
	}
	return out
}

func TestDeviceIndex_U2(t *testing.T) {
	var alphaAddr string
	d := startTestDoor(t, func(c *Config) {
		m := c.Consoles.(consoleMap)
		alphaAddr = m["alpha"]
		m["build-1"], m["zeta"] = "127.0.0.1:1", "127.0.0.1:2"
		c.Consoles = describedConsoles{consoleMap: m,
			names:  map[string]string{"alpha": "Alpha <project>", "build-1": "Build one"},
			health: map[string]string{"alpha": "up", "build-1": "down"}}
	})
	dev, cookie := d.pairFor("Ann's phone", "alpha", "build-*")
	r := d.RawAs(d.req("GET", "/", cookie))
	if r.Status != http.StatusOK {
		t.Fatalf("the index: %d %q", r.Status, r.Reason)
	}
	for _, want := range []string{
		"<a href=\"/c/alpha/\" data-console-id=\"alpha\">Alpha &lt;project&gt;</a>\n<small>alpha</small> <span class=\"up\">up</span>",
		"<a href=\"/c/build-1/\" data-console-id=\"build-1\">Build one</a>\n<small>build-1</small> <span class=\"down\">down</span>",
		`<b>Ann&#39;s phone</b> <small class="mono">` + dev.ID6 + `</small>`,
		`<form method="post" action="/pair/forget">`, `Forget this device`,
	} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("the index lacks %q:\n%s", want, r.Body)
		}
	}
	for _, not := range []string{"/c/zeta/", alphaAddr, "127.0.0.1:1"} {
		if strings.Contains(r.Body, not) {
			t.Errorf("the index shows %q (not the device's, or where a console listens)", not)
		}
	}
	csp := r.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "form-action 'self'") || strings.Contains(csp, "script-src") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("the index's policy %q: want its one form to the door, no script, no framing", csp)
	}

	_, none := d.pairFor("Bob's tablet", "other-*")
	r = d.RawAs(d.req("GET", "/", none))
	if r.Status != http.StatusOK || !strings.Contains(r.Body, "No console to open yet") ||
		!strings.Contains(r.Body, "other-*") || strings.Contains(r.Body, `class="consoles"`) {
		t.Errorf("a device with no console: %d, want what to do, not an empty list:\n%s", r.Status, r.Body)
	}
}

func TestForget_U3(t *testing.T) {
	own := func(d *testDoor) string { return "Origin: https://" + d.Addr }
	type row struct {
		name string
		// extra builds the request's own lines from the door and the device's cookie line.
		extra  func(d *testDoor, cookie, revokedCookie string) []string
		target string
		status int
		reason string // X-Fleet-Reason of a refusal
		gone   bool   // the device is revoked
		clears bool   // the answer clears the cookie with R10's line
	}
	rows := []row{
		{name: "U3 forget from the device's own page", target: ForgetPath,
			extra: func(d *testDoor, c, _ string) []string {
				return []string{c, own(d), "Sec-Fetch-Site: same-origin", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 0"}
			},
			status: http.StatusSeeOther, gone: true, clears: true},
		{name: "U3 forget without Origin (a client that is not a browser, with the credential)", target: ForgetPath,
			extra:  func(d *testDoor, c, _ string) []string { return []string{c} },
			status: http.StatusSeeOther, gone: true, clears: true},
		{name: "U3 S12 another origin", target: ForgetPath,
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, "Origin: https://evil.example"} },
			status: http.StatusForbidden, reason: "cross-origin"},
		{name: "U3 S12 another port of the door's address", target: ForgetPath,
			extra: func(d *testDoor, c, _ string) []string {
				return []string{c, "Origin: https://" + d.door.Addr().Addr().String() + ":1"}
			},
			status: http.StatusForbidden, reason: "cross-origin"},
		{name: "U3 S12 Origin null", target: ForgetPath,
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, "Origin: null"} },
			status: http.StatusForbidden, reason: "cross-origin"},
		{name: "U3 S12 two Origins, one the door's", target: ForgetPath,
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, own(d), "Origin: https://evil.example"} },
			status: http.StatusForbidden, reason: "cross-origin"},
		{name: "U3 R6b cross-site", target: ForgetPath,
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, "Sec-Fetch-Site: cross-site"} },
			status: http.StatusForbidden, reason: "cross-origin"},
		{name: "U3 same-site (another port's page)", target: ForgetPath,
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, "Sec-Fetch-Site: same-site"} },
			status: http.StatusForbidden, reason: "cross-origin"},
		{name: "U3 without a cookie", target: ForgetPath,
			extra:  func(d *testDoor, _, _ string) []string { return []string{own(d), "Sec-Fetch-Site: same-origin"} },
			status: http.StatusSeeOther},
		{name: "U3 R10 with a revoked cookie", target: ForgetPath,
			extra:  func(d *testDoor, _, rc string) []string { return []string{rc, own(d), "Sec-Fetch-Site: same-origin"} },
			status: http.StatusSeeOther, clears: true},
		{name: "U3 an unknown cookie", target: ForgetPath,
			extra: func(d *testDoor, _, _ string) []string {
				return []string{"Cookie: " + pairing.CookieName + "=" + strings.Repeat("A", 43), own(d)}
			},
			status: http.StatusSeeOther, clears: true},
		{name: "U3 two cookies, the device's and another", target: ForgetPath,
			extra:  func(d *testDoor, c, rc string) []string { return []string{c, rc, own(d)} },
			status: http.StatusSeeOther, clears: true},
		{name: "U3 a path not written plainly", target: "/pair/%66orget",
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, own(d)} },
			status: http.StatusNotFound, reason: "not-found"},
		{name: "U3 R1 nothing under /fleet/", target: "/fleet/owner/revoke",
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, own(d)} },
			status: http.StatusForbidden, reason: "reach-settings"},
		// A GET is the pairing pages' (here none is set up): it changes nothing.
		{name: "U3 GET is not forgetting", target: ForgetPath,
			extra:  func(d *testDoor, c, _ string) []string { return []string{c, own(d)} },
			status: http.StatusOK},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			d := startTestDoor(t)
			dev, cookie := d.pair("phone")
			other, _ := d.pair("tablet")
			revoked, revokedCookie := d.pair("old")
			if err := d.register.Revoke(revoked.ID6); err != nil {
				t.Fatal(err)
			}
			// Another cookie line for the two-cookie row: the revoked device's.
			method := "POST"
			if strings.HasPrefix(tc.name, "U3 GET") {
				method = "GET"
			}
			before := d.Alpha.Count()
			r := d.RawAs(d.req(method, tc.target, tc.extra(d, cookie, revokedCookie)...))
			if r.Status != tc.status || r.Reason != tc.reason {
				t.Fatalf("got %d %q, want %d %q (body %q)", r.Status, r.Reason, tc.status, tc.reason, r.Body)
			}
			if tc.status == http.StatusSeeOther && r.Header.Get("Location") != PairPath {
				t.Errorf("Location %q, want the pairing page %s", r.Header.Get("Location"), PairPath)
			}
			cleared := slices.Contains(r.Header.Values("Set-Cookie"), pairing.ClearCookie)
			if cleared != tc.clears || len(r.Header.Values("Set-Cookie")) > 1 {
				t.Errorf("Set-Cookie %q; want R10's line alone: %v", r.Header.Values("Set-Cookie"), tc.clears)
			}
			if n := d.Alpha.Count(); n != before {
				t.Errorf("the console saw %d request(s)", n-before)
			}
			still := d.paired(dev.ID6, other.ID6)
			want := []string{dev.ID6, other.ID6}
			if tc.gone {
				want = []string{other.ID6} // only itself: never another device
			}
			if !slices.Equal(still, want) {
				t.Errorf("the register holds %v of %v, want %v", still, []string{dev.ID6, other.ID6}, want)
			}
			after := d.RawAs(d.req("GET", "/c/alpha/x", cookie))
			if tc.gone && after.Status != http.StatusSeeOther {
				t.Errorf("the forgotten device's next request: %d, want 303 to /pair", after.Status)
			}
			if !tc.gone && after.Status != http.StatusOK {
				t.Errorf("the device's next request: %d, want 200 (still paired)", after.Status)
			}
		})
	}
}

// TestForgetEndsStreams_U3: forgetting ends the device's open streams, as fleet reach revoke
// does, and leaves another device's alone.
func TestForgetEndsStreams_U3(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	_, otherCookie := d.pair("tablet")
	open := func(c string) (*bufio.Reader, func()) {
		conn, _, resp := d.Open(d.req("GET", "/c/alpha/sse", c))
		body := bufio.NewReader(resp.Body)
		if line, err := body.ReadString('\n'); err != nil || line != "data: hello\n" {
			t.Fatalf("sse: %q %v", line, err)
		}
		return body, func() { conn.Close() }
	}
	mine, closeMine := open(cookie)
	defer closeMine()
	theirs, closeTheirs := open(otherCookie)
	defer closeTheirs()
	if r := d.RawAs(d.req("POST", ForgetPath, cookie, "Origin: https://"+d.Addr, "Content-Length: 0")); r.Status != http.StatusSeeOther {
		t.Fatalf("forget: %d %q", r.Status, r.Reason)
	}
	if _, err := io.ReadAll(mine); err != nil && !ended(err) {
		t.Errorf("the forgotten device's stream: %v, want ended", err)
	}
	d.Alpha.Tick()
	if line, err := theirs.ReadString('\n'); err != nil || line == "" {
		t.Errorf("the other device's stream: %q %v, want it still flowing", line, err)
	}
}

// TestForgetRefusalsAreNoFailures_U3_R6: neither a refused forget nor a revoked cookie on the
// forget POST counts against the source (R6b, R10): a page a phone visits cannot lock it out.
func TestForgetRefusalsAreNoFailures_U3_R6(t *testing.T) {
	d := startTestDoor(t)
	revoked, revokedCookie := d.pair("old")
	if err := d.register.Revoke(revoked.ID6); err != nil {
		t.Fatal(err)
	}
	for range 12 {
		d.RawAs(d.req("POST", ForgetPath, revokedCookie, "Origin: https://"+d.Addr))
		d.RawAs(d.req("POST", ForgetPath, "Origin: https://evil.example"))
	}
	if r := d.RawAs(d.req("GET", PairPath)); r.Status == http.StatusTooManyRequests {
		t.Errorf("after 24 refused forgets the source is held back (%d): they must not be failures", r.Status)
	}
}
