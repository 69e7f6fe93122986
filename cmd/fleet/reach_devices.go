package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
)

const reachDevicesSummary = "List the paired devices: name, id6, the consoles each may open, created, last seen."

func init() {
	addReachCommand(&command{name: "devices", summary: reachDevicesSummary, run: runReachDevices})
}

// deviceJSON is one device in `fleet reach devices --json`. It never holds a credential.
type deviceJSON struct {
	ID6      string     `json:"id6"`
	Name     string     `json:"name"`
	Slug     string     `json:"slug"`
	Login    string     `json:"login"` // as consoles see it: device:<slug>#<id6>
	Created  time.Time  `json:"created"`
	LastSeen *time.Time `json:"last_seen,omitempty"`
	LastAddr string     `json:"last_addr,omitempty"`
	Consoles []string   `json:"consoles"` // the patterns it may open (SPEC G1); [] is none
}

// runReachDevices is `fleet reach devices [--json] [--state-dir DIR]` (SPEC R8): the register,
// oldest first. Last seen is as last written, up to 30 s behind what fleet serve knows.
func runReachDevices(args []string, stdout, stderr io.Writer) int {
	const summary = reachDevicesSummary + "\nLast seen is written by fleet serve at most every 30 s. 'fleet reach revoke <id6>' removes one."
	fs := newFlags("reach devices", summary, stdout, stderr)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet reach devices: %v\n", err)
		return 1
	}
	devs, err := pairing.ListDevices(pairingFolder(home))
	if err != nil {
		fmt.Fprintf(stderr, "fleet reach devices: %v\n", err)
		return 1
	}
	if *asJSON {
		out := make([]deviceJSON, 0, len(devs))
		for _, d := range devs {
			j := deviceJSON{ID6: d.ID6, Name: d.Name, Slug: d.Slug, Login: d.Login(), Created: d.Created, LastAddr: d.LastAddr,
				Consoles: d.Consoles.Patterns()}
			if j.Consoles == nil {
				j.Consoles = []string{}
			}
			if !d.LastSeen.IsZero() {
				j.LastSeen = &d.LastSeen
			}
			out = append(out, j)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "fleet reach devices: %v\n", err)
			return 1
		}
		return 0
	}
	if len(devs) == 0 {
		fmt.Fprintln(stdout, "no paired devices ('fleet reach pair' issues a code)")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID6\tCONSOLES\tCREATED\tLAST SEEN")
	for _, d := range devs {
		seen := "never"
		if !d.LastSeen.IsZero() {
			seen = d.LastSeen.Local().Format(time.DateTime)
			if d.LastAddr != "" {
				seen += " from " + d.LastAddr
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.ID6, d.Consoles, d.Created.Local().Format(time.DateTime), seen)
	}
	tw.Flush()
	return 0
}
