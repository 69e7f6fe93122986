package supervisor

import (
	"net"
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

func (r rulesDoor) Received() (int, string, http.Header) { return r.d.alpha.Received() }

// TestWireRules_S3_S5e_S7_S8_S9_S10: the wire rows of the attack table (smuggling, pipelining,
// Expect, Host forms, exhaustion, tailscaled's own forwards, the bearer compared), through the
// loopback door's own listener.
func TestWireRules_S3_S5e_S7_S8_S9_S10(t *testing.T) {
	doorrules.RunWire(t, rulesDoor{startDoor(t)})
}

func (r rulesDoor) Kind() string               { return doorrules.Loopback }
func (r rulesDoor) Host() string               { return tsName }
func (r rulesDoor) Addr() string               { return r.d.addr }
func (r rulesDoor) Dial(t *testing.T) net.Conn { return r.d.dial(t) }
func (r rulesDoor) Credential() string         { return r.d.token }
func (r rulesDoor) SetForwardable(t *testing.T, on bool) {
	r.d.setTailscaled(t, func(f *fakeTailnet) { f.runSSH = on })
}

func (r rulesDoor) Paths() []string { return r.d.alpha.Paths() }

// WithCredential is a local caller's request to the API with secret as its bearer.
func (r rulesDoor) WithCredential(secret string) string {
	if secret == "" {
		return r.d.localReq("GET", "/fleet/v1/consoles", "")
	}
	return r.d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: Bearer "+secret)
}
