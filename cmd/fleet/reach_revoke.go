package main

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
)

const reachRevokeSummary = "Revoke a paired device by its id6: at once, its open streams included."

func init() {
	addReachCommand(&command{name: "revoke", summary: reachRevokeSummary, run: runReachRevoke})
}

// runReachRevoke is `fleet reach revoke <id6> [--state-dir DIR]` (SPEC R8). The device leaves the
// register; fleet serve notices within a second and closes its connections, WebSockets and
// server-sent events included. An id6 that names no device is exit 1.
func runReachRevoke(args []string, stdout, stderr io.Writer) int {
	const summary = reachRevokeSummary + "\nName the device by its id6, before or after the flags: fleet reach revoke <id6>; 'fleet reach devices' lists them.\nfleet serve drops the device within a second; pairing it again takes a new code."
	fs := newFlags("reach revoke", summary, stdout, stderr)
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	id6, st, done := parseFlagsAndArg(fs, args)
	if done {
		return st
	}
	if id6 == "" {
		fmt.Fprintf(stderr, "fleet reach revoke: which device? want 'fleet reach revoke <id6>'; 'fleet reach devices' lists them\n")
		return 2
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet reach revoke: %v\n", err)
		return 1
	}
	dir := pairingFolder(home)
	devs, err := pairing.ListDevices(dir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet reach revoke: %v\n", err)
		return 1
	}
	i := slices.IndexFunc(devs, func(d pairing.Device) bool { return d.ID6 == id6 })
	if i < 0 {
		fmt.Fprintf(stderr, "fleet reach revoke: no paired device has the id6 %q; 'fleet reach devices' lists them\n", id6)
		return 1
	}
	if err := pairing.RevokeDevice(dir, id6); err != nil {
		if errors.Is(err, pairing.ErrNoSuchDevice) { // revoked by another process meanwhile
			fmt.Fprintf(stderr, "fleet reach revoke: no paired device has the id6 %q; 'fleet reach devices' lists them\n", id6)
		} else {
			fmt.Fprintf(stderr, "fleet reach revoke: %v\n", err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "revoked %s (%s): fleet serve drops it within a second, its open streams included\n", devs[i].Name, id6)
	return 0
}

// parseFlagsAndArg is parseFlags for a command with one positional argument, which may come
// before, between or after the flags. arg is "" when there is none; a second one is bad usage.
func parseFlagsAndArg(fs *flagSet, args []string) (arg string, status int, done bool) {
	// The flag package stops at the first argument that is not a flag: take it, then parse
	// what follows it. On an error (or --help) parseFlags parses everything again and reports it.
	if err := fs.Parse(args); err == nil && fs.NArg() > 0 {
		arg, args = fs.Arg(0), fs.Args()[1:]
	}
	status, done = parseFlags(fs, args)
	return arg, status, done
}
