package supervisor

import (
	"errors"
	"sync"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/reach"
)

// This file is the machine profile's access: section (SPEC G1) as the running supervisor follows
// it: read at start, before the first request is judged, and again whenever the direct-reach door
// reloads the profile (at once on SIGHUP, within reachPollInterval of a change: R1). A section
// that is refused — or a profile file that F1 refuses — is access.ModeGrants (fail closed), said
// in one warning line per distinct reason, naming the key.

// accessState is the access: section in force.
type accessState struct {
	mu       sync.Mutex
	settings access.Settings
	why      string // why the section was refused; "" when it is in force as written
}

// loadAccess reads the profile's access: section (package access) from its file as F1 allows
// it (reach.ReadProfileFile).
func loadAccess(stateHome string) (access.Settings, error) {
	b, err := reach.ReadProfileFile(stateHome)
	if err != nil {
		return access.Refused, err
	}
	return access.ParseProfile(b)
}

// reloadAccess reads the access: section now and puts it in force: the tailnet.Verifier's mode
// for callers without a grant.
func (s *Server) reloadAccess() {
	set, err := loadAccess(s.cfg.StateHome)
	as := &s.access
	as.mu.Lock()
	defer as.mu.Unlock()
	why := ""
	if err != nil {
		why = err.Error()
	}
	changed := set.Mode != as.settings.Mode
	s.tailnet.SetAccess(set.Mode)
	s.tailnet.SetFleetPeers(set.FleetPeers)
	as.settings = set
	if why != as.why && why != "" {
		attrs := []any{"why", why, "mode", string(set.Mode)}
		var se *access.SectionError
		if errors.As(err, &se) && se.Key != "" {
			attrs = append(attrs, "key", se.Key)
		}
		s.log.Warn("fleet.access-refused", attrs...)
	} else if changed || why != as.why {
		s.log.Info("fleet.access", "mode", string(set.Mode))
	}
	as.why = why
}

// Access is the access: section in force, and why it was refused ("" when it is as written).
func (s *Server) Access() (access.Settings, string) {
	s.access.mu.Lock()
	defer s.access.mu.Unlock()
	return s.access.settings, s.access.why
}
