package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/proxy"
)

// A Console is one registered console.
type Console struct {
	ID         string    `json:"id"`
	Addr       string    `json:"addr"`
	Name       string    `json:"name,omitempty"`
	Registered time.Time `json:"registered"` // when this id got this addr and name
}

// ConsoleStatus is a Console with its health, as the API and the index page show it.
type ConsoleStatus struct {
	Console
	Health Health `json:"health"`
	// Up is Health == HealthUp, kept for clients that predate Health: false while unknown.
	Up bool `json:"up"`
	// LastSeen is when the console last registered, refreshed or answered a probe.
	LastSeen time.Time `json:"last_seen,omitzero"`
	URL      string    `json:"url"`
}

// Health is what the supervisor knows of a console's liveness.
type Health string

const (
	// HealthUnknown: registered (or loaded at start-up) and not probed yet.
	HealthUnknown Health = "unknown"
	// HealthUp: the last probe reached it.
	HealthUp Health = "up"
	// HealthDown: the last probe, or the last forward, did not reach it — or what answers at its
	// address is run by another user (the hop sends that nothing: 502 console-other-user).
	HealthDown Health = "down"
)

// ValidateConsole checks a registration (SPEC S8): id [a-z0-9][a-z0-9-]{0,62}; addr a loopback
// literal with a port; name short, printable text.
func ValidateConsole(c Console) error {
	if !contract.ValidConsoleID(c.ID) {
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
//
// Every proxied request looks its console up (Get), so lookups take no lock: they read an
// immutable snapshot, a map that a change replaces and never mutates. Changes (Put, Delete) are
// serialised among themselves and write the file before the new snapshot is published; a console
// that re-registers with the same id, addr and name (every few seconds) changes nothing on disk,
// only its last-seen time in memory. Health lives beside the snapshot, under its own small lock.
type Registry struct {
	path  string
	now   func() time.Time
	write func(path string, data []byte) error         // r.writeFile; a seam for tests
	dial  func(ctx context.Context, addr string) error // dialProbe; a seam for tests
	// probeDeadline bounds one probe dial: context.WithTimeout; a seam for tests, whose fake
	// clock ends the dial's context when the test says the timeout is up.
	probeDeadline func(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc)

	consoles atomic.Pointer[map[string]Console] // never nil; the map is never mutated

	mu sync.Mutex // serialises Put and Delete, and so the file's writes
	// fileFormat is the format of the file on disk (SPEC O5): RegistryFormat, or an older one
	// until the first write upgrades it. Guarded by mu.
	fileFormat int
	probes     sync.WaitGroup // the probes Put started; a test waits on it to see their outcome

	hmu    sync.Mutex // guards the fields below
	health map[string]health
	seq    uint64 // counts health observations; a probe records only if none came after it started
}

type health struct {
	state    Health
	lastSeen time.Time
	seq      uint64
}

// RegistryFormat is the format of consoles.json that this fleet writes (SPEC O5, package state):
//
//   - 1: {"consoles": [...]}, with no "format" (state.LegacyFormat).
//   - 2: the same, with "format": 2.
//
// A file of any of them is read; the first write of a format-1 file keeps it as
// consoles.json.v1.bak. A file of a newer format is refused, and left as it is.
const RegistryFormat = 2

type registryFile struct {
	Format   int       `json:"format,omitempty"` // always RegistryFormat when fleet writes it
	Consoles []Console `json:"consoles"`
}

// CheckRegistryFormat refuses a consoles.json at path of a newer format than this fleet reads
// (a *state.NewerFormatError, one line naming the file and both formats). It only reads: any other
// problem with the file is LoadRegistry's to report.
func CheckRegistryFormat(path string) error {
	return state.CheckFormat(path, RegistryFormat)
}

// LoadRegistry reads the registry at path (a missing file is an empty registry). A file that is
// too open or does not parse is an error that names it; it is never replaced.
func LoadRegistry(path string, now func() time.Time) (*Registry, error) {
	if now == nil {
		now = time.Now
	}
	r := &Registry{path: path, now: now, dial: dialProbe, probeDeadline: context.WithTimeout,
		health: map[string]health{}, fileFormat: RegistryFormat}
	r.write = r.writeFile
	consoles := map[string]Console{}
	data, err := state.ReadPrivateFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		r.consoles.Store(&consoles)
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	// Formats 1 and 2 differ only by "format" itself: one decoder reads both.
	from, formatErr := state.FormatOf(path, data, RegistryFormat)
	var newer *state.NewerFormatError
	if errors.As(formatErr, &newer) {
		return nil, formatErr
	}
	var f registryFile
	err = json.Unmarshal(data, &f)
	if err == nil {
		err = formatErr
	}
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %v (fix or move it away; fleet will not overwrite it)", path, err)
	}
	r.fileFormat = from
	for _, c := range f.Consoles {
		if err := ValidateConsole(c); err != nil {
			return nil, fmt.Errorf("%s: console %q: %v", path, c.ID, err)
		}
		consoles[c.ID] = c
	}
	r.consoles.Store(&consoles)
	return r, nil
}

// snapshot is the current set of consoles. Read only.
func (r *Registry) snapshot() map[string]Console { return *r.consoles.Load() }

// Get returns the console with id. It takes no lock.
func (r *Registry) Get(id string) (Console, bool) {
	c, ok := r.snapshot()[id]
	return c, ok
}

// HealthOf is what is known of the console id's liveness: HealthUnknown until it is probed (and
// for an id that is not registered).
func (r *Registry) HealthOf(id string) Health {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	if h := r.health[id].state; h != "" {
		return h
	}
	return HealthUnknown
}

// Put adds, changes or refreshes a console. It reports whether the id was new. A console whose
// id, addr and name are already registered is only marked seen: nothing is written. Otherwise the
// file is written first, and on a write error nothing changes, in memory or on disk. A new console,
// or one with a new addr, has unknown health and is probed at once, in the background (one dial,
// at most probeTimeout).
func (r *Registry) Put(c Console) (created bool, err error) {
	if err := ValidateConsole(c); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snapshot()
	old, existed := cur[c.ID]
	now := r.now().UTC()
	if existed && old.Addr == c.Addr && old.Name == c.Name {
		r.markSeen(c.ID, now)
		return false, nil
	}
	c.Registered = now
	next := make(map[string]Console, len(cur)+1)
	for id, v := range cur {
		next[id] = v
	}
	next[c.ID] = c
	if err := r.save(next); err != nil {
		return false, err
	}
	if existed && old.Addr == c.Addr {
		r.consoles.Store(&next)
		r.markSeen(c.ID, now)
		return false, nil
	}
	// Health first, then the snapshot: no listing shows the new addr with the old addr's health.
	r.hmu.Lock()
	r.seq++
	r.health[c.ID] = health{state: HealthUnknown, lastSeen: now, seq: r.seq}
	r.hmu.Unlock()
	r.consoles.Store(&next)
	r.probes.Go(func() { r.probeOne(context.Background(), c, probeTimeout) })
	return !existed, nil
}

// Delete removes a console and persists the registry. It reports whether the id was known.
func (r *Registry) Delete(id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snapshot()
	if _, ok := cur[id]; !ok {
		return false, nil
	}
	next := make(map[string]Console, len(cur))
	for k, v := range cur {
		if k != id {
			next[k] = v
		}
	}
	if err := r.save(next); err != nil {
		return false, err
	}
	r.consoles.Store(&next)
	r.hmu.Lock()
	delete(r.health, id)
	r.hmu.Unlock()
	return true, nil
}

// List returns every console with its health, sorted by id.
func (r *Registry) List() []ConsoleStatus {
	cur := r.snapshot()
	out := make([]ConsoleStatus, 0, len(cur))
	r.hmu.Lock()
	for _, c := range cur {
		h := r.health[c.ID]
		if h.state == "" {
			h.state = HealthUnknown
		}
		out = append(out, ConsoleStatus{Console: c, Health: h.state, Up: h.state == HealthUp, LastSeen: h.lastSeen, URL: "/c/" + c.ID + "/"})
	}
	r.hmu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// save writes consoles to the file. Called with mu held.
func (r *Registry) save(consoles map[string]Console) error {
	f := registryFile{Format: RegistryFormat, Consoles: make([]Console, 0, len(consoles))}
	for _, c := range consoles {
		f.Consoles = append(f.Consoles, c)
	}
	sort.Slice(f.Consoles, func(i, j int) bool { return f.Consoles[i].ID < f.Consoles[j].ID })
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := r.write(r.path, append(data, '\n')); err != nil {
		return err
	}
	r.fileFormat = RegistryFormat
	return nil
}

// writeFile is how the registry writes its file (r.write): the first write over a file of an
// older format keeps that file once as consoles.json.v<N>.bak (SPEC O5), every write is atomic
// and refuses a file too open (F1, F2). Called with mu held.
func (r *Registry) writeFile(path string, data []byte) error {
	if r.fileFormat < RegistryFormat {
		return state.WriteUpgraded(path, r.fileFormat, data)
	}
	return state.WritePrivateFile(path, data)
}

// probeParallel bounds the dials a probe round has in flight. A console that does not answer
// holds its slot for the whole timeout, so the bound sets how long a round lasts: with 128, the
// 100 dead consoles among 1,000 of SPEC P1 are all waited on at once and the round takes about one
// timeout (64 would take two waves, over P1's 2 s). Unbounded, a round would hold a goroutine and
// a socket per console; 128 of each at a time is small beside the streams the door carries.
const probeParallel = 128

// Probe dials every console once (timeout each) and records whether it answered. At most
// probeParallel dials are in flight, so a console that does not answer delays only its own
// answer, and a round lasts at most (timeout + probeGrace) × ⌈dead consoles / probeParallel⌉ plus
// the live dials: with probeTimeout, 1.25 s for the 100 dead consoles among 1,000 of SPEC P1.
func (r *Registry) Probe(ctx context.Context, timeout time.Duration) {
	snap := r.snapshot()
	consoles := make([]Console, 0, len(snap))
	for _, c := range snap {
		consoles = append(consoles, c)
	}
	var next atomic.Int64 // the index of the next console to probe
	var workers sync.WaitGroup
	for range min(probeParallel, len(consoles)) {
		workers.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(consoles)); i = next.Add(1) - 1 {
				r.probeOne(ctx, consoles[i], timeout)
			}
		})
	}
	workers.Wait()
}

// probeGrace is how long past its timeout a probe waits for its dial's answer: the dial's own
// last look at its console (peercred.DialOwn judges a console that has not accepted by the
// deadline by its listening socket) comes just after the deadline.
const probeGrace = 250 * time.Millisecond

// probeOne dials c and records the answer, unless c changed or a newer observation (a failed
// forward, another probe, a new registration) was recorded while it dialled. The dial has
// timeout; its answer is waited for probeGrace longer, no more: a dial that has not answered by
// then is recorded down and left to end by itself (its answer is dropped), so that not even a
// dialer that overstays its context holds a round past its consoles' timeouts.
func (r *Registry) probeOne(ctx context.Context, c Console, timeout time.Duration) {
	r.hmu.Lock()
	start := r.health[c.ID].seq
	r.hmu.Unlock()
	dialCtx, cancelDial := r.probeDeadline(ctx, timeout)
	waitCtx, cancel := r.probeDeadline(ctx, timeout+probeGrace)
	answer := make(chan error, 1) // buffered: an abandoned dial's answer goes nowhere
	go func() { answer <- r.dial(dialCtx, c.Addr); cancelDial() }()
	var err error
	select {
	case err = <-answer:
	case <-waitCtx.Done():
		err = waitCtx.Err()
	}
	cancel()
	r.hmu.Lock()
	defer r.hmu.Unlock()
	h := r.health[c.ID]
	if cur, ok := r.snapshot()[c.ID]; !ok || cur.Addr != c.Addr || h.seq != start {
		return
	}
	r.seq++
	h.seq = r.seq
	h.state = HealthDown
	if err == nil {
		h.state = HealthUp
		h.lastSeen = r.now().UTC()
	}
	r.health[c.ID] = h
}

// markSeen records that the console made itself heard (a refresh), without judging its health.
func (r *Registry) markSeen(id string, at time.Time) {
	r.hmu.Lock()
	h := r.health[id]
	h.lastSeen = at
	r.health[id] = h
	r.hmu.Unlock()
}

// markDown records that a forward to the console failed.
func (r *Registry) markDown(id string) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	if _, ok := r.Get(id); !ok { // under hmu: a Delete that published first has its health gone
		return
	}
	h := r.health[id]
	r.seq++
	h.state, h.seq = HealthDown, r.seq
	r.health[id] = h
}

// dialProbe is the probe: does a process of this user accept a connection at addr? It dials as
// the hop does (proxy.DialConsole: the socket's owner is checked), so a console is shown up only
// when a forward to it could be sent. A port that another user's process holds (the console died
// and someone took its port) counts as down: the hop sends it nothing (502
// console-other-user), and the listing must not say all is well.
func dialProbe(ctx context.Context, addr string) error {
	conn, err := proxy.DialConsole(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
	}
	return err
}
