package supervisor

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
)

// TestCallerVerified_S5: the index page names the verified caller, and is refused to anyone
// else (every other S5 case is package tailnet's, through a Verifier alone).
func TestCallerVerified_S5(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name   string
		req    string
		status int
		reason string
	}{
		{"S5 index page verified", doortest.ServeReq("GET", "/", "Accept: application/json"), 200, ""},
		{"S5 index page unverified", strings.Replace(doortest.ServeReq("GET", "/"), doortest.AliceIP, "100.64.0.99", 1), 401, "unverified"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			r := d.Raw(row.req)
			if row.status != 200 {
				d.WantRefused(t, r, before, row.status, row.reason)
				return
			}
			if r.Status != 200 || !strings.Contains(r.Body, doortest.Alice) || !strings.Contains(r.Body, "/c/alpha/") {
				t.Errorf("index: %d %q", r.Status, r.Body)
			}
			if strings.Contains(r.Body, d.Alpha.Addr()) {
				t.Error("index shows the console's loopback address")
			}
		})
	}
}

// TestTCPForwardable_S5e: the index page is judged by S5e as a console is (the rest of S5e is
// package tailnet's).
func TestTCPForwardable_S5e(t *testing.T) {
	d := startDoor(t)
	d.setTailscaled(t, func(f *doortest.FakeTailscaled) { f.RunSSH = true })
	before := d.Alpha.Count()
	d.WantRefused(t, d.Raw(doortest.ServeReq("GET", "/")), before, 401, "tcp-forwardable")
}

// TestUnknownTailscaledUIDRefused_S5a: with no --tailscaled-uid and no socket to take it from,
// nothing is verified.
func TestUnknownTailscaledUIDRefused_S5a(t *testing.T) {
	d := startDoor(t, func(c *Config) {
		c.TailscaledUID = -1
		c.TailscaleSocket = filepath.Join(t.TempDir(), "missing.sock")
	})
	before := d.Alpha.Count()
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha/"))
	d.WantRefused(t, r, before, http.StatusUnauthorized, "unverified")
	if !strings.Contains(r.Body, "--tailscaled-uid") {
		t.Errorf("page does not say what to do: %q", r.Body)
	}
}

// TestLocalCallerToldWhereToGo_S5a: a process on this machine (not tailscaled) that opens the door
// is refused 401 unverified, and the page tells it to open the console at its own loopback
// address, or where to find it; nothing is forwarded.
func TestLocalCallerToldWhereToGo_S5a(t *testing.T) {
	d := startDoor(t, func(c *Config) { c.TailscaledUID = os.Getuid() + 4242 })
	rows := []struct {
		name, path, want string
	}{
		{"S5a local caller, known console", "/c/alpha/", "open the console directly: http://" + d.Alpha.Addr() + "/"},
		{"S5a local caller, unknown console", "/c/nope/", "'fleet consoles' lists them"}, // JSON: no Accept (U5)
		{"S5a local caller, index", "/", "'fleet consoles' lists them"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			r := d.Raw("GET " + row.path + " HTTP/1.1\nHost: 127.0.0.1\n\n")
			d.WantRefused(t, r, before, 401, "unverified")
			if !strings.Contains(r.Body, "this request came from a process on this machine") || !strings.Contains(r.Body, row.want) {
				t.Errorf("page %q does not say where to go (%q)", r.Body, row.want)
			}
		})
	}
}
