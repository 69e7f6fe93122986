package supervisor

import (
	"net/http"
	"os"
	"testing"

	"github.com/phase-console/fleet/internal/testlog"
)

// TestUnixSocketRefusalNamesPeer_O8: on the unix-socket door, whose connections have no address
// (net/http reports "@"), a refusal's fleet.rejected line names as peer the tailnet address the
// door verified for its caller, or whose node tailscaled's WhoIs found, when it did before
// refusing; a refusal decided before that (S7 hooks) names the socket. Never "@".
func TestUnixSocketRefusalNamesPeer_O8(t *testing.T) {
	logs := &testlog.Buffer{}
	d := uxStartLogging(t, os.Getuid(), logs)
	for _, row := range []struct {
		name, path, login string
		status            int
		reason            string
		peer              string
	}{
		{"O8 refused after verification", "/c/nosuch/x", uxUserLogin, http.StatusNotFound, "unknown-console", uxUserIP},
		{"O8 refused before verification", "/c/alpha/hooks/x", uxUserLogin, http.StatusForbidden, "hooks", "unix:" + d.sock},
		// WhoIs vouched for the address, and the login Serve sent disagrees: no login is
		// verified, but the address tailscaled named is the peer.
		{"O8 refused for a login WhoIs does not name", "/c/alpha/", "mallory@example.com", http.StatusUnauthorized, "identity-mismatch", uxUserIP},
	} {
		before := len(logs.Events("fleet.rejected"))
		resp := d.serveRequestAs(t, row.path, row.login)
		if resp.StatusCode != row.status || resp.Header.Get("X-Fleet-Reason") != row.reason {
			t.Fatalf("%s: %d %q, want %d %s", row.name, resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), row.status, row.reason)
		}
		lines := logs.Events("fleet.rejected")[before:]
		if len(lines) != 1 || lines[0]["reason"] != row.reason || lines[0]["peer"] != row.peer {
			t.Errorf("%s: fleet.rejected %v, want one with reason %s and peer %q", row.name, lines, row.reason, row.peer)
		}
	}
	for _, l := range logs.Events("fleet.rejected") {
		if l["peer"] == "@" || l["peer"] == "" {
			t.Errorf("a refusal names peer %q: %v", l["peer"], l)
		}
	}
}
