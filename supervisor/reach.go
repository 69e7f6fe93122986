package supervisor

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
)

// This file runs the direct-reach door beside the loopback door (SPEC R1): it opens, moves or
// closes the door from the machine profile — at start, at once on ReloadReach (SIGHUP), and
// within reachPollInterval of a change to the file — and never touches the loopback door. A
// profile that is refused, or a door that cannot open, leaves the door closed and says why, in
// one log line (per distinct reason) and in ReachStatus. A door that cannot open is tried again
// at every poll, so it opens once its address is free or this machine's; a refused profile waits
// for the file to change.

// reachPollInterval is how often the profile's stamp is looked at, and a door that failed to open
// is tried again: a change is picked up within it, without a SIGHUP (R1: within 10 s).
const reachPollInterval = 3 * time.Second

// ReachStatus is the direct-reach door as `fleet reach status` shows it (GET /fleet/v1/reach).
type ReachStatus struct {
	Mode        string    `json:"mode"`             // off or direct, as the profile says; off when it is refused
	Listen      string    `json:"listen,omitempty"` // the profile's address
	Open        bool      `json:"open"`
	Why         string    `json:"why,omitempty"`              // why the door is closed
	Fingerprint string    `json:"root_fingerprint,omitempty"` // SHA-256 of the root, in groups
	LeafExpiry  time.Time `json:"leaf_expiry,omitzero"`
	Devices     int       `json:"devices"`
}

// reachState is the door as the supervisor runs it. mu serialises reloads.
type reachState struct {
	mu       sync.Mutex
	door     *reach.Door
	profile  reach.Profile
	why      string
	stamp    fileStamp
	register *pairing.Register // opened with the door the first time, kept: its subscribers stay
	limiter  *reach.Limiter    // kept across reopenings: moving the door forgets no failure
	// failed: the profile asks for the door and it did not open (its address held by another
	// process, not this machine's yet, its CA unreadable): every poll tries it again.
	failed bool
}

// pairingPages is the door's pairing pages (package pairing: SPEC R7, R8) for the open door d: its
// fingerprint on the page, its origin the only one a pairing POST may come from, every refused
// attempt counted by its limiter (R6), and every attempt recorded (O7).
func (s *Server) pairingPages(d *reach.Door, reg *pairing.Register) http.Handler {
	return pairing.NewHandler(pairing.HandlerConfig{
		Dir:         s.reachDir(),
		Register:    reg,
		Fingerprint: d.Fingerprint(),
		Origin:      "https://" + d.Addr().String(),
		Logger:      s.log,
		Now:         s.cfg.Now,
		OnFailure:   d.Failure,
		OnAttempt:   d.PairingAttempt, // SPEC O7: each attempt in the access log and the metrics
	})
}

// reachDir is <stateHome>/fleet/reach: the pairing files, and the CA under tls/.
func (s *Server) reachDir() string { return filepath.Join(s.fleetDir, "reach") }

// ReloadReach reads the machine profile now and opens, moves or closes the direct-reach door to
// match, and puts its access: section in force (access.go). The loopback door is never touched.
func (s *Server) ReloadReach() {
	s.reloadAccess()
	rs := &s.reach
	rs.mu.Lock()
	defer rs.mu.Unlock()
	select {
	case <-s.stop:
		return // closed: a door opened now would never be closed
	default:
	}
	rs.stamp = stampOf(filepath.Join(s.cfg.StateHome, reach.ProfileFile))
	rs.failed = false
	p, err := reach.LoadProfile(s.cfg.StateHome)
	if err != nil {
		s.closeReachLocked()
		rs.profile = reach.Profile{Mode: reach.ModeOff}
		s.setWhy(err.Error(), err)
		return
	}
	rs.profile = p
	if !p.Open() {
		if rs.door != nil {
			s.log.Info("fleet.reach-closed", "why", "reach.mode is off")
		}
		s.closeReachLocked()
		rs.why = "reach.mode is off"
		return
	}
	if rs.door != nil && rs.door.Addr() == p.Listen {
		return // nothing that concerns the door changed
	}
	// Close first, then open: the old address stops answering before the new one does.
	s.closeReachLocked()
	if err := s.openReachLocked(p); err != nil {
		rs.failed = true
		s.setWhy(err.Error(), err)
		return
	}
	rs.why = ""
	s.log.Info("fleet.reach-open", "listen", p.Listen.String(), "root_fingerprint", rs.door.Fingerprint())
}

func (s *Server) openReachLocked(p reach.Profile) error {
	rs := &s.reach
	if rs.register == nil {
		reg, err := pairing.OpenRegister(s.reachDir())
		if err != nil {
			return err
		}
		reg.OnRevoke(func(id6 string) {
			// Called without rs.mu: a revocation never waits for a reload. door is read under
			// the lock, Revoke runs outside it.
			rs.mu.Lock()
			d := rs.door
			rs.mu.Unlock()
			if d != nil {
				d.Revoke(id6)
			}
		})
		go reg.Watch(s.stop, pairing.RefreshInterval)
		rs.register = reg
	}
	if rs.limiter == nil {
		rs.limiter = reach.NewLimiter(s.cfg.Now)
	}
	build := s.cfg.ReachPairing
	if build == nil {
		build = s.pairingPages
	}
	reg := rs.register
	pairingFor := func(d *reach.Door) http.Handler { return build(d, reg) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := reach.Open(ctx, reach.Config{
		PairingFor: pairingFor,
		Profile:    p,
		TLSDir:     filepath.Join(s.reachDir(), "tls"),
		Hop:        s.hop,
		Consoles:   registryConsoles{s.registry},
		Token:      s.token,
		Devices:    rs.register,
		Limiter:    rs.limiter,
		Log:        s.log,
		Now:        s.cfg.Now,
		Audit:      s.auditRecorder(),
		Listen:     s.cfg.ReachListen,
	})
	if err != nil {
		return err
	}
	rs.door = d
	return nil
}

// setWhy records why the door is closed and logs it once (one Warn line naming the key and the
// rule when the profile is refused).
func (s *Server) setWhy(why string, err error) {
	rs := &s.reach
	if why == rs.why {
		return
	}
	rs.why = why
	attrs := []any{"why", why}
	var pe *reach.ProfileError
	if errors.As(err, &pe) {
		attrs = append(attrs, "key", pe.Key, "rule", pe.Rule)
	}
	s.log.Warn("fleet.reach-closed", attrs...)
}

// closeReachLocked closes the door because the profile moved it or turned it off: its socket
// stops listening even where a copy of it is kept to hand on (reach.Door.Shut, SPEC O3).
func (s *Server) closeReachLocked() {
	if s.reach.door != nil {
		s.reach.door.Shut()
		s.reach.door = nil
	}
}

// closeReach closes the door for good (Server.Close). Its socket is only closed here, not shut:
// a process that took this one over (or is taking it over) may be serving on it.
func (s *Server) closeReach() {
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	if s.reach.door != nil {
		s.reach.door.Close()
		s.reach.door = nil
	}
	if s.reach.register != nil {
		s.reach.register.WaitWrites() // nothing written to the folder once the server is closed
	}
}

// reachLoop loads the profile at start, then looks again every reachPollInterval (pollReach).
func (s *Server) reachLoop() {
	s.ReloadReach()
	t := time.NewTicker(reachPollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.pollReach()
		}
	}
}

// pollReach is one look of reachLoop: it reloads when the profile's file changed, and when the
// door that the profile asks for failed to open — its address held by another process (another
// local user may bind a LAN address and port first: after a reboot, while fleet restarts), or not
// this machine's yet (before DHCP gives it) — so that the door opens within reachPollInterval of
// its address coming free, without a SIGHUP. A failure that repeats is logged once (setWhy).
func (s *Server) pollReach() {
	path := filepath.Join(s.cfg.StateHome, reach.ProfileFile)
	s.reach.mu.Lock()
	again := s.reach.failed || stampOf(path) != s.reach.stamp
	s.reach.mu.Unlock()
	if again {
		s.ReloadReach()
	}
}

// ReachStatus reports the direct-reach door now.
func (s *Server) ReachStatus() ReachStatus {
	rs := &s.reach
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st := ReachStatus{Mode: rs.profile.Mode, Why: rs.why}
	if st.Mode == "" {
		st.Mode = reach.ModeOff
	}
	if rs.profile.Listen.IsValid() {
		st.Listen = rs.profile.Listen.String()
	}
	if rs.door != nil {
		st.Open = true
		st.Fingerprint = rs.door.Fingerprint()
		st.LeafExpiry = rs.door.LeafExpiry().UTC()
	}
	if rs.register != nil {
		st.Devices = len(rs.register.Devices())
	} else if devs, err := pairing.ListDevices(s.reachDir()); err == nil {
		st.Devices = len(devs)
	}
	return st
}

// fileStamp tells one version of a file from another: every editor either rewrites it (mtime,
// size) or renames a new one over it (inode). The zero stamp is a missing file.
type fileStamp struct {
	mod  int64
	size int64
	ino  uint64
	mode os.FileMode
}

func stampOf(path string) fileStamp {
	st, err := os.Lstat(path)
	if err != nil {
		return fileStamp{}
	}
	fs := fileStamp{mod: st.ModTime().UnixNano(), size: st.Size(), mode: st.Mode()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fs.ino = sys.Ino
	}
	return fs
}

// IDs is the registry's console ids, sorted, for a device's index on the reach door.
func (c registryConsoles) IDs() []string {
	list := c.r.List()
	ids := make([]string, 0, len(list))
	for _, con := range list {
		ids = append(ids, con.ID)
	}
	sort.Strings(ids)
	return ids
}

// Describe is a console's name and health in words, for a device's index on the reach door
// (SPEC U2: reach.ConsoleDescriber).
func (c registryConsoles) Describe(id string) (name, health string) {
	con, ok := c.r.Get(id)
	if !ok {
		return "", ""
	}
	return con.Name, string(c.r.HealthOf(id))
}
