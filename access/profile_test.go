package access

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestParseProfile_G1 is the access: section: its two modes, its peers, and every refusal
// naming its key and meaning grants (fail closed).
func TestParseProfile_G1(t *testing.T) {
	rows := []struct {
		name  string
		in    string
		want  Settings
		key   string // refused: the key named
		peers []string
	}{
		{"G1 empty file", "", Defaults, "", nil},
		{"G1 no access section", "reach:\n  mode: off\nother: {x: 1}\n", Defaults, "", nil},
		{"G1 access with nothing under it", "access:\n", Defaults, "", nil},
		{"G1 mode tailnet", "access:\n  mode: tailnet\n", Settings{Mode: ModeTailnet}, "", nil},
		{"G1 mode grants", "access:\n  mode: grants\n", Settings{Mode: ModeGrants}, "", nil},
		{"G1 mode empty is the default", "access:\n  mode:\n", Defaults, "", nil},
		{"G1 fleet_peers", "access:\n  mode: grants\n  fleet_peers: [Build-Box, ci]\n", Settings{Mode: ModeGrants}, "", []string{"build-box", "ci"}},
		{"G1 fleet_peers empty", "access:\n  fleet_peers: []\n", Defaults, "", []string{}},
		{"G1 through an anchor", "base: &a\n  mode: grants\naccess: *a\n", Settings{Mode: ModeGrants}, "", nil},
		{"G1 refused: unknown key", "access:\n  mode: grants\n  colour: red\n", Refused, "access.colour", nil},
		{"G1 refused: unknown mode", "access:\n  mode: Grants\n", Refused, "access.mode", nil},
		{"G1 refused: mode a list", "access:\n  mode: [grants]\n", Refused, "access.mode", nil},
		{"G1 refused: mode twice", "access:\n  mode: tailnet\n  mode: grants\n", Refused, "access.mode", nil},
		{"G1 refused: section twice", "access:\n  mode: grants\naccess:\n  mode: tailnet\n", Refused, "access", nil},
		{"G1 refused: section a list", "access:\n  - mode: grants\n", Refused, "access", nil},
		{"G1 refused: section a word", "access: grants\n", Refused, "access", nil},
		{"G1 refused: a peer with its suffix", "access:\n  fleet_peers: [box.tail1234.ts.net]\n", Refused, "access.fleet_peers", nil},
		{"G1 refused: peers not a list", "access:\n  fleet_peers: box\n", Refused, "access.fleet_peers", nil},
		{"G1 refused: a peer that is a mapping", "access:\n  fleet_peers: [{a: b}]\n", Refused, "access.fleet_peers", nil},
		{"G1 refused: merge key under access", "base: &b {mode: grants}\naccess:\n  <<: *b\n", Refused, "access.<<", nil},
		{"G1 refused: not YAML", "access: [\n", Refused, "", nil},
		{"G1 refused: two documents", "access: {}\n---\naccess: {}\n", Refused, "", nil},
		{"G1 refused: not a mapping", "- access\n", Refused, "", nil},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			got, err := ParseProfile([]byte(row.in))
			if strings.Contains(row.name, "refused") {
				var se *SectionError
				if !errors.As(err, &se) || se.Key != row.key {
					t.Fatalf("got %v, %v; want a SectionError naming %q", got, err, row.key)
				}
				if got.Mode != ModeGrants {
					t.Errorf("a refused section is mode %q, want grants", got.Mode)
				}
				return
			}
			if err != nil || got.Mode != row.want.Mode || !slices.Equal(got.FleetPeers, row.peers) {
				t.Errorf("got %+v, %v; want mode %q peers %q", got, err, row.want.Mode, row.peers)
			}
		})
	}
}
