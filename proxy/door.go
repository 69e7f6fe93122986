package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/contract"
)

// This file is the one judgement of a request at a fleet door (SPEC S3, S7, S9, S12 and the order
// between them, with the door's own Host admission and caller verification plugged in), so that
// every door runs the same checks in the same order and none keeps a copy of a rule.

// A Door judges every request that reaches one of fleet's doors and forwards to a console only
// what passed every check. It is an http.Handler; serve it with NewServer, whose limits it relies
// on (MaxHeaderBytes). Every field marked required must be set before the first request: a Door
// that lacks one refuses every request (500 internal), it never forwards.
type Door struct {
	// Hop forwards admitted requests to consoles. Required.
	Hop *Hop
	// Log receives one fleet.rejected line per refusal (SPEC S11). Required.
	Log *slog.Logger
	// Host is the door's own Host admission (the loopback door's S10, the reach door's R5).
	// Required.
	Host HostAdmitter
	// Callers is the door's own verification of who is calling (the loopback door's S5, the
	// reach door's paired devices). Asked only for /c/<id>/… requests that passed every other
	// check. Required.
	Callers CallerVerifier
	// Consoles finds a console's loopback address by id. Required.
	Consoles Consoles
	// Token is the fleet token asserted on every hop (SPEC S6). Required.
	Token TokenSource
	// FromServe says the door sits behind Tailscale Serve, whose X-Forwarded-Proto names the
	// scheme the caller used (S12's own origin, and X-Forwarded-Proto on the hop). Otherwise the
	// scheme is that of the door's own connection.
	FromServe bool
	// Pages answers every request that is not for a console (its path's first segment is not
	// "c") once it passed the checks every request passes. Nil: 404 not-found.
	Pages http.Handler
	// Site, if not nil, is the door's own judgement of the site a request comes from, asked in
	// S12's place (the reach door's Fetch Metadata rule, SPEC R6b): a Refusal refuses r.
	Site func(r *http.Request) *Refusal

	// Audit, if not nil, is told of every request the door forwards to a console and every
	// refusal it writes, once each answer is complete (SPEC G3, G4; record.go). Nil: nothing is
	// recorded, at no cost.
	Audit audit.Recorder
	// Name is the door's name in what it records: audit.DoorLoopback or audit.DoorReach.
	Name string
	// Now is the clock of what it records (arrival, duration); nil: time.Now. Tests pass a fake.
	Now func() time.Time
	// PeerOrigins, if not nil, is the one exception to S12 (SPEC G2). It is asked only about a
	// request that S12 would refuse and that is a peer's read of the index: GET of exactly "/"
	// (no query), no upgrade, an Accept that names application/json (WantsJSON), exactly one
	// Origin. When it allows that Origin, the request goes to Pages instead, with PeerOrigin(r)
	// naming it, and every answer to it — a refusal too — carries
	// Access-Control-Allow-Origin naming exactly that Origin and Vary: Origin. Anything else
	// with a foreign Origin stays 403 cross-origin.
	PeerOrigins PeerOriginJudge
}

// A PeerOriginJudge says whether the Origin of a peer's read of the index may read the answer
// (SPEC G2). Any error must be false.
type PeerOriginJudge interface {
	AllowsPeerOrigin(r *http.Request) bool
}

// WantsJSON reports whether r asks for JSON: one of its Accept lines names application/json.
// The Door's peer read (PeerOrigins) and the index's choice of JSON over HTML use it alike.
func WantsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "application/json") {
			return true
		}
	}
	return false
}

type peerOriginKey struct{}

// PeerOrigin returns the Origin that the Door allowed to read the answer to r (Door.PeerOrigins),
// and true; false for every other request. A page that sees true answers only what SPEC G2 lets
// a peer's page read.
func PeerOrigin(r *http.Request) (string, bool) {
	o, ok := r.Context().Value(peerOriginKey{}).(string)
	return o, ok && o != ""
}

// A HostAdmitter is a door's own Host admission: nil admits r, a Refusal (421 host) refuses it.
type HostAdmitter interface {
	AdmitHost(r *http.Request) *Refusal
}

// HostAdmitterFunc adapts a function to a HostAdmitter.
type HostAdmitterFunc func(r *http.Request) *Refusal

// AdmitHost calls f(r).
func (f HostAdmitterFunc) AdmitHost(r *http.Request) *Refusal { return f(r) }

// A Caller is who a door verified behind one request: the login the hop asserts and the address
// it puts in X-Forwarded-For.
type Caller struct {
	Login string
	IP    netip.Addr
}

// A CallerVerifier is a door's own verification of its caller. It returns the verified Caller, or
// a Refusal (which the Door writes as it is). A Refusal made after the caller was identified (G1's
// not-granted) comes with that Caller, so that the door records whom it refused (SPEC G3); one
// made after the verifier vouched for the caller's address but identified no one comes with a
// Caller of that address alone, which its log line names (O8). A Refusal is never forwarded,
// whatever Caller comes with it. consoleID is the judged <id> of the request, for a
// refusal that wants to name the console. Any error must be a Refusal: the Door forwards only a
// Caller with a login and a valid address.
type CallerVerifier interface {
	VerifyCaller(r *http.Request, consoleID string) (Caller, *Refusal)
}

// Consoles finds where a console listens: its loopback address ("127.0.0.1:9001"), or false when
// no console has that id.
type Consoles interface {
	Lookup(consoleID string) (addr string, ok bool)
}

// A TokenSource gives the fleet token that the hop asserts (SPEC S6). An error refuses the
// request (503 no-token); *state.Token is one.
type TokenSource interface {
	Current() (string, error)
}

// ServeHTTP judges r in SPEC order, the first failing check answering:
//
//  1. S9: a request head over MaxHeaderBytes is 431 header-too-large;
//  2. the door's Host admission (Host);
//  3. S3: an assertion header, under any spelling, is 400 assertion-sent;
//  4. S7: a request-target with a space, a control byte or DEL anywhere (its query too) is 400
//     bad-path, on every path; then, on a console path only, a path that is not canonical is 400
//     bad-path, a hooks path 403 hooks — before the upgrade and Origin checks, so hooks answers
//     whatever else r carries;
//  5. S9: an upgrade other than WebSocket is 400 bad-upgrade;
//  6. S12: an Origin that is not r's own origin is 403 cross-origin — but for the one peer read
//     of the index that PeerOrigins allows (SPEC G2) —; then the door's Site;
//
// then a request that is not for a console goes to Pages, "/c/<id>" is 308 to "/c/<id>/", and a
// console request goes on:
//
//  7. CONNECT and TRACE are 405 method (one would tunnel past the hop, the other echo the assertion);
//  8. the door's caller verification (Callers); a login that a header cannot carry exactly as
//     verified (a control byte, a tab, a space at either end) is 401 unverified;
//  9. an unknown console is 404 unknown-console;
//  10. a token that cannot be read is 503 no-token;
//
// and only then is r forwarded by the Hop, to the path judged, as the verified caller.
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.Recorded(w, r, d.serve)
}

// serve is ServeHTTP, with w recording the answer when the door records (Recorded).
func (d *Door) serve(w http.ResponseWriter, r *http.Request) {
	v, ok := d.takeJudged(r) // judged already by a connection loop in front (Judged.Context)
	if !ok {
		v = d.judge(r)
	}
	a := recordingOf(w)
	if a != nil {
		a.judged(&v)
	}
	switch {
	case v.refusal != nil:
		d.refuse(w, withVerifiedPeer(r, v.caller.IP), v.refusal) // on the unix door its log line names whom the door verified
	case v.redirect != "":
		defer AnswerItself(w, r)() // the redirect reads no body (unreadBody)
		http.Redirect(w, r, v.redirect, http.StatusPermanentRedirect)
	case v.page:
		// A page may answer without reading a body (a refusal, the index): none is left to
		// net/http's reading with no deadline, whatever the page does (unreadBody).
		defer AnswerItself(w, r)()
		if v.peerOrigin != "" { // SPEC G2: the page's answer, a refusal too, names the Origin
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", v.peerOrigin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "X-Fleet-Reason")
			r = r.WithContext(context.WithValue(r.Context(), peerOriginKey{}, v.peerOrigin))
		}
		d.Pages.ServeHTTP(w, r)
	default:
		if a != nil {
			a.forwarded = true
		}
		d.Hop.Forward(w, r, &v.target)
	}
}

// A verdict is the Door's judgement of one request: exactly one of a refusal, a redirect, a page
// (Pages answers) or a target to forward to.
type verdict struct {
	refusal  *Refusal
	redirect string
	page     bool
	target   Target
	// What is recorded of the request (record.go): the console and path judged, and the caller
	// once identified, whatever the verdict.
	route  Route
	caller Caller
	// peerOrigin, for a page, is the Origin that PeerOrigins allowed (SPEC G2), else "".
	peerOrigin string
}

// Judge is ServeHTTP's judgement of r — the same code, in the same order — writing nothing and
// forwarding nothing: for a door's own connection loop in front of net/http (package
// proxy/fastloop), which must judge no request itself. What it may do with the verdict:
//
//   - when Target reports one, forward r to it (and only to it) with the Hop's own means:
//     Judged.WriteAssertion, Hop.Dial, Hop.AnswerFailed;
//   - otherwise (a refusal, a redirect, a page of the door's own, a Target the Hop would
//     refuse) leave r to ServeHTTP, with the verdict in its context (Judged.Context), so that
//     it is answered (and logged) exactly once, as ServeHTTP answers it.
//
// The verdict is made into j (what j held before is overwritten), so that a connection loop keeps
// it where its exchange uses it, without a copy of it for each request.
func (d *Door) Judge(r *http.Request, j *Judged) {
	j.door, j.method, j.uri = d, r.Method, r.RequestURI
	j.v = d.judge(r)
	v := &j.v
	j.forward = v.refusal == nil && v.redirect == "" && !v.page && v.target.complete()
}

// A Judged is a Door's verdict on one request (Door.Judge). It is opaque: what it allows is read
// with Target, and it is handed back to the Door with Context. The zero Judged forwards nothing
// and is taken by no Door.
type Judged struct {
	door        *Door
	method, uri string // the request judged, for takeJudged to be sure it is the one served
	v           verdict
	forward     bool // v is a Target that Hop.Forward would forward (checked once, in Judge)
}

// Target returns where the request judged is to be forwarded, and true, when the verdict is to
// forward it and the Target is one the Hop forwards (every value it asserts present and a plain
// header value as it stands: Hop.Forward refuses any other). Otherwise it returns false: the
// request is the Door's to answer (ServeHTTP, with Context).
func (j *Judged) Target() (Target, bool) {
	if !j.forward {
		return Target{}, false
	}
	return j.v.target, true
}

// Context returns parent carrying j, so that the Door's ServeHTTP answers the request judged
// with this verdict instead of judging it again. ServeHTTP takes it at most once, only on the
// Door that made it, and only for a request with the method and request-target judged: it is
// for a connection handed to net/http whose next request is the one judged, its bytes as they
// were read.
func (j *Judged) Context(parent context.Context) context.Context {
	if j.door == nil {
		return parent
	}
	return context.WithValue(parent, judgedKey{}, &prejudged{Judged: *j})
}

// prejudged is a Judged in a connection's context (Judged.Context), taken once.
type prejudged struct {
	Judged
	taken atomic.Bool
}

type judgedKey struct{}

// takeJudged returns the verdict on r that Judged.Context put in r's context: only one d made,
// only for the same request, and only once.
func (d *Door) takeJudged(r *http.Request) (verdict, bool) {
	p, _ := r.Context().Value(judgedKey{}).(*prejudged)
	if p == nil || p.door != d || p.method != r.Method || p.uri != r.RequestURI || !p.taken.CompareAndSwap(false, true) {
		return verdict{}, false
	}
	return p.v, true
}

// judge is ServeHTTP's judgement, in the order its comment gives, without writing anything: so
// that a door's own connection loop judges with exactly the same code (Judge).
func (d *Door) judge(r *http.Request) verdict {
	if d.Hop == nil || d.Log == nil || d.Host == nil || d.Callers == nil || d.Consoles == nil || d.Token == nil {
		return verdict{refusal: Refuse(http.StatusInternalServerError, "internal", "the door is not fully set up")}
	}
	// One walk over the header, for S9 and S3.
	fields, assertion := scanHeader(r.Header)
	if ref := checkHeaderSize(r, fields); ref != nil { // S9
		return verdict{refusal: ref}
	}
	if ref := d.Host.AdmitHost(r); ref != nil { // the door's own: S10, R5
		return verdict{refusal: ref}
	}
	if ref := checkNoAssertion(r, assertion); ref != nil { // S3
		return verdict{refusal: ref}
	}
	// S7: the target forwarded is the target judged, in a request line that every console's
	// parser splits alike (method SP target SP version). The HTTP/1 door's parser refuses a
	// target with a space or a control byte; HTTP/2's :path (the reach door) reaches here with
	// any, and a space in the query would be sent on as it came ("GET /x?a /hooks HTTP/1.1").
	if !visibleTarget(r.RequestURI) {
		return verdict{refusal: badPath("refused character in the request-target")}
	}
	// S7: on a console path, bad-path and hooks answer before the upgrade and Origin checks
	// (a hooks path is 403 hooks whatever else the request carries). The redirect of
	// "/c/<id>" waits until the request has passed them.
	isConsole := IsConsolePath(r.RequestURI)
	var route Route
	var redirect *Refusal
	if isConsole {
		var ref *Refusal
		route, ref = JudgePath(r.RequestURI)
		if ref != nil && ref.Status != http.StatusPermanentRedirect {
			return verdict{refusal: ref}
		}
		redirect = ref
	}
	if ref := CheckUpgrade(r); ref != nil { // S9
		return verdict{refusal: ref}
	}
	peerOrigin := ""
	if len(r.Header["Origin"]) != 0 { // S12
		if ref := CheckOrigin(r, RequestProto(r, d.FromServe)); ref != nil {
			if isConsole || !d.peerRead(r) {
				return verdict{refusal: ref}
			}
			peerOrigin = r.Header.Get("Origin") // G2: the one exception
		}
	}
	if d.Site != nil {
		if ref := d.Site(r); ref != nil {
			return verdict{refusal: ref}
		}
	}
	switch {
	case !isConsole && d.Pages != nil:
		return verdict{page: true, peerOrigin: peerOrigin}
	case !isConsole:
		return verdict{refusal: Refuse(http.StatusNotFound, "not-found", "no such page")}
	case redirect != nil:
		return verdict{redirect: redirect.Detail}
	}
	return d.judgeConsole(r, route)
}

// peerRead reports whether r, which S12 refuses, is the one cross-origin request that may be
// answered (SPEC G2): a GET of exactly "/" for JSON, no upgrade, one Origin, that PeerOrigins
// allows.
func (d *Door) peerRead(r *http.Request) bool {
	return d.PeerOrigins != nil && r.Method == http.MethodGet && r.RequestURI == "/" &&
		len(r.Header["Upgrade"]) == 0 && len(r.Header.Values("Origin")) == 1 && WantsJSON(r) &&
		d.PeerOrigins.AllowsPeerOrigin(r)
}

// judgeConsole is /c/<id>/… with its path judged (S7): refuse the methods the hop cannot carry,
// verify the caller, find the console and the token.
func (d *Door) judgeConsole(r *http.Request, route Route) verdict {
	v := verdict{route: route}
	if contract.EqualFoldASCII(r.Method, http.MethodConnect) || contract.EqualFoldASCII(r.Method, http.MethodTrace) {
		// CONNECT would tunnel past the hop; TRACE would echo the assertion back to the caller.
		v.refusal = Refuse(http.StatusMethodNotAllowed, "method", "CONNECT and TRACE are not served")
		return v
	}
	who, ref := d.Callers.VerifyCaller(r, route.ID)
	if ref != nil {
		switch {
		case who.Login != "" && who.IP.IsValid() && plainValue(who.Login):
			v.caller = who // identified, then refused (G1's not-granted): recorded as such
		case who.IP.IsValid():
			// An address the verifier vouched for, though it identified no one: the refusal's
			// log line names it (O8), and no access-log line is written.
			v.caller = Caller{IP: who.IP}
		}
		v.refusal = ref
		return v
	}
	if who.Login == "" || !who.IP.IsValid() {
		// Fail closed: a verifier that names nobody has verified nobody.
		v.refusal = Refuse(http.StatusInternalServerError, "internal", "the door verified no caller")
		return v
	}
	if !plainValue(who.Login) {
		// S5, S6: the login asserted is the login verified, byte for byte. One that a header
		// cannot carry as it is (a control byte, a tab, a space at either end) would be refused
		// by net/http's Transport and cleaned up by the fast loop's writer: neither asserts it.
		// The login itself is not logged: it may hold control bytes.
		v.refusal = Refuse(http.StatusUnauthorized, "unverified",
			"the verified login cannot be asserted as it is: it is not a plain header value")
		return v
	}
	v.caller = who
	addr, ok := d.Consoles.Lookup(route.ID)
	if !ok {
		v.refusal = Refuse(http.StatusNotFound, "unknown-console", "no console is registered with that id")
		return v
	}
	tok, err := d.Token.Current()
	if err != nil {
		v.refusal = Refuse(http.StatusServiceUnavailable, "no-token", "the fleet token file is unusable; see the supervisor's log")
		return v
	}
	v.target = Target{
		ConsoleID: route.ID,
		Addr:      addr,
		Path:      route.Path,
		Login:     who.Login,
		Token:     tok,
		ClientIP:  addrText(who.IP),
		Host:      r.Host,
		Proto:     RequestProto(r, d.FromServe),
	}
	return v
}

// addrText is ip.String(), kept for the addresses asked last, one for each of 16 slots: a door's
// verified callers are few and come back, and making the text allocates on every request.
func addrText(ip netip.Addr) string {
	b := ip.As16()
	slot := &addrTexts[b[15]%uint8(len(addrTexts))]
	if m := slot.Load(); m != nil && m.ip == ip {
		return m.text
	}
	m := &addrTextMemo{ip: ip, text: ip.String()}
	slot.Store(m)
	return m.text
}

var addrTexts [16]atomic.Pointer[addrTextMemo]

type addrTextMemo struct {
	ip   netip.Addr
	text string
}

// plainValue reports whether v can be written as a header value that every parser reads back
// byte for byte: no control byte at all (a tab included) and no space at either end (every
// parser trims those). That is narrower than RFC 9110's field value (which allows a tab inside),
// so it only refuses more; nothing fleet asserts holds a tab. The empty value is one. It is on
// every request's path (the login in judgeConsole, every hop value in Target.complete).
func plainValue(v string) bool {
	return v == "" || v[0] != ' ' && v[len(v)-1] != ' ' && noByteBelow(v, ' ')
}

// visibleTarget reports whether a request-target holds no byte that cannot stand in an HTTP/1
// request line as it is: none at or below 0x20 (a space, a control byte) and no 0x7f. (Bytes
// from 0x80 are left to the path's own judgement, JudgePath, and pass in a query as net/http's
// HTTP/1 server lets them.) It is on every request's path.
func visibleTarget(s string) bool { return noByteBelow(s, ' '+1) }

// noByteBelow reports whether s holds no byte below lo (lo ≤ 0x80) and no 0x7f (DEL). It looks
// at eight bytes at a time, the last word overlapping the one before it; FuzzPlainValue and
// FuzzVisibleTarget hold it to the byte-by-byte rule.
func noByteBelow(s string, lo byte) bool {
	if len(s) < 8 {
		for i := 0; i < len(s); i++ {
			if b := s[i]; b < lo || b == 0x7f {
				return false
			}
		}
		return true
	}
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := uint64(lo) * ones
	for i := 0; ; i += 8 {
		if i > len(s)-8 {
			i = len(s) - 8
		}
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56 // one load
		// A byte below lo (Hacker's Delight's hasless, exact for whether one is, lo ≤ 128), or
		// one equal to 0x7f (haszero of x XOR 0x7f…).
		y := x ^ (0x7f * ones)
		if (x-below)&^x&highs != 0 || (y-ones)&^y&highs != 0 {
			return false
		}
		if i == len(s)-8 {
			return true
		}
	}
}

// refuse writes ref (one fleet.rejected line, SPEC S11).
func (d *Door) refuse(w http.ResponseWriter, r *http.Request, ref *Refusal) {
	log := d.Log
	if log == nil {
		log = slog.Default() // only a Door that is not set up, which refuses everything
	}
	WriteRefusal(w, r, log, ref)
}
