package reach

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/ca"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
	"github.com/phase-console/fleet/proxy/fastloop"
)

// This file is the direct-reach door itself: what it is opened with, its listener, and the order
// in which it judges a request. What is judged at each step lives beside it: host.go (R5),
// routes.go (R1, R7 and the door's own pages), devices.go (R9 and revocation).

// Devices is the register of paired devices as the door needs it (*pairing.Register is one):
// the device whose credential cred is, or false. now and addr are recorded as its last seen.
type Devices interface {
	Authenticate(cred string, now time.Time, addr string) (pairing.Device, bool)
}

// Consoles is where consoles listen, and which there are, for the device's index.
type Consoles interface {
	proxy.Consoles
	IDs() []string // the registered console ids, sorted
}

// Config is what Open needs. Every field but Pairing, Limiter and Now is required.
type Config struct {
	// Profile is the machine profile's reach: section; it must open the door (mode direct).
	Profile Profile
	// TLSDir is the CA's folder, <stateHome>/fleet/reach/tls (package ca).
	TLSDir string
	// Hop is the hop the loopback door uses too: one hop, one set of rules (R9).
	Hop      *proxy.Hop
	Consoles Consoles
	Token    proxy.TokenSource
	Devices  Devices
	// Pairing answers the unpaired branch's pages: GET and POST /pair and GET /pair/… (its
	// assets), for paired and unpaired callers alike. It reports a wrong code or password with
	// Door.Failure. Nil: PairingFor's, else a page saying pairing is not set up yet.
	Pairing http.Handler
	// PairingFor, when Pairing is nil, builds the pairing pages for the door being opened, once
	// its CA is open and before it serves: the pages show the door's Fingerprint and report
	// failures with its Failure.
	PairingFor func(d *Door) http.Handler
	// Limiter counts failures (R6). Nil: a new one on Now. The supervisor keeps one across
	// reopenings, so that moving the door forgets no failure.
	Limiter *Limiter
	Log     *slog.Logger
	Now     func() time.Time // nil: time.Now
	// Audit, if not nil, is told of every request the door forwards and every refusal it writes
	// (SPEC G3, G4), as audit.DoorReach.
	Audit audit.Recorder
	// Listen, if not nil, gives the door its listening socket for the profile's address (network
	// tcp4 or tcp6, addr that address): a socket handed over by the process that served the door
	// before (SPEC O3), or a new one. What it returns must listen on exactly that address (R2):
	// anything else is closed and refused. Nil: net.Listen.
	Listen func(network, addr string) (net.Listener, error)

	// wrapListener, for this package's tests only, wraps the door's listener: the attack table
	// gives accepted connections the peer addresses of sources a loopback socket cannot have
	// (another /64, an IPv4-mapped address) to test the limiter through the door.
	wrapListener func(net.Listener) net.Listener
	// answerTimeout, for this package's tests only, replaces AnswerTimeout when not zero.
	answerTimeout time.Duration
	// conns, for this package's tests only, replaces the connection bounds' capacity and idle
	// timers, and the server's timeouts (conns.go).
	conns *connHooks
}

// A Door is the direct-reach door, open and serving on its one address until Close.
//
// Before it judges anything it looks at the device cookie, for R6 and R10: a valid one makes r
// a paired device's, which neither count ever holds back and none of whose refusals is a
// failure (a paired device guesses nothing, and neither strangers sharing its address nor a
// page it loads may lock it out). An unknown or revoked one (or two cookies at once) is cleared
// in the answer, whatever the answer is (R10: pairing.ClearCookie), so that a browser stops
// sending it, and r goes on as unpaired. Then it judges r in this order, the first failing step
// answering:
//
//  1. R5: a Host other than the listen address, with or without its port, or an SNI that is
//     not the Host's address, is 421 host — a failure of a stranger (R6), counted only while
//     its source is not held back already (the Limiter records nothing for a refused source);
//  2. R6b, in S12's place: a request that a browser marks cross-site (Sec-Fetch-Site), other
//     than a top-level GET navigation, is 403 cross-origin, and never a failure. The door asks
//     it here of every request it answers without proxy.Door — an unpaired caller's, and the
//     routes of step 4 — and proxy.Door asks it (its Site) of a paired device's other
//     requests, after S3 and S7 as S7 says;
//  3. R6: a stranger's source the Limiter holds back is 429 rate-limited with an exact
//     Retry-After. A stranger's request holds the place of one failure while it is judged
//     (Limiter.Admit), so parallel guesses get no more past the limiter than one at a time
//     would. A refused credential is a failure only on a request that needs one, a console
//     path (R10): never on the routes of step 4, which any caller gets (R7), nor on the root or
//     another path that an unpaired caller is sent on from;
//  4. the door's own routes: GET /ca.crt (the root), GET /fleet.css (fleet's one stylesheet,
//     which every page of the door links to), /pair and /pair/… (Config.Pairing), whose
//     wrong code or password is a stranger's failure (Door.Failure);
//  5. R7: an unpaired caller is sent (303) to /pair for everything else;
//  6. a paired device goes through proxy.Door, the judgement both doors share (S3, S4, S6,
//     S7, S9, S12, then R6b), asserted as device:<slug>#<id6> from its TCP peer (R9), without
//     its cookie; on the door, /fleet and everything under it — judged on the decoded path, its
//     first segment folded as S7 folds segments — is 403 reach-settings (R1), and / is the
//     device's index of consoles.
//
// Only a paired device's request for a console path is forwarded; every other answer is the
// door's own, and one to a request with a body closes its connection without reading the body
// (S9, proxy.AnswerItself). An answer of the door's own that its caller has not taken within
// AnswerTimeout is given up (S9, R6: answer.go).
type Door struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	listen netip.AddrPort
	// hostText and sniText are listen and its address as a Host and an SNI name spell them:
	// admitHost's quick match.
	hostText, sniText string
	auth              *ca.Authority
	limiter           *Limiter
	router            *httprouter.Router
	door              *proxy.Door
	streams           streams

	ln     net.Listener
	socket net.Listener // the listening socket itself, as Listen gave it: HandOff's to pass on
	srv    *http.Server
	cs     *fastloop.ConnServer // serves ln over TLS: a device's plain requests, then srv (P2)
	served chan struct{}        // closed when Serve returned

	closeOnce sync.Once

	conns *connTable // R6c: the connections held, bounded before any TLS work (conns.go)
}

// Open opens the CA for the profile's address (ca.Open), listens on exactly that address and
// serves the door over TLS until Close. It fails when the profile does not open the door, a
// required field is missing, the CA cannot be opened or the address cannot be bound.
func Open(ctx context.Context, cfg Config) (*Door, error) {
	if !cfg.Profile.Open() || !cfg.Profile.Listen.IsValid() {
		return nil, errors.New("reach: the profile does not open the door")
	}
	if cfg.TLSDir == "" || cfg.Hop == nil || cfg.Consoles == nil || cfg.Token == nil || cfg.Devices == nil || cfg.Log == nil {
		return nil, errors.New("reach: the door is not fully configured")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limiter == nil {
		cfg.Limiter = NewLimiter(cfg.Now)
	}
	d := &Door{cfg: cfg, log: cfg.Log, now: cfg.Now, listen: cfg.Profile.Listen, limiter: cfg.Limiter,
		served: make(chan struct{}), conns: newConnTable(cfg.Log, cfg.Now, cfg.conns)}
	d.hostText, d.sniText = d.listen.String(), d.listen.Addr().String()
	d.streams.init()
	d.door = &proxy.Door{
		Hop:      cfg.Hop,
		Log:      cfg.Log,
		Host:     proxy.HostAdmitterFunc(d.admitHost), // already passed; asked again, it agrees
		Callers:  deviceCallers{},
		Consoles: cfg.Consoles,
		Token:    cfg.Token,
		Pages:    http.HandlerFunc(d.servePairedPage),
		Site:     crossSite, // R6b, in S12's place
		Audit:    cfg.Audit,
		Name:     audit.DoorReach,
		Now:      cfg.Now,
	}

	auth, err := ca.Open(ctx, cfg.TLSDir, d.listen.Addr(), ca.Options{Logger: cfg.Log})
	if err != nil {
		return nil, err
	}
	network := "tcp4"
	if d.listen.Addr().Is6() {
		network = "tcp6"
	}
	listen := cfg.Listen
	if listen == nil {
		listen = net.Listen
	}
	ln, err := listen(network, d.listen.String()) // exactly the profile's address (R2)
	if err != nil {
		auth.Close()
		return nil, fmt.Errorf("reach: listen on %s: %w", d.listen, err)
	}
	if got, ok := ln.Addr().(*net.TCPAddr); !ok || got.AddrPort() != d.listen && netip.AddrPortFrom(got.AddrPort().Addr().Unmap(), got.AddrPort().Port()) != d.listen {
		ln.Close()
		auth.Close()
		return nil, fmt.Errorf("reach: the socket given for %s listens on %s (SPEC R2: exactly the profile's address)", d.listen, ln.Addr())
	}
	d.socket = ln
	if cfg.wrapListener != nil {
		ln = cfg.wrapListener(ln)
	}
	ln = d.conns.listener(ln) // R6c: inside TLS, so that eviction comes before any TLS work
	d.auth, d.ln = auth, ln
	if d.cfg.Pairing == nil && d.cfg.PairingFor != nil {
		d.cfg.Pairing = d.cfg.PairingFor(d)
	}
	d.router = d.newRouter()
	d.srv = proxy.NewServer(d, cfg.Log)
	tlsConfig := d.conns.tlsConfig(auth.TLSConfig()) // R6d: each connection's tickets carry its handle
	d.srv.TLSConfig = tlsConfig                      // what h2 is offered on (net/http reads it in Serve)
	d.srv.HTTP2 = http2Config()                      // S9, R6 (answer.go)
	d.conns.configure(d.srv, cfg.conns)              // R6c
	// P2: the fast loop makes the handshake and serves a paired device's plain requests, after
	// the door's own judgement (admitFast) and proxy.Door's; everything else — an unpaired
	// caller's request, the door's own pages, a body, an upgrade, HTTP/2 — is net/http's, judged
	// whole by ServeHTTP.
	d.cs = &fastloop.ConnServer{Door: d.door, Server: d.srv, Admit: d.admitFast,
		ConsoleField: consoleField, ConnContext: d.conns.connContext}
	go func() {
		defer close(d.served)
		if err := d.cs.Serve(tls.NewListener(ln, tlsConfig)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("fleet.reach-serve", "listen", d.listen.String(), "error", err.Error())
		}
	}()
	return d, nil
}

// Addr is the address the door listens on.
func (d *Door) Addr() netip.AddrPort { return d.listen }

// Fingerprint is the root's SHA-256 fingerprint in groups (ca.FormatFingerprint).
func (d *Door) Fingerprint() string { return d.auth.Fingerprint() }

// LeafExpiry is when the leaf the door serves now expires.
func (d *Door) LeafExpiry() time.Time { return d.auth.LeafExpiry() }

// RootPEM is the root certificate, PEM-encoded, as GET /ca.crt serves it.
func (d *Door) RootPEM() []byte { return d.auth.RootPEM() }

// Close stops the door: the listener, every connection (devices' WebSockets and streams
// included) and the CA's renewals. The loopback door, and the hop, are left as they are.
func (d *Door) Close() error {
	d.closeOnce.Do(func() {
		d.cs.Close()
		<-d.served
		d.streams.cancelAll()
		d.cfg.Hop.CloseUpgraded(func(_, login string) bool { return isDeviceLogin(login) })
		d.auth.Close()
	})
	return nil
}

// Shut closes the door as Close does, and first makes its socket stop listening even where
// another descriptor of it is held — the copy a process keeps to hand the door on (SPEC O3) — so
// that a door the profile moves or turns off refuses connections at its old address instead of
// queueing them for nobody. It is for a door this process alone serves: never one handed over
// (Drain) nor one whose process ends (its descriptors go with it; another process may be serving
// on the same socket).
func (d *Door) Shut() error {
	stopListening(d.socket)
	return d.Close()
}

// Socket is the door's listening socket, unwrapped: what a process that takes the door over is
// handed (SPEC O3). The door keeps serving on it until Close or Drain.
func (d *Door) Socket() net.Listener { return d.socket }

// Drain stops accepting, ends what the door holds open (the hop's event streams and WebSockets
// end with GoingAway, which the supervisor calls for the hop both doors share), lets requests in
// flight finish until ctx ends, then closes the door as Close does. The socket itself is left to
// whoever else holds it: the process the door was handed to serves on.
func (d *Door) Drain(ctx context.Context) error {
	d.cs.EndStreams()         // the fast loop's event streams (P2); the hop's are the supervisor's
	err := d.cs.Shutdown(ctx) // the fast loop's connections, then net/http's
	d.Close()
	return err
}

// PairingAttempt records what the pairing POST r came to (SPEC O7): one access-log line (door
// reach, path /pair, its status and reason word, the new device's login when paired, the TCP
// peer) and one count of fleet_pairing_attempts_total, through Config.Audit. The pairing pages
// report each attempt with it (pairing.HandlerConfig.OnAttempt); an attempt the door itself
// refuses first — its source held back (limited), or a form another site sent (R6b) — it records
// on its own. Call it once per attempt, before the answer is written.
func (d *Door) PairingAttempt(r *http.Request, a pairing.Attempt) {
	if n, ok := r.Context().Value(attemptKey{}).(*attemptNote); ok {
		n.a, n.set = a, true
	}
}

// attemptKey holds the *attemptNote of a pairing POST being answered (recordAttempts).
type attemptKey struct{}

type attemptNote struct {
	a   pairing.Attempt
	set bool
}

// recordAttempts gives each pairing POST that h answers a note for PairingAttempt, and records
// what the note says once h is done: a pairing page that reports no attempt (one that is not
// the real pairing pages) leaves no line.
func (d *Door) recordAttempts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isPairingPost(r) {
			h.ServeHTTP(w, r)
			return
		}
		n := &attemptNote{}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), attemptKey{}, n)))
		if n.set {
			proxy.NotePairing(w, n.a.Result, n.a.Reason, n.a.Login, PairPath, PeerAddr(r))
		}
	})
}

// isPairingPost reports whether r is a pairing attempt: a POST of exactly /pair.
func isPairingPost(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == PairPath && r.URL.RawPath == ""
}

// Failure counts a failure of r's source (R6): the pairing page reports a wrong code or
// password with it. Call it once per failed request. A request with a valid device credential
// fails nothing: a paired device guesses nothing (R6).
func (d *Door) Failure(r *http.Request) {
	if _, ok := deviceFrom(r); ok {
		return
	}
	d.limiter.Failure(PeerAddr(r))
}

// ServeHTTP judges r in the order documented on Door. Every answer, the door's own refusals
// included, is recorded once (Config.Audit, proxy.Door.Recorded).
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil { // a connection whose handshake the fast loop made, then handed to net/http
		st := fastloop.HandedTLS(r.Context())
		if st == nil { // every connection of the door is TLS: fail closed
			proxy.WriteRefusal(w, r, d.log, proxy.Refuse(http.StatusInternalServerError, "internal",
				"the door lost the connection's TLS state"), "door", "reach")
			return
		}
		r = r.WithContext(r.Context())
		r.TLS = st
	}
	d.door.Recorded(w, r, d.serve)
}

// admitFast is the fast loop's Admit (P2): the door's own judgement of a plain GET or HEAD of a
// console path, as serve judges it, for the one kind of request the fast loop may forward — a
// paired device's, whose Host (and SNI) is the door's own. It marks the connection the device's
// (R6c, R6e) and tracks the request for revocation (streams), and returns the request with the
// device in its context for proxy.Door. Anything else is not admitted, with no effect: net/http
// then judges the request whole (ServeHTTP), counting and logging what serve counts and logs.
func (d *Door) admitFast(r *http.Request) (*http.Request, func(), bool) {
	mark := d.streams.mark()
	dev, _, ok, closed := d.authenticate(r)
	if !ok || closed || d.admitHost(r) != nil || !forwards(r, ok) {
		return nil, nil, false
	}
	c, _ := r.Context().Value(connKey{}).(*conn)
	if c == nil {
		return nil, nil, false
	}
	fr := c.fast // only this connection's fast loop touches it
	if fr == nil {
		fr = &fastRequests{stream: stream{rc: fastAnswer{c}}}
		fr.done = func() {
			c.setActive(false)
			d.streams.remove(&fr.stream)
			fr.ctx = admittedContext{}
		}
		c.fast = fr
	}
	if !d.streams.add(&fr.stream, dev.ID6, mark) {
		return nil, nil, false
	}
	c.setActive(true)
	fr.ctx = admittedContext{Context: r.Context(), a: admitted{dev: dev, mark: mark}}
	return r.WithContext(&fr.ctx), fr.done, true
}

// consoleField is the fast loop's ConsoleField: the device cookie never reaches a console (R9),
// as stripDeviceCookie keeps it from the requests net/http forwards.
func consoleField(name, value string) (string, bool) {
	if !strings.EqualFold(name, "Cookie") {
		return value, true
	}
	kept := withoutDeviceCookie(value)
	return kept, kept != ""
}

func (d *Door) serve(w http.ResponseWriter, r *http.Request) {
	r = d.ownAnswer(w, r) // S9: given up after AnswerTimeout, unless notMine forwards r
	src := PeerAddr(r)
	mark := d.streams.mark()                   // before authenticating: a revocation told after it refuses r
	dev, sent, ok, closed := d.authenticate(r) // R6: a valid credential is never held back, and fails nothing
	if closed {
		// R6e: the device holds as many connections as it may, all busy, and this one is closed.
		panic(http.ErrAbortHandler)
	}
	if sent && !ok {
		w.Header().Add("Set-Cookie", pairing.ClearCookie) // R10: the browser stops sending it
	}
	if ref := d.admitHost(r); ref != nil { // R5
		defer proxy.AnswerItself(w, r)()
		if allowed, _ := d.limiter.Allow(src); allowed && !ok {
			d.limiter.Failure(src) // a source already held back adds nothing
		}
		proxy.WriteRefusal(w, r, d.log, ref, "door", "reach")
		return
	}
	anyone := d.servesAnyone(r)
	if !ok || anyone { // R6b here; a device's other requests meet it in proxy.Door, after S3 and S7
		if ref := crossSite(r); ref != nil {
			defer proxy.AnswerItself(w, r)()
			proxy.WriteRefusal(w, r, d.log, ref, "door", "reach")
			if isPairingPost(r) { // O7: a form refused for where it comes from
				proxy.NotePairing(w, audit.PairingForm, "", "", PairPath, src)
			}
			return
		}
	}
	if !forwards(r, ok) {
		defer proxy.AnswerItself(w, r)()
	}
	if !ok {
		allowed, wait, end := d.limiter.Admit(src) // R6, before any password work
		if !allowed {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(wait/time.Second), 10))
			proxy.WriteRefusal(w, r, d.log, proxy.Refuse(http.StatusTooManyRequests, "rate-limited",
				"too many failures from this address; try again later"), "door", "reach")
			if isPairingPost(r) { // O7: an attempt held back before anything was judged
				proxy.NotePairing(w, audit.PairingLimited, "", "", PairPath, src)
			}
			return
		}
		defer end()
	}
	if sent && !ok {
		counted := proxy.IsConsolePath(r.RequestURI) // R10: a failure only where one is needed
		if counted {
			d.limiter.Failure(src)
		}
		d.log.Warn("fleet.reach-unknown-device", "peer", r.RemoteAddr, "counted", counted)
	}
	if ok {
		r = r.WithContext(withAdmitted(r.Context(), dev, mark))
	}
	d.router.ServeHTTP(w, r)
}

// servesAnyone reports whether r is one of the door's own routes, which it serves to any caller
// (R7): /ca.crt, the pairing page, its assets and its POST. A credential is needed for nothing
// there, so a refused one is no failure on them (R10).
func (d *Door) servesAnyone(r *http.Request) bool {
	h, _, _ := d.router.Lookup(r.Method, r.URL.Path)
	return h != nil
}

// forwards reports whether r may be forwarded to a console: a paired device's request (device)
// for a console path. Every other request the door answers itself (notMine, with the same test,
// is where the door hands r on to be forwarded).
func forwards(r *http.Request, device bool) bool {
	return device && proxy.IsConsolePath(r.RequestURI)
}
