package main

import (
	"io"
	"os"
	"path/filepath"

	"golang.org/x/term"

	"github.com/phase-console/fleet/internal/state"
)

// What `fleet reach password|pair|devices|revoke` share: the pairing folder, and the terminal
// the password is typed on (seams, so that tests can play a terminal).

// pairingFolder is <stateHome>/fleet/reach, where the pairing password, the codes, the device
// register and the door's CA (tls/) live.
func pairingFolder(home string) string { return filepath.Join(state.FleetDir(home), "reach") }

var (
	// passwordStdin is what `fleet reach password` reads.
	passwordStdin io.Reader = os.Stdin
	// stdinIsTerminal reports whether passwordStdin is a terminal.
	stdinIsTerminal = func() bool { return isTerminal(os.Stdin) }
	// readHidden reads one line from the terminal without echo.
	readHidden = func() ([]byte, error) { return term.ReadPassword(int(os.Stdin.Fd())) }
)
