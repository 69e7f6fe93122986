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
	"sync/atomic"
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
	// DeviceConnLimit is how many connections one paired device may hold at once (SPEC R6e).
	DeviceConnLimit = 256
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
	strangers connList                   // every stranger's connection
	waiting   connList                   // the strangers' whose ClientHello has not fully arrived (R6d)
	stalled   connList                   // the strangers' the door answered in the handshake and that said nothing since
	sources   map[sourceKey]*sourceConns // strangers' connections by source; a source with none is forgotten
	devices   map[*conn]struct{}         // every device's connection
	byDevice  map[string]*connList       // devices' connections by device, in the order they became its (R6e)
	claims    map[string]int             // claimed connections by device (claimLocked)
	sealer    atomic.Pointer[tls.Config] // seals and opens the door's session tickets (tickets.go)
	handles   map[ticketHandle]string    // a session ticket's handle → the device it was sealed for (R6d, tickets.go)
	rings     map[string]*handleRing     // each device's handles, newest kept
	peekBuf   [peekLimit]byte            // what an eviction asks the kernel for (peekPending)
	evicted   evictionCounts             // since the last log line
	loggedAt  time.Time
}

// sourceConns are one source's strangers' connections: all of them, those of them whose
// ClientHello has not fully arrived, and those stalled in their handshake.
type sourceConns struct{ all, waiting, stalled connList }

// peekLimit is how many not yet read bytes of a connection an eviction looks at: a ClientHello
// is a few hundred bytes, under 2 KiB with a post-quantum key share.
const peekLimit = 4 << 10

// evictionCounts are the connections evicted (or, with only devices' connections held, refused),
// by the bound that made room.
type evictionCounts struct{ source, overall, capacity, refused, device int }

func newConnTable(log *slog.Logger, now func() time.Time, hooks *connHooks) *connTable {
	t := &connTable{log: log, now: now, idle: StrangerIdleTimeout, capacity: connCapacity(),
		afterFunc: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
		sources:   map[sourceKey]*sourceConns{}, devices: map[*conn]struct{}{}, byDevice: map[string]*connList{},
		handles: map[ticketHandle]string{}, rings: map[string]*handleRing{}, claims: map[string]int{}}
	t.strangers.links = allLinks
	t.waiting.links = waitingLinks
	t.stalled.links = stalledLinks
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
	waitAll       links         // on the table's waiting list, while waitingOn
	waitSource    links         // on its source's waiting list, while waitingOn
	stallAll      links         // on the table's stalled list, while stalledOn
	stallSource   links         // on its source's stalled list, while stalledOn
	byDev         links         // on its device's list, while a device's
	src           *sourceConns  // its source's lists, while a stranger's
	peer          netip.Addr    // PeerAddr of its requests, made once (peerAddr)
	peerText      string        // peer as text: a device's last address (peerText)
	fast          *fastRequests // what the fast loop's requests on it reuse (admitFast)
	accepted      time.Time     // when it was accepted (the monotonic clock: helloGrace)
	waitingOn     bool          // on the waiting lists: a stranger's whose ClientHello has not been seen whole
	stalledOn     bool          // on the stalled lists: a stranger's answered in its handshake, silent since
	id6           string        // the device that last showed its credential on it
	claimedBy     string        // the device whose session it offers, while claimedConn
	active        atomic.Bool   // a request in flight (or hijacked: no longer net/http's to idle); set under mu but by the fast loop
	stopIdle      func() bool
	idleGen       uint64 // an idle timer armed for another generation does nothing

	// shownAs is id6 while c is a device's (kind deviceConn), else nil: set and cleared under
	// mu with kind, read without it by credentialShown, which each of the device's requests asks.
	shownAs atomic.Pointer[string]

	// R6d (tickets.go): the handle sealed into the ticket this connection was given, and the
	// one it last showed when resuming (its session's), each when has… is set.
	issued, unwrapped       ticketHandle
	hasIssued, hasUnwrapped bool

	hello    helloState  // its first bytes, until its ClientHello is whole (hello.go)
	helloIn  atomic.Bool // its ClientHello has fully arrived
	doorRead atomic.Bool // the door has read from it (its handshake has begun)
	answered atomic.Bool // the door wrote to it after its ClientHello (its handshake's answer)
	spoke    atomic.Bool // it sent something after that answer
}

// Read reads from the socket, and follows the ClientHello in what it reads until it is whole,
// then whether the client answers the door's handshake.
func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if !c.doorRead.Load() {
			c.doorRead.Store(true)
		}
		if !c.helloIn.Load() {
			if c.hello.read(p[:n], c.table.offeredHandle) {
				c.helloIn.Store(true)
				c.table.greeted(c)
			}
		} else if c.answered.Load() && !c.spoke.Load() && c.spoke.CompareAndSwap(false, true) {
			c.table.unstall(c)
		}
	}
	return n, err
}

// Write writes to the socket; the first write after the ClientHello (the door's answer in the
// handshake) makes c a stalled one until its client sends anything more.
func (c *conn) Write(p []byte) (int, error) {
	if c.helloIn.Load() && !c.answered.Load() && c.answered.CompareAndSwap(false, true) {
		c.table.stall(c)
	}
	return c.Conn.Write(p)
}

type connKind uint8

const (
	strangerConn connKind = iota
	deviceConn
	goneConn // evicted, idled out or closed: in no list, counted nowhere
	// claimedConn is a stranger's whose ClientHello, not read yet, offers to resume a session of
	// a live device (R6d: claimLocked): on no stranger's list until its handshake says whether
	// it resumed it, then a device's or a stranger's again.
	claimedConn
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
	c = &conn{Conn: raw, table: t, key: keyOf(peerOf(raw)), accepted: time.Now()}
	if ap, err := netip.ParseAddrPort(raw.RemoteAddr().String()); err == nil { // as PeerAddr parses r.RemoteAddr
		c.peer, c.peerText = ap.Addr(), ap.Addr().String()
	}
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
// Of the connections it may evict, it evicts first the oldest whose ClientHello has not fully
// arrived, and only when there is none the oldest of all (R6d: firstToEvictLocked).
func (t *connTable) makeRoomLocked(key sourceKey, extra int) (evicted []*conn) {
	// firstToEvictLocked may claim connections (claimLocked), taking them off the strangers'
	// lists: what is left may then be nothing at all.
	if s := t.sources[key]; s != nil && s.all.n >= SourceConnLimit {
		if c := t.firstToEvictLocked(&s.waiting, &s.stalled, &s.all); c != nil && s.all.n >= SourceConnLimit {
			t.evicted.source++
			evicted = append(evicted, t.removeLocked(c))
		}
	}
	for t.strangers.n > 0 && (t.strangers.n >= StrangerConnLimit || t.held+extra > t.capacity) {
		overall := t.strangers.n >= StrangerConnLimit
		c := t.firstToEvictLocked(&t.waiting, &t.stalled, &t.strangers)
		if c == nil {
			break
		}
		if overall && t.strangers.n < StrangerConnLimit && t.held+extra <= t.capacity {
			continue // the claims made room
		}
		if overall {
			t.evicted.overall++
		} else {
			t.evicted.capacity++
		}
		evicted = append(evicted, t.removeLocked(c))
	}
	return evicted
}

// firstToEvictLocked is the oldest connection of waiting whose ClientHello has still not fully
// arrived; when there is none, the oldest of stalled, which the door answered in its handshake
// and which said nothing since (a client that means to go on answers within a round trip; a
// ClientHello that waits for the door's own work is not stalled: a phone's resumed connection,
// queued behind a flood's handshakes, is not evicted for the door's slowness); and when there
// is none of those either, the oldest of all. A connection of waiting whose ClientHello
// has arrived after all — read by no one yet, but in the kernel's buffer (peekPending) — leaves
// the waiting lists for good, so each connection is asked of the kernel at most once with its
// hello whole: an eviction costs O(1) system calls, amortized.
func (t *connTable) firstToEvictLocked(waiting, stalled, all *connList) *conn {
	now := time.Now()
	for c := waiting.oldest; c != nil; c = waiting.oldest {
		if c.helloIn.Load() {
			t.arrivedLocked(c)
			continue
		}
		pending := peekPending(c.Conn, t.peekBuf[:])
		arrived, fresh := c.hello.arrivedWith(pending)
		if !arrived {
			if now.Sub(c.accepted) >= helloGrace {
				return c
			}
			if s := t.stalledLocked(stalled); s != nil {
				return s
			}
			if u := unreadHello(all); u != nil {
				return u
			}
			return c
		}
		c.helloIn.Store(true)
		if fresh {
			t.greetLocked(c)
			t.claimLocked(c, pending)
		} else {
			t.arrivedLocked(c) // the door read it: its read is about to say so
		}
	}
	if c := t.stalledLocked(stalled); c != nil {
		return c
	}
	return all.oldest
}

// unreadHello is the oldest connection of all whose ClientHello is whole in the kernel's buffer
// and not read by the door yet, or nil. An eviction saw it whole and it offered no live device's
// session (else claimLocked took it off all): a stranger's for sure, queued behind the door's
// handshakes, where a young connection still waiting for its hello may be a phone's a moment
// late to write it. One the door has read is left alone: its handshake is under way, and a
// stranger that is not stalled may be a phone pairing. The walk is at most the bound's length.
func unreadHello(all *connList) *conn {
	for c := all.oldest; c != nil; c = all.links(c).newer {
		if c.helloIn.Load() && !c.doorRead.Load() && !c.waitingOn {
			return c
		}
	}
	return nil
}

// stalledLocked is the oldest connection of stalled whose client has still sent nothing since
// the door's answer in its handshake, or nil. One whose client has spoken after all — read by no
// one yet, but in the kernel's buffer — leaves the stalled lists for good.
func (t *connTable) stalledLocked(stalled *connList) *conn {
	for c := stalled.oldest; c != nil; c = stalled.oldest {
		if !c.spoke.Load() && len(peekPending(c.Conn, t.peekBuf[:1])) == 0 {
			return c
		}
		c.spoke.Store(true)
		t.unstallLocked(c)
	}
	return nil
}

// helloGrace is how long after its accept a connection whose ClientHello has not fully arrived
// is still only slow: a client writes its ClientHello as soon as it has connected, so one that
// is not whole a second later is not coming. Until then a connection stalled in its handshake,
// and one whose hello waits unread (unreadHello), is evicted before it, so that a phone's new
// connection, whose ClientHello its own machine is a moment late to write, is not the first to
// go in a flood of stalled handshakes.
const helloGrace = time.Second

// stall puts the stranger's connection c on the stalled lists, unless its client spoke already.
func (t *connTable) stall(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stallLocked(c)
}

func (t *connTable) stallLocked(c *conn) {
	if c.kind != strangerConn || c.stalledOn || c.spoke.Load() {
		return
	}
	t.stalled.push(c)
	c.src.stalled.push(c)
	c.stalledOn = true
}

// unstall takes c off the stalled lists: its client answered the door's handshake.
func (t *connTable) unstall(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unstallLocked(c)
}

func (t *connTable) unstallLocked(c *conn) {
	if !c.stalledOn {
		return
	}
	t.stalled.remove(c)
	c.src.stalled.remove(c)
	c.stalledOn = false
}

// greeted records that the stranger's connection c has its ClientHello whole, read by the door.
func (t *connTable) greeted(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.arrivedLocked(c)
}

// arrivedLocked takes c, whose ClientHello the door has read whole, off the waiting lists, and
// claims it when its hello offers a session of a live device (claimHandleLocked): at once, not
// only when its handshake opens the ticket, for between the two the door computes its key
// share, which a flood's handshakes can make last long enough for a full source bound to turn
// over.
func (t *connTable) arrivedLocked(c *conn) {
	t.greetLocked(c) // unless an eviction did, seeing the hello's last bytes in the kernel's buffer
	if h, ok := c.hello.offer(); ok {
		t.claimHandleLocked(c, h)
	}
}

// greetLocked takes c off the waiting lists, if it is on them.
func (t *connTable) greetLocked(c *conn) {
	if !c.waitingOn {
		return
	}
	t.waiting.remove(c)
	c.src.waiting.remove(c)
	c.waitingOn = false
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
		"by_device", e.device, "strangers", t.strangers.n, "held", t.held, "capacity", t.capacity}
}

// enlistLocked makes c a stranger's connection, the newest of its source and of all.
func (t *connTable) enlistLocked(c *conn) {
	c.kind = strangerConn
	s := t.sources[c.key]
	if s == nil {
		s = &sourceConns{all: connList{links: sourceLinks}, waiting: connList{links: waitingSourceLinks},
			stalled: connList{links: stalledSourceLinks}}
		t.sources[c.key] = s
	}
	c.src = s
	s.all.push(c)
	t.strangers.push(c)
	if !c.helloIn.Load() {
		s.waiting.push(c)
		t.waiting.push(c)
		c.waitingOn = true
	}
	if c.answered.Load() {
		t.stallLocked(c)
	}
	if !c.active.Load() {
		t.armLocked(c)
	}
}

// delistLocked takes the stranger's connection c off both lists.
func (t *connTable) delistLocked(c *conn) {
	t.greetLocked(c)
	t.unstallLocked(c)
	t.strangers.remove(c)
	c.src.all.remove(c)
	if c.src.all.n == 0 {
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
		t.undeviceLocked(c)
	case claimedConn:
		t.unclaimLocked(c)
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
	due := (c.kind == strangerConn || c.kind == claimedConn) && !c.active.Load() && c.idleGen == gen
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
		c.active.Store(true)
		t.disarmLocked(c)
	case http.StateIdle:
		c.active.Store(false)
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
// the connection is a device's from now on (never evicted, counted against neither bound), and
// so is any connection that resumes the session of its ticket (R6d). It reports false when the
// device already held DeviceConnLimit connections, none of them idle: the connection has been
// closed (R6e), and r is to be abandoned.
func (t *connTable) credentialShown(r *http.Request, id6 string) bool {
	c, _ := r.Context().Value(connKey{}).(*conn)
	if t == nil || c == nil || c.table != t {
		return true
	}
	if shown := c.shownAs.Load(); shown != nil && *shown == id6 {
		return true // a device's already, this device's: what promoteLocked would answer
	}
	t.mu.Lock()
	evicted, kept := t.promoteLocked(c, id6)
	t.mu.Unlock()
	t.closeEvicted(c, evicted, kept)
	return kept
}

// closeEvicted closes what promoting c made room with and, when c was not kept, c itself.
func (t *connTable) closeEvicted(c, evicted *conn, kept bool) {
	if evicted != nil {
		evicted.Conn.Close()
	}
	if !kept {
		c.Conn.Close()
	}
}

// promoteLocked makes c a connection of device id6 (R6c), within the device's bound (R6e): when
// the device holds DeviceConnLimit connections already, its oldest idle one is evicted (closed
// by the caller) or, when none is idle, c is (kept false). The handle of the ticket c was given
// is mapped to id6 (R6d).
func (t *connTable) promoteLocked(c *conn, id6 string) (evicted *conn, kept bool) {
	if c.kind == goneConn {
		return nil, false
	}
	if c.kind == deviceConn && c.id6 == id6 {
		return nil, true
	}
	if l := t.byDevice[id6]; l != nil && l.n >= DeviceConnLimit {
		t.evicted.device++
		victim := oldestIdle(l)
		if victim == nil {
			return t.removeLocked(c), false
		}
		evicted = t.removeLocked(victim)
	}
	switch c.kind {
	case strangerConn:
		t.delistLocked(c)
		t.disarmLocked(c)
	case claimedConn:
		t.unclaimLocked(c)
		t.disarmLocked(c)
	case deviceConn:
		t.undeviceLocked(c)
	}
	c.kind = deviceConn
	c.id6 = id6
	shown := id6
	c.shownAs.Store(&shown)
	t.devices[c] = struct{}{}
	l := t.byDevice[id6]
	if l == nil {
		l = &connList{links: deviceLinks}
		t.byDevice[id6] = l
	}
	l.push(c)
	if c.hasIssued {
		t.mapHandleLocked(c.issued, id6)
	}
	return evicted, true
}

// oldestIdle is the oldest connection of l with no request in flight, or nil. It looks at up to
// DeviceConnLimit connections, and only when their device is at its bound.
func oldestIdle(l *connList) *conn {
	for c := l.oldest; c != nil; c = c.byDev.newer {
		if !c.active.Load() {
			return c
		}
	}
	return nil
}

// undeviceLocked takes the device's connection c off its device's list and the devices' set.
func (t *connTable) undeviceLocked(c *conn) {
	c.shownAs.Store(nil)
	delete(t.devices, c)
	if l := t.byDevice[c.id6]; l != nil {
		l.remove(c)
		if l.n == 0 {
			delete(t.byDevice, c.id6)
		}
	}
}

// revoke makes the connections on which device id6 last showed its credential strangers' again,
// each the newest of its source and of all, evicting what that puts past a bound, and forgets
// its tickets' handles (R6d): a revoked device is a stranger (its next request on them is
// refused as one, R10), and a connection resuming one of its sessions is a stranger's too.
func (t *connTable) revoke(id6 string) {
	if t == nil {
		return
	}
	var evicted []*conn
	t.mu.Lock()
	t.dropHandlesLocked(id6)
	if l := t.byDevice[id6]; l != nil {
		for c := l.oldest; c != nil; c = l.oldest {
			t.undeviceLocked(c)
			evicted = append(evicted, t.makeRoomLocked(c.key, 0)...)
			t.enlistLocked(c)
		}
	}
	t.mu.Unlock()
	for _, e := range evicted {
		e.Conn.Close()
	}
}

// connOf is the door's own connection under nc: the *tls.Conn net/http or the fast loop
// serves, or the fast loop's connection handed to net/http, over the *tls.Conn.
func connOf(nc net.Conn) *conn {
	for range 3 {
		switch v := nc.(type) {
		case *conn:
			return v
		case interface{ NetConn() net.Conn }:
			nc = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// setActive records whether the fast loop has a request of c's in flight (R6e: a device's busy
// connection is not closed for its bound).
func (c *conn) setActive(active bool) { c.active.Store(active) }

// peerAddr is PeerAddr(r), parsed once for r's connection: a paired device's every request asks
// it. A request that names no connection of the door's has it parsed.
func peerAddr(r *http.Request) netip.Addr {
	if c, ok := r.Context().Value(connKey{}).(*conn); ok && c.peer.IsValid() {
		return c.peer
	}
	return PeerAddr(r)
}

// peerText is peerAddr(r) as text, made once for r's connection.
func peerText(r *http.Request) string {
	if c, ok := r.Context().Value(connKey{}).(*conn); ok && c.peer.IsValid() {
		return c.peerText
	}
	return PeerAddr(r).String()
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

func allLinks(c *conn) *links           { return &c.all }
func sourceLinks(c *conn) *links        { return &c.bySource }
func waitingLinks(c *conn) *links       { return &c.waitAll }
func waitingSourceLinks(c *conn) *links { return &c.waitSource }
func deviceLinks(c *conn) *links        { return &c.byDev }
func stalledLinks(c *conn) *links       { return &c.stallAll }
func stalledSourceLinks(c *conn) *links { return &c.stallSource }

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
