package reach

import (
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/pairing"
)

// TestDeviceConsoles_G1: a paired device opens only the consoles it was paired for. Any other —
// registered or not — is 403 not-granted, the same answer, one fleet.rejected line, and no
// console sees anything; hooks is still 403 hooks first; its index lists only what it may open;
// and none of its refusals is a failure (R6).
func TestDeviceConsoles_G1(t *testing.T) {
	build1, beta := heldConsole(t), heldConsole(t)
	d := startTestDoor(t, func(c *Config) {
		m := c.Consoles.(consoleMap)
		m["build-1"], m["beta"] = build1.Addr(), beta.Addr()
	})
	consoles := map[string]*echoconsole.Console{"alpha": d.Alpha, "build-1": build1, "beta": beta}
	limited, err := access.ParseList("alpha,build-*")
	if err != nil {
		t.Fatal(err)
	}
	dev, cred, err := d.register.AddFor("Ann's phone", limited, d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	cookie := "Cookie: " + pairing.CookieName + "=" + cred
	_, anyCookie := d.pair("Kitchen tablet") // the default: every console

	send := func(t *testing.T, cookie, target string) (doortest.Response, map[string]int) {
		t.Helper()
		before := map[string]int{}
		for id, c := range consoles {
			before[id] = c.Count()
		}
		r := d.RawAs(d.req("GET", target, cookie))
		seen := map[string]int{}
		for id, c := range consoles {
			n := c.Count()
			seen[id] = n - before[id]
		}
		return r, seen
	}
	var pages []string
	for _, row := range []struct {
		name   string
		cookie string
		target string
		status int
		reason string
		seenBy string // the console that saw the request, when forwarded
	}{
		{"G1 device opens a listed id", cookie, "/c/alpha/", 200, "", "alpha"},
		{"G1 device opens by prefix", cookie, "/c/build-1/x", 200, "", "build-1"},
		{"G1 device refused an unlisted console", cookie, "/c/beta/", 403, "not-granted", ""},
		{"G1 device refused an unknown console alike", cookie, "/c/nosuch/", 403, "not-granted", ""},
		{"G1 S7 hooks first", cookie, "/c/beta/hooks", 403, "hooks", ""},
		{"G1 default device opens any", anyCookie, "/c/beta/", 200, "", "beta"},
		{"G1 default device learns an id is unknown", anyCookie, "/c/nosuch/", 404, "unknown-console", ""},
	} {
		t.Run(row.name, func(t *testing.T) {
			rejected := len(d.Logs.Events("fleet.rejected"))
			r, seen := send(t, row.cookie, row.target)
			if r.Status != row.status || r.Reason != row.reason {
				t.Fatalf("got %d %q, want %d %q (%s)", r.Status, r.Reason, row.status, row.reason, r.Body)
			}
			for id, n := range seen {
				want := 0
				if id == row.seenBy {
					want = 1
				}
				if n != want {
					t.Errorf("console %s saw %d request(s), want %d", id, n, want)
				}
			}
			if row.seenBy != "" {
				s, _ := consoles[row.seenBy].Last()
				if got := s.Header.Get("X-Phase-Console-Fleet-Login"); !strings.HasPrefix(got, "device:") {
					t.Errorf("console saw login %q", got)
				}
				return
			}
			if lines := d.Logs.Events("fleet.rejected")[rejected:]; len(lines) != 1 || lines[0]["reason"] != row.reason {
				t.Errorf("want one fleet.rejected line, got %v", lines)
			}
			if row.reason == "not-granted" {
				pages = append(pages, r.Body)
			}
		})
	}
	if len(pages) == 2 && pages[0] != pages[1] {
		t.Errorf("the refusals of a console that exists and one that does not differ:\n%q\n%q", pages[0], pages[1])
	}

	// The index lists only what the device may open.
	idx := d.RawAs(d.req("GET", "/", cookie))
	if idx.Status != 200 || !strings.Contains(idx.Body, `href="/c/alpha/"`) || !strings.Contains(idx.Body, `href="/c/build-1/"`) ||
		strings.Contains(idx.Body, "beta") || !strings.Contains(idx.Body, dev.Login()) {
		t.Errorf("device index: %d %s", idx.Status, idx.Body)
	}

	// R6: well past ten refusals, the device and a stranger at its address are held back by
	// nothing: not-granted is no failure.
	for i := 0; i < 12; i++ {
		if r, _ := send(t, cookie, "/c/beta/"); r.Reason != "not-granted" {
			t.Fatalf("refusal %d: %d %q", i, r.Status, r.Reason)
		}
	}
	if r := d.RawAs(d.req("GET", "/pair")); r.Status == http.StatusTooManyRequests {
		t.Errorf("not-granted counted as failures: the stranger's /pair is %d", r.Status)
	}
	if r, seen := send(t, cookie, "/c/alpha/"); r.Status != 200 || seen["alpha"] != 1 {
		t.Errorf("the device after its refusals: %d %q", r.Status, r.Reason)
	}
}
