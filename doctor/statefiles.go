package doctor

// The state files (SPEC F1).

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/supervisor"
)

func (r *run) checkState() {
	home := r.cfg.StateHome
	fleetDir := state.FleetDir(home)
	// The same rules fleet serve applies at start-up (state.EnsureHome, state.EnsureDir), without
	// the creating: <stateHome> may be shared (0755 is fine), fleet/ must be 0700.
	for _, c := range []struct {
		dir   string
		check func(string) error
	}{{home, state.CheckHome}, {fleetDir, state.CheckDir}} {
		dir := c.dir
		switch err := c.check(dir); {
		case errors.Is(err, fs.ErrNotExist):
			r.add(Warn, "state folder", dir+" does not exist yet", "start the supervisor once (fleet serve) to create it")
			return
		case err != nil:
			r.add(Fail, "state folder", errText(err), fixOf(err, "move it out of the way"))
			return
		}
	}
	r.add(OK, "state folder", fleetDir+" is private (0700)", "")

	tokPath := filepath.Join(fleetDir, state.TokenFile)
	tok, err := state.ReadToken(tokPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Warn, "fleet.token", tokPath+" does not exist yet", "start the supervisor once (fleet serve) to create it")
	case err != nil:
		var me *state.ModeError
		if errors.As(err, &me) {
			r.add(Fail, "fleet.token", errText(err), fixOf(err, ""))
		} else {
			// ReadToken's errors never contain the token.
			r.add(Fail, "fleet.token", err.Error(), "move it away and restart fleet serve: a new token is made, and consoles read it within 2 s")
		}
	default:
		r.token = tok
		r.add(OK, "fleet.token", tokPath+" is private (0600) and well-formed", "")
	}

	r.checkMetricsToken(fleetDir, tok)

	regPath := filepath.Join(fleetDir, state.RegistryFile)
	data, err := state.ReadPrivateFile(regPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(OK, "consoles.json", "no console registered yet", "")
	case err != nil:
		r.add(Fail, "consoles.json", errText(err), fixOf(err, ""))
	case supervisor.CheckRegistryFormat(regPath) != nil:
		// SPEC O5: written by a newer fleet; this one's serve refuses to start with it.
		r.add(Fail, "consoles.json", supervisor.CheckRegistryFormat(regPath).Error(), "run the newer fleet that wrote it (fleet version says which this is), or move the file away")
	case !json.Valid(data):
		r.add(Fail, "consoles.json", regPath+" does not parse; fleet serve refuses to start with it", "repair it, or move it away (consoles register again when they start)")
	default:
		r.add(OK, "consoles.json", regPath+" is private (0600)", "")
	}
}

// checkMetricsToken is metrics.token (G4): private and well-formed like the fleet token, and
// never equal to it (the endpoint refuses the fleet token, so such a scraper is always refused).
// fleet is the fleet token, or "" when it could not be read.
func (r *run) checkMetricsToken(fleetDir, fleet string) {
	const name = "metrics.token"
	path := filepath.Join(fleetDir, state.MetricsTokenFile)
	tok, err := state.ReadToken(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Warn, name, path+" does not exist yet", "restart fleet serve once to create it")
	case err != nil:
		var me *state.ModeError
		if errors.As(err, &me) {
			r.add(Fail, name, errText(err), fixOf(err, ""))
		} else {
			// ReadToken's errors never contain the token.
			r.add(Fail, name, err.Error(), "move it away and restart fleet serve: a new one is made; give it to the scraper")
		}
	case fleet != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(fleet)) == 1:
		r.add(Fail, name, path+" holds the fleet token, which /fleet/v1/metrics never takes", "move it away and restart fleet serve: a new one is made; give it to the scraper")
	default:
		r.add(OK, name, path+" is private (0600) and well-formed", "")
	}
}

// errText is an error without its fix (the fix has its own place on the line).
func errText(err error) string {
	var me *state.ModeError
	if errors.As(err, &me) {
		return fmt.Sprintf("%s %s (mode %04o)", me.Path, me.Why, me.Mode.Perm())
	}
	return err.Error()
}

func fixOf(err error, otherwise string) string {
	var me *state.ModeError
	if errors.As(err, &me) && me.Fix != "" {
		return me.Fix
	}
	return otherwise
}
