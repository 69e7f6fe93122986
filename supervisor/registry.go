package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/phase-console/fleet/internal/state"
)

// A Console is one registered console.
type Console struct {
	ID         string    `json:"id"`
	Addr       string    `json:"addr"`
	Name       string    `json:"name,omitempty"`
	Registered time.Time `json:"registered"`
}

// ConsoleStatus is a Console with its health, as the API and the index page show it.
type ConsoleStatus struct {
	Console
	Up       bool      `json:"up"`
	LastSeen time.Time `json:"last_seen,omitzero"`
	URL      string    `json:"url"`
}

var consoleIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateConsole checks a registration (SPEC S8): id [a-z0-9][a-z0-9-]{0,62}; addr a loopback
// literal with a port; name short, printable text.
func ValidateConsole(c Console) error {
	if !consoleIDPattern.MatchString(c.ID) {
		return fmt.Errorf("id %q: want [a-z0-9][a-z0-9-]{0,62}", c.ID)
	}
	ap, err := netip.ParseAddrPort(c.Addr)
	if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return fmt.Errorf("addr %q: want a loopback literal with a port, like 127.0.0.1:9001", c.Addr)
	}
	if len(c.Name) > 100 || !utf8.ValidString(c.Name) {
		return fmt.Errorf("name: want at most 100 bytes of UTF-8")
	}
	for _, r := range c.Name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("name: control characters are not allowed")
		}
	}
	return nil
}

// A Registry is the set of consoles, kept in consoles.json so that a restart keeps every route.
type Registry struct {
	path string
	now  func() time.Time

	mu       sync.Mutex
	consoles map[string]Console
	health   map[string]health
}

type health struct {
	up       bool
	lastSeen time.Time
}

type registryFile struct {
	Consoles []Console `json:"consoles"`
}

// LoadRegistry reads the registry at path (a missing file is an empty registry). A file that is
// too open or does not parse is an error that names it; it is never replaced.
func LoadRegistry(path string, now func() time.Time) (*Registry, error) {
	if now == nil {
		now = time.Now
	}
	r := &Registry{path: path, now: now, consoles: map[string]Console{}, health: map[string]health{}}
	data, err := state.ReadPrivateFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	var f registryFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s does not parse: %v (fix or move it away; fleet will not overwrite it)", path, err)
	}
	for _, c := range f.Consoles {
		if err := ValidateConsole(c); err != nil {
			return nil, fmt.Errorf("%s: console %q: %v", path, c.ID, err)
		}
		r.consoles[c.ID] = c
	}
	return r, nil
}

// Put adds or refreshes a console and persists the registry. It reports whether the id was new. On
// a write error nothing changes, in memory or on disk.
func (r *Registry) Put(c Console) (created bool, err error) {
	if err := ValidateConsole(c); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, existed := r.consoles[c.ID]
	c.Registered = r.now().UTC()
	r.consoles[c.ID] = c
	if err := r.saveLocked(); err != nil {
		if existed {
			r.consoles[c.ID] = old
		} else {
			delete(r.consoles, c.ID)
		}
		return false, err
	}
	if !existed || old.Addr != c.Addr {
		// A console that just registered is taken as up until a probe says otherwise.
		r.health[c.ID] = health{up: true, lastSeen: r.now().UTC()}
	}
	return !existed, nil
}

// Delete removes a console and persists the registry. It reports whether the id was known.
func (r *Registry) Delete(id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.consoles[id]
	if !ok {
		return false, nil
	}
	delete(r.consoles, id)
	if err := r.saveLocked(); err != nil {
		r.consoles[id] = old
		return false, err
	}
	delete(r.health, id)
	return true, nil
}

// Get returns the console with id.
func (r *Registry) Get(id string) (Console, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.consoles[id]
	return c, ok
}

// List returns every console with its health, sorted by id.
func (r *Registry) List() []ConsoleStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ConsoleStatus, 0, len(r.consoles))
	for _, c := range r.consoles {
		h := r.health[c.ID]
		out = append(out, ConsoleStatus{Console: c, Up: h.up, LastSeen: h.lastSeen, URL: "/c/" + c.ID + "/"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (r *Registry) saveLocked() error {
	f := registryFile{Consoles: make([]Console, 0, len(r.consoles))}
	for _, c := range r.consoles {
		f.Consoles = append(f.Consoles, c)
	}
	sort.Slice(f.Consoles, func(i, j int) bool { return f.Consoles[i].ID < f.Consoles[j].ID })
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return state.WriteFileAtomic(r.path, append(data, '\n'))
}

// Probe dials every console once (timeout each) and records whether it answered.
func (r *Registry) Probe(ctx context.Context, timeout time.Duration) {
	for _, c := range r.List() {
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, "tcp", c.Addr)
		if err == nil {
			conn.Close()
		}
		r.mu.Lock()
		if cur, ok := r.consoles[c.ID]; ok && cur.Addr == c.Addr {
			h := r.health[c.ID]
			h.up = err == nil
			if h.up {
				h.lastSeen = r.now().UTC()
			}
			r.health[c.ID] = h
		}
		r.mu.Unlock()
	}
}

// markDown records that a forward to the console failed.
func (r *Registry) markDown(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.consoles[id]; ok {
		h := r.health[id]
		h.up = false
		r.health[id] = h
	}
}
