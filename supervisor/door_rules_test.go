package supervisor

import (
	"net/http"
	"testing"

	"github.com/phase-console/fleet/internal/doorrules"
)

// TestSharedRules_S3_S4_S7_S9_S12: the table of requests every door must judge alike (package
// proxy's Door), through the loopback door's own listener, with its own S5 and S10 in front.
func TestSharedRules_S3_S4_S7_S9_S12(t *testing.T) {
	doorrules.Run(t, rulesDoor{startDoor(t)})
}

// rulesDoor is the loopback door as doorrules needs it: requests as Tailscale Serve sends them
// for alice, console alpha.
type rulesDoor struct{ d *door }

func (r rulesDoor) Request(method, target string, extra ...string) string {
	return serveReq(method, target, extra...)
}

func (r rulesDoor) Send(t *testing.T, raw string) (int, string) {
	resp := r.d.rawAs(raw)
	return resp.status, resp.reason
}

func (r rulesDoor) Received() (int, string, http.Header) {
	e := r.d.alpha
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.reqs) == 0 {
		return 0, "", nil
	}
	last := e.reqs[len(e.reqs)-1]
	return len(e.reqs), last.Path, last.Header
}
