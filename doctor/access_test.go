package doctor

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/contract"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"
	"tailscale.com/types/views"
)

// TestAccess_G1: fleet doctor says which access.mode is in force, FAILs naming the key of a
// refused access: section, and WARNs when this machine's owner would open no console — or says
// it cannot know.
func TestAccess_G1(t *testing.T) {
	owner := func(caps tailcfg.PeerCapMap) *apitype.WhoIsResponse {
		return &apitype.WhoIsResponse{Node: &tailcfg.Node{ID: 1}, UserProfile: &tailcfg.UserProfile{LoginName: "ann@example.com"}, CapMap: caps}
	}
	capOf := func(v string) tailcfg.PeerCapMap {
		return tailcfg.PeerCapMap{tailcfg.PeerCapability(access.CapabilityName): {tailcfg.RawMessage(v)}}
	}
	rows := []struct {
		name      string
		profile   string // "" : none
		whois     *apitype.WhoIsResponse
		tagged    bool
		mode      Status
		modeWhat  string
		owner     Status
		ownerWhat string
	}{
		{"G1 no profile, owner without grant", "", owner(nil), false, OK, "access.mode tailnet", OK, "open every console"},
		{"G1 grants, owner granted", "access:\n  mode: grants\n", owner(capOf(`{"consoles":["alpha","build-*"]}`)), false, OK, "access.mode grants", OK, "ann@example.com may open alpha,build-*"},
		{"G1 grants, owner without grant", "access:\n  mode: grants\n", owner(nil), false, OK, "access.mode grants", Warn, "open nothing"},
		{"G1 tailnet, owner's grant malformed", "", owner(capOf(`{"consoles":"alpha"}`)), false, OK, "access.mode tailnet", Warn, "malformed"},
		{"G1 grants, owner's grant empty", "access:\n  mode: grants\n", owner(capOf(`{"consoles":[]}`)), false, OK, "access.mode grants", Warn, "list no console"},
		{"G1 grants, WhoIs names nobody", "access:\n  mode: grants\n", nil, false, OK, "access.mode grants", Warn, "cannot know"},
		{"G1 grants, tagged machine", "access:\n  mode: grants\n", owner(nil), true, OK, "access.mode grants", Warn, "cannot know"},
		{"G1 refused section", "access:\n  mode: grants\n  colour: red\n", owner(nil), false, Fail, "access.colour", Warn, "open nothing"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			home := newHome(t)
			if row.profile != "" {
				if err := os.MkdirAll(home, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(home, "machine-profile.yaml"), []byte(row.profile), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f := healthyTailscaled(contract.DefaultPort)
			f.status.Self.TailscaleIPs = []netip.Addr{netip.MustParseAddr("100.101.102.1")}
			if row.tagged {
				tags := views.SliceOf([]string{"tag:server"})
				f.status.Self.Tags = &tags
			}
			f.whois = row.whois
			checks := Run(context.Background(), Config{StateHome: home, LocalAPI: f})
			c, ok := find(checks, "access")
			if !ok || c.Status != row.mode || !strings.Contains(c.String(), row.modeWhat) {
				t.Errorf("access check: %v (found %v)", c, ok)
			}
			o, ok := find(checks, "access: this machine's owner")
			if !ok || o.Status != row.owner || !strings.Contains(o.String(), row.ownerWhat) {
				t.Errorf("owner check: %v (found %v)", o, ok)
			}
		})
	}
}
