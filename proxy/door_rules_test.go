package proxy

import (
	"net/http"
	"testing"

	"github.com/phase-console/fleet/internal/doorrules"
	"github.com/phase-console/fleet/internal/doortest"
)

// TestSharedRules_S3_S4_S7_S9_S12: the table of requests every door must judge alike, against
// the Door with a stand-in for a door's own rules. Each door runs the same table through its own
// listener.
func TestSharedRules_S3_S4_S7_S9_S12(t *testing.T) {
	doorrules.Run(t, rulesDoor{startTestDoor(t)})
}

// rulesDoor is the test door as doorrules needs it: requests as Tailscale Serve sends them for
// alice, console alpha.
type rulesDoor struct{ d *testDoor }

func (r rulesDoor) Request(method, target string, extra ...string) string {
	return doortest.ServeReq(method, target, extra...)
}

func (r rulesDoor) Send(t *testing.T, raw string) (int, string) {
	resp := r.d.RawAs(raw)
	return resp.Status, resp.Reason
}

func (r rulesDoor) Received() (int, string, http.Header) { return r.d.Alpha.Received() }
