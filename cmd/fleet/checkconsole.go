package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/phase-console/fleet/console/conformance"
	"github.com/phase-console/fleet/internal/state"
)

const checkConsoleSummary = "Probe a running console for the C rules (assertion, Host, proxy header, scope, presence, hooks, reach); one PASS/FAIL/SKIP line each."

func init() {
	addCommand(&command{name: "check-console", summary: checkConsoleSummary, run: runCheckConsole})
}

// runCheckConsole is `fleet check-console --url http://127.0.0.1:PORT [--require-all]
// [--state-dir DIR]`: exit 0 when no probe fails (a SKIP — a probe whose route the console lacks —
// is not a failure, unless --require-all), 2 on bad usage (a URL that is not a loopback literal among them: the
// checker sends the real fleet token), 1 otherwise: a probe failed, no token, or no console of
// this user answers at the URL (said once, before any probe).
func runCheckConsole(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check-console", checkConsoleSummary+"\nIt sends the real fleet token, so it talks to a loopback literal only.", stdout, stderr)
	rawURL := fs.String("url", "", "the console's root `URL`, http://127.0.0.1:PORT or 127.0.0.1:PORT (required)")
	requireAll := fs.Bool("require-all", false, "count a probe the console has no route for (SKIP) as a FAIL: for a reference console, which has every probe route")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	if *rawURL == "" {
		fmt.Fprintln(stderr, "fleet check-console: --url is required, e.g. --url http://127.0.0.1:9001")
		return 2
	}
	u, err := conformance.CheckURL(*rawURL)
	if err != nil {
		fmt.Fprintf(stderr, "fleet check-console: %v\n", err)
		return 2
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet check-console: %v\n", err)
		return 1
	}
	tok, err := readToken(*stateDir, home)
	if err != nil {
		fmt.Fprintf(stderr, "fleet check-console: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := conformance.Preflight(ctx, u.String()); err != nil {
		fmt.Fprintf(stderr, "fleet check-console: %v\n", err)
		return 1
	}
	status := 0
	for _, r := range conformance.Check(ctx, u.String(), tok) {
		if *requireAll {
			r = r.Required()
		}
		fmt.Fprintln(stdout, r)
		if r.Failed() {
			status = 1
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "fleet check-console: timed out before every probe ran")
		status = 1
	}
	return status
}
