package reach

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/phase-console/fleet/internal/fdlimit"
)

// This file bounds the door's connections (SPEC R6c), so that a stranger who holds connections
// open takes neither door down: not this one, whose newcomers must still get in, and not the
// loopback door, which shares the process's file descriptors.

// The connection bounds of SPEC R6c. A stranger's connection is one that has not shown a valid
// device credential; a device's has (on any request on it).
const (
	// SourceConnLimit is how many strangers' connections one source (an IPv4 address, an IPv6
	// /64: the Limiter's sources) may hold at once.
	SourceConnLimit = 64
	// StrangerConnLimit is how many strangers' connections the door holds at once, from all
	// sources together.
	StrangerConnLimit = 1024
	// StrangerIdleTimeout is how long a stranger's connection with no request in flight stays
	// open: from its accept, and from the end of each of its requests.
	StrangerIdleTimeout = 10 * time.Second
)

// fallbackConnCapacity is how many connections the door holds at most when the process's limit
// on open files cannot be read (a system without RLIMIT_NOFILE).
const fallbackConnCapacity = 4096

// evictionLogEvery is how often at most the door says that it evicted connections: one line with
// the counts since the last, not one per connection, so that a flood does not flood the log.
const evictionLogEvery = time.Minute

// connHooks are this package's tests' hooks into the connection bounds (Config.conns).
type connHooks struct {
	capacity  int                                                // not zero: replaces half the soft limit on open files
	afterFunc func(d time.Duration, f func()) (stop func() bool) // nil: time.AfterFunc
	// serverTimeout, when not zero, replaces the server's ReadHeaderTimeout (which bounds the
	// TLS handshake too) and IdleTimeout: connections held by a slow test are then closed by
	// nothing but the bounds under test.
	serverTimeout time.Duration
}

// connTable holds the door's connections and enforces SPEC R6c on them:
//
//   - A stranger's connection is on two lists, oldest first: its source's and the door's. A new
//     connection that would make its source's list longer than SourceConnLimit evicts the oldest
//     of that source; one that would make the door's longer than StrangerConnLimit evicts the
//     oldest of all. Eviction happens in Accept, before the new connection's TLS handshake, and
//     closes the evicted connection's socket at once, whatever it was doing.
//   - The door holds at most capacity connections, strangers' and devices' together: half the
//     soft limit on open files when the door opened (fleet serve raised it to the hard limit at
//     start), so the other half is always left to the loopback door, the registry API, the
//     consoles' connections and the state files. A new connection past it evicts the oldest
//     stranger's; when only devices' connections are held, the new one is closed.
//   - A connection whose request showed a valid device credential (credentialShown) leaves both
//     lists: it is never evicted, is not closed for idling before net/http's IdleTimeout, and
//     counts against neither bound, only against capacity. When its device is revoked it is a
//     stranger's again, the newest (revoke).
//   - A stranger's connection with no request in flight — from its accept, through its TLS
//     handshake and the wait for its first request, and from the end of each answer — is closed
//     after idle (StrangerIdleTimeout); net/http's ConnState says when a request starts and ends,
//     on HTTP/1.1 and HTTP/2 alike. A request head that is still arriving is not yet in flight.
//
// Every step is O(1): no step looks at all connections (revoke looks at the devices' only).
type connTable struct {
	log       *slog.Logger
	now       func() time.Time
	idle      time.Duration
	afterFunc func(time.Duration, func()) func() bool

	mu        sync.Mutex
	capacity  int // connections held at most, strangers' and devices' together
	held      int
	strangers connList                // every stranger's connection
	sources   map[sourceKey]*connList // strangers' connections by source; a source with none is forgotten
	devices   map[*conn]struct{}
	evicted   evictionCounts // since the last log line
	loggedAt  time.Time
}

// evictionCounts are the connections evicted (or, with only devices' connections held, refused),
// by the bound that made room.
type evictionCounts struct{ source, overall, capacity, refused int }

func newConnTable(log *slog.Logger, now func() time.Time, hooks *connHooks) *connTable {
	t := &connTable{log: log, now: now, idle: StrangerIdleTimeout, capacity: connCapacity(),
		afterFunc: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
		sources:   map[sourceKey]*connList{}, devices: map[*conn]struct{}{}}
	t.strangers.links = allLinks
	if hooks != nil {
		if hooks.capacity > 0 {
			t.capacity = hooks.capacity
		}
		if hooks.afterFunc != nil {
			t.afterFunc = hooks.afterFunc
		}
	}
	return t
}

// configure makes srv, the door's server, tell t of its connections' requests.
func (t *connTable) configure(srv *http.Server, hooks *connHooks) {
	srv.ConnContext = t.connContext
	srv.ConnState = t.connState
	if hooks != nil && hooks.serverTimeout > 0 {
		srv.ReadHeaderTimeout, srv.IdleTimeout = hooks.serverTimeout, hooks.serverTimeout
	}
}

// connCapacity is half the soft limit on open files now in force.
func connCapacity() int {
	soft, _, err := fdlimit.Soft()
	if err != nil || soft == 0 {
		return fallbackConnCapacity
	}
	return int(min(soft/2, math.MaxInt32))
}

// conn is one accepted connection. Its fields after key are guarded by its table's mu.
type conn struct {
	net.Conn
	table *connTable
	key   sourceKey

	kind          connKind
	all, bySource links
	src           *connList // its source's list, while a stranger's
	id6           string    // the device that last showed its credential on it
	active        bool      // a request in flight (or hijacked: no longer net/http's to idle)
	stopIdle      func() bool
	idleGen       uint64 // an idle timer armed for another generation does nothing
}

type connKind uint8

const (
	strangerConn connKind = iota
	deviceConn
	goneConn // evicted, idled out or closed: in no list, counted nowhere
)

// Close forgets c and closes its socket.
func (c *conn) Close() error {
	c.table.forget(c)
	return c.Conn.Close()
}

// boundedListener admits each accepted connection into its table before handing it on (to TLS).
type boundedListener struct {
	net.Listener
	table *connTable
}

// listener wraps ln: its connections are bounded by t.
func (t *connTable) listener(ln net.Listener) net.Listener {
	return &boundedListener{Listener: ln, table: t}
}

// Accept accepts the next connection the table admits. Connections it evicts to make room are
// closed before the new one is returned, so before any TLS work for it; one it refuses (only
// devices' connections held, at capacity) is closed and the next is accepted.
func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, evicted, report := l.table.admit(raw)
		for _, e := range evicted {
			e.Conn.Close()
		}
		if report != nil {
			l.table.log.Warn("fleet.reach-conn-evicted", report...)
		}
		if c == nil {
			raw.Close()
			continue
		}
		return c, nil
	}
}

// admit is Accept's step for raw, under the table's lock: it makes room for raw (evicted, to be
// closed by the caller) and holds it as a stranger's, or refuses it (c nil). report, when not
// nil, is the log line to write about evictions.
func (t *connTable) admit(raw net.Conn) (c *conn, evicted []*conn, report []any) {
	c = &conn{Conn: raw, table: t, key: keyOf(peerOf(raw))}
	t.mu.Lock()
	defer t.mu.Unlock()
	evicted = t.makeRoomLocked(c.key, 1)
	if t.held >= t.capacity {
		t.evicted.refused++
		return nil, evicted, t.reportLocked()
	}
	t.held++
	t.enlistLocked(c)
	if len(evicted) > 0 {
		report = t.reportLocked()
	}
	return c, evicted, report
}

// makeRoomLocked evicts the strangers' connections that one more stranger's from key would put
// past a bound; extra is 1 for a new connection, 0 for one already held (a device's, demoted).
func (t *connTable) makeRoomLocked(key sourceKey, extra int) (evicted []*conn) {
	if s := t.sources[key]; s != nil && s.n >= SourceConnLimit {
		t.evicted.source++
		evicted = append(evicted, t.removeLocked(s.oldest))
	}
	for t.strangers.n > 0 && (t.strangers.n >= StrangerConnLimit || t.held+extra > t.capacity) {
		if t.strangers.n >= StrangerConnLimit {
			t.evicted.overall++
		} else {
			t.evicted.capacity++
		}
		evicted = append(evicted, t.removeLocked(t.strangers.oldest))
	}
	return evicted
}

// reportLocked is the eviction log line's attributes when one is due (evictionLogEvery), else nil.
func (t *connTable) reportLocked() []any {
	now := t.now()
	if !t.loggedAt.IsZero() && now.Sub(t.loggedAt) < evictionLogEvery {
		return nil
	}
	e := t.evicted
	t.evicted, t.loggedAt = evictionCounts{}, now
	return []any{"by_source", e.source, "by_overall", e.overall, "by_capacity", e.capacity, "refused", e.refused,
		"strangers", t.strangers.n, "held", t.held, "capacity", t.capacity}
}

// enlistLocked makes c a stranger's connection, the newest of its source and of all.
func (t *connTable) enlistLocked(c *conn) {
	c.kind = strangerConn
	s := t.sources[c.key]
	if s == nil {
		s = &connList{links: sourceLinks}
		t.sources[c.key] = s
	}
	c.src = s
	s.push(c)
	t.strangers.push(c)
	if !c.active {
		t.armLocked(c)
	}
}

// delistLocked takes the stranger's connection c off both lists.
func (t *connTable) delistLocked(c *conn) {
	t.strangers.remove(c)
	c.src.remove(c)
	if c.src.n == 0 {
		delete(t.sources, c.key)
	}
	c.src = nil
}

// removeLocked forgets c, whatever it was, and returns it: its socket is the caller's to close.
func (t *connTable) removeLocked(c *conn) *conn {
	switch c.kind {
	case goneConn:
		return c
	case strangerConn:
		t.delistLocked(c)
	case deviceConn:
		delete(t.devices, c)
	}
	t.disarmLocked(c)
	c.kind = goneConn
	t.held--
	return c
}

// forget forgets c (closed, by net/http or anyone else); forgetting it twice does nothing.
func (t *connTable) forget(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(c)
}

// armLocked starts c's idle timer.
func (t *connTable) armLocked(c *conn) {
	t.disarmLocked(c)
	gen := c.idleGen
	c.stopIdle = t.afterFunc(t.idle, func() { t.idledOut(c, gen) })
}

// disarmLocked stops c's idle timer, and makes one that already fired do nothing.
func (t *connTable) disarmLocked(c *conn) {
	if c.stopIdle != nil {
		c.stopIdle()
		c.stopIdle = nil
	}
	c.idleGen++
}

// idledOut closes c when it is still the idle stranger's connection its timer gen was armed for.
func (t *connTable) idledOut(c *conn, gen uint64) {
	t.mu.Lock()
	due := c.kind == strangerConn && !c.active && c.idleGen == gen
	if due {
		t.removeLocked(c)
	}
	t.mu.Unlock()
	if due {
		c.Conn.Close()
	}
}

// connState is the door's http.Server.ConnState: it tells the table when a request is in flight.
func (t *connTable) connState(nc net.Conn, state http.ConnState) {
	c := connOf(nc)
	if c == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch state {
	case http.StateActive, http.StateHijacked:
		c.active = true
		t.disarmLocked(c)
	case http.StateIdle:
		c.active = false
		if c.kind == strangerConn {
			t.armLocked(c)
		}
	case http.StateClosed:
		t.removeLocked(c)
	}
}

// connKey holds a request's *conn in its context (connContext).
type connKey struct{}

// connContext is the door's http.Server.ConnContext: every request on nc, HTTP/1.1 or HTTP/2,
// can find its connection.
func (t *connTable) connContext(ctx context.Context, nc net.Conn) context.Context {
	if c := connOf(nc); c != nil {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// credentialShown records that r, on its connection, showed the valid credential of device id6:
// the connection is a device's from now on (never evicted, counted against neither bound).
func (t *connTable) credentialShown(r *http.Request, id6 string) {
	c, _ := r.Context().Value(connKey{}).(*conn)
	if t == nil || c == nil || c.table != t {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch c.kind {
	case goneConn:
		return
	case strangerConn:
		t.delistLocked(c)
		t.disarmLocked(c)
		c.kind = deviceConn
		t.devices[c] = struct{}{}
	}
	c.id6 = id6
}

// revoke makes the connections on which device id6 last showed its credential strangers' again,
// each the newest of its source and of all, evicting what that puts past a bound: a revoked
// device is a stranger (its next request on them is refused as one, R10).
func (t *connTable) revoke(id6 string) {
	if t == nil {
		return
	}
	var evicted []*conn
	t.mu.Lock()
	for c := range t.devices {
		if c.id6 != id6 {
			continue
		}
		delete(t.devices, c)
		evicted = append(evicted, t.makeRoomLocked(c.key, 0)...)
		t.enlistLocked(c)
	}
	t.mu.Unlock()
	for _, e := range evicted {
		e.Conn.Close()
	}
}

// connOf is the door's own connection under nc, the *tls.Conn net/http serves.
func connOf(nc net.Conn) *conn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, _ := nc.(*conn)
	return c
}

// peerOf is the address of raw's TCP peer: the source of its connection (never a header).
func peerOf(raw net.Conn) netip.Addr {
	if ta, ok := raw.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr()
	}
	ap, _ := netip.ParseAddrPort(raw.RemoteAddr().String())
	return ap.Addr()
}

// links are a connection's place in one list.
type links struct{ older, newer *conn }

func allLinks(c *conn) *links    { return &c.all }
func sourceLinks(c *conn) *links { return &c.bySource }

// connList is a list of connections, oldest first, through the links that links picks.
type connList struct {
	oldest, newest *conn
	n              int
	links          func(*conn) *links
}

func (l *connList) push(c *conn) {
	lc := l.links(c)
	lc.older, lc.newer = l.newest, nil
	if l.newest != nil {
		l.links(l.newest).newer = c
	} else {
		l.oldest = c
	}
	l.newest = c
	l.n++
}

func (l *connList) remove(c *conn) {
	lc := l.links(c)
	if lc.older != nil {
		l.links(lc.older).newer = lc.newer
	} else {
		l.oldest = lc.newer
	}
	if lc.newer != nil {
		l.links(lc.newer).older = lc.older
	} else {
		l.newest = lc.older
	}
	lc.older, lc.newer = nil, nil
	l.n--
}
