package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/phase-console/fleet/internal/state"
)

const tokenSummary = "Manage the fleet token: 'fleet token rotate' writes a new one; nothing in flight fails."

func init() {
	addCommand(&command{name: "token", summary: tokenSummary, run: runToken})
}

// runToken is `fleet token rotate [--state-dir DIR]`. It writes a fresh fleet.token atomically
// (SPEC F2). The supervisor and every console that uses package console re-read it within 2 s
// and believe the old one for 10 s more (C1), so no request fails in between. The token is never
// printed.
func runToken(args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: fleet token rotate [--state-dir DIR]\n\n%s\n", tokenSummary)
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		usage(stdout)
		return 0
	case "rotate":
	default:
		fmt.Fprintf(stderr, "fleet token: unknown subcommand %q; want 'fleet token rotate'\n", args[0])
		return 2
	}
	const summary = "Write a new fleet token atomically. The supervisor and the consoles pick it up within 2 s and\nbelieve the old one for 10 s more, so nothing in flight fails. The token is never printed."
	fs := newFlags("token rotate", summary, stdout, stderr)
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	if st, done := parseFlags(fs, args[1:]); done {
		return st
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet token rotate: %v\n", err)
		return 1
	}
	fleetDir := state.FleetDir(home)
	// Rotating means replacing a token in use: with none there, the folder is not the one that
	// fleet serve uses (a forgotten --state-dir), and writing one would only hide that.
	if _, err := readToken(*stateDir, home); errors.Is(err, errNoToken) {
		fmt.Fprintf(stderr, "fleet token rotate: nothing to rotate: %v\n", err)
		return 1
	}
	if err := state.RotateToken(fleetDir); err != nil {
		fmt.Fprintf(stderr, "fleet token rotate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "rotated %s: the supervisor and the consoles pick it up within 2 s; the old token is believed for %s more\n",
		filepath.Join(fleetDir, state.TokenFile), state.RotationGrace)
	return 0
}
