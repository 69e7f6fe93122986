package supervisor

import (
	"net/http"
	"os"
	"testing"

	"github.com/phase-console/fleet/internal/testlog"
)

// TestUnixSocketRefusalNamesPeer_O8: on the unix-socket door, whose connections have no address
// (net/http reports "@"), a refusal's fleet.rejected line names as peer the tailnet address the
// door verified for its caller, when it did before refusing; a refusal decided before that (S7
// hooks) names the socket. Never "@".
func TestUnixSocketRefusalNamesPeer_O8(t *testing.T) {
	logs := &testlog.Buffer{}
	d := uxStartLogging(t, os.Getuid(), logs)
	for _, row := range []struct {
		name, path string
		status     int
		reason     string
		peer       string
	}{
		{"O8 refused after verification", "/c/nosuch/x", http.StatusNotFound, "unknown-console", uxUserIP},
		{"O8 refused before verification", "/c/alpha/hooks/x", http.StatusForbidden, "hooks", "unix:" + d.sock},
	} {
		before := len(logs.Events("fleet.rejected"))
		resp := d.serveRequest(t, row.path, false)
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
