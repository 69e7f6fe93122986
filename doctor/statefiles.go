package doctor

// The state files (SPEC F1).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/phase-console/fleet/internal/state"
)

func (r *run) checkState() {
	home := r.cfg.StateHome
	fleetDir := state.FleetDir(home)
	for _, dir := range []string{home, fleetDir} {
		switch err := checkDir(dir); {
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

	regPath := filepath.Join(fleetDir, state.RegistryFile)
	data, err := state.ReadPrivateFile(regPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(OK, "consoles.json", "no console registered yet", "")
	case err != nil:
		r.add(Fail, "consoles.json", errText(err), fixOf(err, ""))
	case !json.Valid(data):
		r.add(Fail, "consoles.json", regPath+" does not parse; fleet serve refuses to start with it", "repair it, or move it away (consoles register again when they start)")
	default:
		r.add(OK, "consoles.json", regPath+" is private (0600)", "")
	}
}

// checkDir is state.EnsureDir without the creating: an existing folder of ours, no group or
// world bits.
func checkDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return &state.ModeError{Path: dir, Mode: st.Mode(), Why: "is not a folder", Fix: "move it out of the way"}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return &state.ModeError{Path: dir, Mode: st.Mode(), Why: fmt.Sprintf("is owned by uid %d, not by this user (uid %d)", sys.Uid, os.Geteuid()),
			Fix: fmt.Sprintf("chown %d %s", os.Geteuid(), dir)}
	}
	if st.Mode().Perm()&0o077 != 0 {
		return &state.ModeError{Path: dir, Mode: st.Mode(), Why: "is group- or world-accessible", Fix: "chmod 700 " + dir}
	}
	return nil
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
