package supervisor

import (
	"net"
	"testing"

	"github.com/phase-console/fleet/internal/doorrules"
	"github.com/phase-console/fleet/internal/doortest"
)

// TestSharedRules_S3_S4_S7_S9_S12: the table of requests every door must judge alike (package
// proxy's Door), through the loopback door's own listener, with its own S5 and S10 in front.
func TestSharedRules_S3_S4_S7_S9_S12(t *testing.T) {
	doorrules.Run(t, newRulesDoor(startDoor(t)))
}

// rulesDoor is the loopback door as doorrules needs it: requests as Tailscale Serve sends them
// for Alice, console alpha.
type rulesDoor struct {
	doortest.ServeRules
	d *door
}

func newRulesDoor(d *door) rulesDoor { return rulesDoor{doortest.ServeRules{Client: d.Client}, d} }

// TestWireRules_S3_S5e_S7_S8_S9_S10: the wire rows of the attack table (smuggling, pipelining,
// Expect, Host forms, exhaustion, tailscaled's own forwards, the bearer compared), through the
// loopback door's own listener.
func TestWireRules_S3_S5e_S7_S8_S9_S10(t *testing.T) {
	doorrules.RunWire(t, newRulesDoor(startDoor(t)))
}

func (r rulesDoor) Kind() string               { return doorrules.Loopback }
func (r rulesDoor) Host() string               { return doortest.TSName }
func (r rulesDoor) Addr() string               { return r.d.Addr }
func (r rulesDoor) Dial(t *testing.T) net.Conn { return r.d.Dial() }
func (r rulesDoor) Credential() string         { return r.d.Token }
func (r rulesDoor) SetForwardable(t *testing.T, on bool) {
	r.d.setTailscaled(t, func(f *doortest.FakeTailscaled) { f.RunSSH = on })
}

func (r rulesDoor) Paths() []string { return r.d.Alpha.Paths() }

// WithCredential is a local caller's request to the API with secret as its bearer.
func (r rulesDoor) WithCredential(secret string) string {
	if secret == "" {
		return r.d.localReq("GET", "/fleet/v1/consoles", "")
	}
	return r.d.localReq("GET", "/fleet/v1/consoles", "", "Authorization: Bearer "+secret)
}
