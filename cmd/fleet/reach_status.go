package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/phase-console/fleet/supervisor"
)

const reachStatusSummary = "Show the direct-reach door: mode, address, open or why closed, root fingerprint, leaf expiry, devices."

func init() {
	addReachCommand(&command{name: "status", summary: reachStatusSummary, run: runReachStatus})
}

// runReachStatus prints the running supervisor's GET /fleet/v1/reach, one line each.
func runReachStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reach status", reachStatusSummary, stdout, stderr)
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	sup := fs.String("supervisor", "", "the supervisor's address `ADDR`, a loopback literal (default: from <stateHome>/fleet/supervisor.addr)")
	asJSON := fs.Bool("json", false, "print JSON")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "fleet reach status: %v\n", err)
		return 1
	}
	c, err := newAPIClient(*stateDir, *sup)
	if err != nil {
		return fail(err)
	}
	st, err := c.reachStatus()
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
		return 0
	}
	fmt.Fprintf(stdout, "mode:         %s\n", st.Mode)
	if st.Listen != "" {
		fmt.Fprintf(stdout, "listen:       https://%s/\n", st.Listen)
	}
	if st.Open {
		fmt.Fprintln(stdout, "door:         open")
		fmt.Fprintf(stdout, "fingerprint:  SHA-256 %s\n", st.Fingerprint)
		fmt.Fprintf(stdout, "leaf expires: %s\n", st.LeafExpiry.Local().Format(time.RFC3339))
	} else {
		fmt.Fprintf(stdout, "door:         closed: %s\n", st.Why)
	}
	fmt.Fprintf(stdout, "devices:      %d\n", st.Devices)
	return 0
}

// reachStatus is the running supervisor's direct-reach door, GET /fleet/v1/reach: what it has
// open, and why not. The client dials only a supervisor of this same user (peercred.OwnClient), so
// the answer is this user's door.
func (c *apiClient) reachStatus() (supervisor.ReachStatus, error) {
	var st supervisor.ReachStatus
	resp, err := c.do(http.MethodGet, "/fleet/v1/reach", nil)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, apiError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&st); err != nil {
		return st, fmt.Errorf("the supervisor's answer to GET /fleet/v1/reach: %w", err)
	}
	return st, nil
}
