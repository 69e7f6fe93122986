package main

import (
	"path/filepath"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/supervisor"
)

// checkStateFormats refuses a state folder that a newer fleet has written (SPEC O5): a
// consoles.json, devices.json or codes.json of a newer format than this binary reads. It only
// reads, so `fleet serve` runs it before it changes anything; the error is one line naming the
// file and both formats.
func checkStateFormats(home string) error {
	if err := supervisor.CheckRegistryFormat(filepath.Join(state.FleetDir(home), state.RegistryFile)); err != nil {
		return err
	}
	return pairing.CheckFormats(pairingFolder(home))
}
