package supervisor

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{"S5 index page verified", serveReq("GET", "/", "Accept: application/json"), 200, ""},
		{"S5 index page unverified", strings.Replace(serveReq("GET", "/"), aliceIP, "100.64.0.99", 1), 401, "unverified"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.alpha.count()
			r := d.raw(row.req)
			if row.status != 200 {
				d.wantRefused(t, r, before, row.status, row.reason)
				return
			}
			if r.status != 200 || !strings.Contains(r.body, alice) || !strings.Contains(r.body, "/c/alpha/") {
				t.Errorf("index: %d %q", r.status, r.body)
			}
			if strings.Contains(r.body, d.alpha.addr()) {
				t.Error("index shows the console's loopback address")
			}
		})
	}
}

// TestTCPForwardable_S5e: the index page is judged by S5e as a console is (the rest of S5e is
// package tailnet's).
func TestTCPForwardable_S5e(t *testing.T) {
	d := startDoor(t)
	d.setTailscaled(t, func(f *fakeTailnet) { f.runSSH = true })
	before := d.alpha.count()
	d.wantRefused(t, d.raw(serveReq("GET", "/")), before, 401, "tcp-forwardable")
}

// TestUnknownTailscaledUIDRefused_S5a: with no --tailscaled-uid and no socket to take it from,
// nothing is verified.
func TestUnknownTailscaledUIDRefused_S5a(t *testing.T) {
	d := startDoor(t, func(c *Config) {
		c.TailscaledUID = -1
		c.TailscaleSocket = filepath.Join(t.TempDir(), "missing.sock")
	})
	before := d.alpha.count()
	r := d.raw(serveReq("GET", "/c/alpha/"))
	d.wantRefused(t, r, before, http.StatusUnauthorized, "unverified")
	if !strings.Contains(r.body, "--tailscaled-uid") {
		t.Errorf("page does not say what to do: %q", r.body)
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
		{"S5a local caller, known console", "/c/alpha/", "open the console directly: http://" + d.alpha.addr() + "/"},
		{"S5a local caller, unknown console", "/c/nope/", "&#39;fleet consoles&#39; lists them"},
		{"S5a local caller, index", "/", "&#39;fleet consoles&#39; lists them"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.alpha.count()
			r := d.raw("GET " + row.path + " HTTP/1.1\nHost: 127.0.0.1\n\n")
			d.wantRefused(t, r, before, 401, "unverified")
			if !strings.Contains(r.body, "this request came from a process on this machine") || !strings.Contains(r.body, row.want) {
				t.Errorf("page %q does not say where to go (%q)", r.body, row.want)
			}
		})
	}
}
