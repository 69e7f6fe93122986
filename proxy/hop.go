package proxy

import (
	"bufio"
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/look"
	"github.com/phase-console/fleet/internal/peercred"
)

// A Target is where one judged, verified request goes and what the hop asserts about it.
type Target struct {
	ConsoleID string // the judged <id>
	Addr      string // the console's loopback address, "127.0.0.1:9001"
	Path      string // the judged path (Route.Path), forwarded exactly
	Login     string // the verified login to assert
	Token     string // the fleet token to assert
	ClientIP  string // the verified caller address, for X-Forwarded-For
	Host      string // the Host the caller used, for X-Forwarded-Host
	Proto     string // "http" or "https", for X-Forwarded-Proto
}

// assertable reports whether every value the hop asserts from t is a plain header value as it
// stands (plainValue): what both hops write on the console's request exactly as it is, or not at
// all. The Door's judgement refuses a login that is not (401 unverified); the rest are fleet's own.
func (t *Target) assertable() bool {
	return plainValue(t.Login) && plainValue(t.Token) && plainValue(t.ClientIP) &&
		plainValue(t.Host) && plainValue(t.Proto) && plainValue(t.ConsoleID)
}

// complete reports whether t holds all that the hop needs (filled), each value assertable as it
// is: a Target that does not is refused (500 internal), never sent — not half-written, not
// cleaned up, and not taken for a console that is down. Forward checks it; so does Door.Judge,
// once a request, for a connection loop's forward (Judged.Target, Judged.WriteAssertion).
func (t *Target) complete() bool { return t.filled() && t.assertable() }

// filled reports whether t has every value the hop needs.
func (t *Target) filled() bool {
	return t.Token != "" && t.Login != "" && t.Addr != "" && t.Path != "" && t.Path[0] == '/' && t.ClientIP != ""
}

// A Hop forwards judged requests to consoles. It is safe for concurrent use; its exported fields
// must be set before its first Forward.
type Hop struct {
	// BodyIdleTimeout cuts off a request body that sends nothing for this long (SPEC S9): the
	// console's request is aborted and the caller gets 408 body-timeout on a closed connection.
	// NewHop sets BodyIdleTimeout; zero or less: never cut.
	BodyIdleTimeout time.Duration
	// AfterFunc starts the body's idle timer; nil: time.AfterFunc. Tests pass a fake clock.
	AfterFunc AfterFunc

	rp     *httputil.ReverseProxy
	dial   DialFunc               // nil: DialConsole (Dial)
	up     *httputil.ReverseProxy // WebSocket upgrades (upgrade.go)
	live   liveConns              // their live connections
	events eventStreams           // live server-sent event streams, for GoingAway (goingaway.go)
	log    *slog.Logger
	onDown func(consoleID string)
}

type forwardKey struct{}

// A forward is one request on its way through the hop: its Target and its body (when cut-able).
type forward struct {
	t    Target // a copy: the caller's Target need not escape to the heap
	body *idleBody
	h1   bool // the request came over HTTP/1: a body left unread closes its connection
}

// A DialFunc opens the connection to a console. The default, DialConsole, checks that the
// console's socket belongs to this same user before the fleet token is sent over it.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// NewHop returns a Hop. log receives one line per failed forward (never a secret); down, if not
// nil, is told the console id of each forward that found no console answering; dial opens
// connections to consoles, nil meaning DialConsole (the owner check of peercred.DialOwn): leaving
// it out never gives an unchecked dialer. Only a test passes another.
func NewHop(log *slog.Logger, down DownMarker, dial DialFunc) *Hop {
	h := &Hop{BodyIdleTimeout: BodyIdleTimeout, log: log}
	if down != nil {
		h.onDown = down.MarkDown
	}
	if dial == nil {
		dial = DialConsole
	}
	h.dial = dial
	transport := &http.Transport{
		Proxy:       nil, // never an environment proxy: the console is on loopback
		DialContext: dial,
		// Keep as many idle connections to a console as requests run at once: each new one
		// costs a dial and the owner check of the console's socket, and a pool smaller than
		// the concurrency churns connections on every burst (a page loading twenty things).
		// Idle ones go after IdleConnTimeout.
		MaxIdleConns:          4 * maxIdlePerConsole,
		MaxIdleConnsPerHost:   maxIdlePerConsole,
		IdleConnTimeout:       idleConnTimeout,
		ResponseHeaderTimeout: 0, // consoles may stream (SSE) or think long; the caller's idle timeouts bound it
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:   h.rewrite,
		Transport: hintsScrubbed{transport},
		// Every answer scrubbed (R9; its 1xx by hintsScrubbed), a switch nobody asked for
		// refused, an answer before the body's end made to close the connection.
		ModifyResponse: h.modifyResponse,
		// ReverseProxy flushes every write of a text/event-stream response and of one without
		// a Content-Length (a stream of unknown length), whatever this says (S9). Any other
		// response is written through net/http's buffer and flushed at least this often, so
		// that a small answer goes out in one write, not one for its head and one per chunk.
		FlushInterval: flushInterval,
		BufferPool:    copyBuffers{},
		ErrorHandler:  h.consoleDown,
		// A console's broken body and the like are operational errors (S9): warn.
		ErrorLog: WarnLogger(log, "fleet.hop-error"),
	}
	h.up = h.newUpgradeProxy(h.rp, dial)
	return h
}

// hintsScrubbed is the hop's Transport: http.Transport, with every informational answer (103
// Early Hints) scrubbed as a final one is (R9: ScrubConsoleAnswer) before ReverseProxy passes it
// on. ReverseProxy copies a 1xx's header to the caller in its own ClientTrace.Got1xxResponse,
// which ModifyResponse never sees; a trace added here is composed before it (httptrace: the hooks
// of the trace added last are called first), so it scrubs the very header map that ReverseProxy
// then copies.
type hintsScrubbed struct{ *http.Transport }

var scrubHints = &httptrace.ClientTrace{Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
	ScrubConsoleAnswer(http.Header(h))
	return nil
}}

func (t hintsScrubbed) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := *scrubHints // WithClientTrace composes into the trace it is given: a copy each time
	return t.Transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), &trace)))
}

const (
	maxIdlePerConsole = 256
	idleConnTimeout   = 30 * time.Second
	flushInterval     = 50 * time.Millisecond
	copyBufferSize    = 32 << 10
)

// copyBuffers is the ReverseProxy's pool of copy buffers, so that a response does not allocate
// 32 KiB. It pools array pointers, which go in and out of an interface without an allocation.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().(*[copyBufferSize]byte)[:] }

func (copyBuffers) Put(b []byte) {
	if len(b) == copyBufferSize {
		copyBufferPool.Put((*[copyBufferSize]byte)(b))
	}
}

// WarnLogger is a *log.Logger for net/http's ErrorLog fields (accept errors, panics, broken
// bodies: SPEC S9 wants them seen): each line becomes one slog warning with msg event and the
// line in "error".
func WarnLogger(l *slog.Logger, event string) *log.Logger {
	return log.New(warnWriter{l, event}, "", 0)
}

type warnWriter struct {
	l     *slog.Logger
	event string
}

func (w warnWriter) Write(p []byte) (int, error) {
	w.l.Warn(w.event, "error", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// Forward sends r to t. The caller has already judged r (CheckNoAssertion, JudgePath, CheckUpgrade,
// CheckOrigin) and verified who is calling; Forward refuses (and never forwards) a Target without
// a token, a login or an address, or with a value that a header cannot carry as it is (complete).
func (h *Hop) Forward(w http.ResponseWriter, r *http.Request, t *Target) {
	if !t.complete() {
		WriteRefusal(w, r, h.log, Refuse(http.StatusInternalServerError, "internal", "the hop was not given what it asserts"))
		return
	}
	var f *forward
	if a := recordingOf(w); a != nil {
		f = &a.fwd // the recording's, allocated already (record.go)
		*f = forward{t: *t}
	} else {
		f = &forward{t: *t}
	}
	if isUpgrade(r.Header) {
		h.forwardUpgrade(w, r, f)
		return
	}
	if !hasBody(r) { // the common case: nothing more to it
		h.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, f)))
		return
	}
	after := h.AfterFunc
	if after == nil {
		after = realAfterFunc
	}
	ctrl := http.NewResponseController(w)
	f.body = &idleBody{body: r.Body, idle: h.BodyIdleTimeout, after: after, ctrl: ctrl}
	r.Body = f.body
	f.h1 = r.ProtoMajor == 1
	if f.h1 {
		// The body is the Transport's alone to read, while the answer is written too (S9: the
		// hop streams both ways). Otherwise net/http's server, which cannot tell the hop's
		// idleBody from a body the handler left, reads up to 256 KiB of it itself as the
		// answer's head is written: with no deadline (a caller that goes quiet holds the
		// connection for ever), and from under the Transport (a console that answers first and
		// reads the upload after gets it with a hole in its middle).
		ctrl.EnableFullDuplex()
	}
	h.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, f)))
	if f.h1 && !f.body.eof.Load() {
		// The answer is written, and said "Connection: close" (modifyResponse, answerFailed):
		// nothing more is read of the body. The read deadline is set in the past (leaveBody),
		// which ends a read the Transport's writer may still be waiting in, and the body is
		// closed here, under that deadline: once the handler returns, net/http's server would
		// first end such a read itself and clear the deadline (connReader.abortPendingRead),
		// then read up to 256 KiB of what is left with none, to close the body.
		leaveBody(w)
		f.body.Close()
	}
}

// modifyResponse is the hop's ReverseProxy's ModifyResponse: what it does to every console's
// answer before a byte of it is passed on.
func (h *Hop) modifyResponse(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		// A switch nobody asked for (h.rp never carries an upgrade: forwardUpgrade; and h.up's
		// upgradeTransport never returns a 101, it takes the connection over). Failed here,
		// ReverseProxy closes the answer's body, which is the console's connection (its own
		// refusal of the switch would leave that open until the garbage collector found it),
		// and answers 502 through the ErrorHandler as it would have.
		return errors.New("console answered 101 to a request that asked for no protocol switch")
	}
	// R9: no console sets fleet's own cookies nor speaks for the whole origin.
	ScrubConsoleAnswer(res.Header)
	if isEventStream(res.Header) {
		res.Body = h.events.track(res.Body) // ended cleanly by GoingAway (SPEC O3)
	}
	if res.Request == nil || res.Request.ContentLength == 0 {
		return nil // no body (hasBody): nothing more to it
	}
	if f, _ := res.Request.Context().Value(forwardKey{}).(*forward); f != nil && f.h1 && f.body != nil && !f.body.eof.Load() {
		// The console answers before the Transport read the whole body: the caller's
		// connection closes after this answer, so that nothing more is read of it (Forward).
		res.Header.Set("Connection", "close")
	}
	return nil
}

// rewrite is the whole hop, as pure steps on the outgoing request. httputil.ReverseProxy has
// already removed hop-by-hop headers (and those named in Connection) and X-Forwarded-* from Out.
func (h *Hop) rewrite(pr *httputil.ProxyRequest) {
	t := &pr.In.Context().Value(forwardKey{}).(*forward).t
	out := pr.Out

	// The path forwarded is exactly the path judged (S7); the query passes as sent.
	out.URL.Scheme = "http"
	out.URL.Host = t.Addr
	out.URL.Path = t.Path
	out.URL.RawPath = ""
	out.URL.RawQuery = pr.In.URL.RawQuery
	out.Host = t.Addr // S6: the console sees its own loopback address

	out.Trailer = nil // S3: request trailers are never forwarded
	assertOnto(out.Header, t)
}

// assertOnto makes h, a request's headers with the hop-by-hop ones already gone, what the console
// is sent: every identity header the caller wrote removed (S4), then the hop's own X-Forwarded-*
// and both assertion headers (S6) set: the map path's (rewrite's). Judged.WriteAssertion writes
// the same six lines for a connection loop that writes heads from lines.
func assertOnto(h http.Header, t *Target) {
	ScrubIdentity(h) // S4
	// The door answered the caller's Expect: 100-continue itself (net/http sends the 100 when
	// the hop first reads the body); passed on, the console would send a second 100 of its own.
	delete(h, "Expect")

	// ScrubIdentity removed every spelling of these names, so assigning is setting. The six
	// values share one backing array (Header.Set would allocate one each); each is capped at
	// one so that an Add to one never writes into the next.
	v := [...]string{t.ClientIP, t.Host, t.Proto, "/c/" + t.ConsoleID, t.Token, t.Login}
	h["X-Forwarded-For"] = v[0:1:1]
	h["X-Forwarded-Host"] = v[1:2:2]
	h["X-Forwarded-Proto"] = v[2:3:3]
	h["X-Forwarded-Prefix"] = v[3:4:4]
	h[contract.HeaderFleet] = v[4:5:5]
	h[contract.HeaderFleetLogin] = v[5:6:6]
}

// WriteAssertion writes the hop's own header lines for the request j judged, as assertOnto sets
// them on the map path (S6; S4 is the writer's: every caller line that IsIdentityName names is
// left out): X-Forwarded-For, -Host, -Proto and -Prefix, then both assertion headers, each
// "Name: value\r\n" with the value exactly as verified — never cleaned up. Unless j forwards
// (Judged.Target), it writes nothing and returns ErrUnwritable.
func (j *Judged) WriteAssertion(w *bufio.Writer) error {
	if !j.forward {
		return ErrUnwritable
	}
	t := &j.v.target
	writeLine(w, "X-Forwarded-For", t.ClientIP)
	writeLine(w, "X-Forwarded-Host", t.Host)
	writeLine(w, "X-Forwarded-Proto", t.Proto)
	w.WriteString("X-Forwarded-Prefix: /c/") // "/c/" + t.ConsoleID, without a string made of them
	w.WriteString(t.ConsoleID)
	w.WriteString("\r\n")
	writeLine(w, contract.HeaderFleet, t.Token)
	writeLine(w, contract.HeaderFleetLogin, t.Login)
	return nil
}

// writeLine writes "name: value\r\n".
func writeLine(w *bufio.Writer, name, value string) {
	w.WriteString(name)
	w.WriteString(": ")
	w.WriteString(value)
	w.WriteString("\r\n")
}

// ErrUnwritable is a console's request that a hop will not write: a value that a header or a
// request line cannot carry as it is. Nothing of it was sent, and it is no fault of the
// console's: Hop.AnswerFailed answers it 500 internal.
var ErrUnwritable = errors.New("proxy: the hop made a request it cannot write")

// Dial opens a connection to the console at addr with the Hop's dialer: DialConsole, the owner
// check of the console's socket, unless NewHop was given another (tests). A connection loop's own
// exchange dials with it, so that the fleet token goes to no process of another user's.
func (h *Hop) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if h.dial == nil {
		return DialConsole(ctx, network, addr)
	}
	return h.dial(ctx, network, addr)
}

// AnswerFailed answers, on w, a bodiless request r that j judged for forwarding and whose forward
// by other means than Forward (a connection loop's own exchange) failed with err, exactly as
// Forward answers its own failures: ErrUnwritable is 500 internal; a caller gone
// (context.Canceled) is status 499 with nothing written, for the loop to close the connection;
// a console of another user (peercred.ErrOtherUser) is 502 console-other-user; anything else is
// the console down: marked down (DownMarker), logged, 502 with a short page.
func (h *Hop) AnswerFailed(w http.ResponseWriter, r *http.Request, j *Judged, err error) {
	if errors.Is(err, ErrUnwritable) {
		WriteRefusal(w, r, h.log, Refuse(http.StatusInternalServerError, "internal", "the hop made a request it cannot write"))
		return
	}
	h.answerFailed(w, r, &forward{t: j.v.target}, err)
}

// consoleDown is the ReverseProxy's ErrorHandler: a forward that failed.
func (h *Hop) consoleDown(w http.ResponseWriter, r *http.Request, err error) {
	f, _ := r.Context().Value(forwardKey{}).(*forward)
	h.answerFailed(w, r, f, err)
}

// answerFailed answers a forward f of r that failed with err: the caller's own fault (a stalled
// or malformed body), the caller gone, a console of another user, or the console down (marked
// down, 502 with a short page).
func (h *Hop) answerFailed(w http.ResponseWriter, r *http.Request, f *forward, err error) {
	id := ""
	if f != nil {
		id = f.t.ConsoleID
		if ip, err := netip.ParseAddr(f.t.ClientIP); err == nil {
			r = withVerifiedPeer(r, ip) // the log lines below name the caller the door verified
		}
	}
	if unreadBody(r) {
		// A forward that failed may have left the caller's body unread (a console down is
		// never sent a byte of it): this answer closes the connection, and nothing more is
		// read of it (unreadBody, leaveBody).
		w.Header().Set("Connection", "close")
		defer leaveBody(w)
	}
	// A cut body also ends the request's context (net/http cancels it when a read of the
	// connection fails), so the error may say "canceled": ask the body itself.
	if errors.Is(err, ErrBodyStalled) || f != nil && f.body != nil && f.body.stalled.Load() {
		// The caller, not the console, went quiet (S9): the console's request is aborted
		// already (the Transport closed its connection); close the caller's too.
		w.Header().Set("Connection", "close")
		WriteRefusal(w, r, h.log, Refuse(http.StatusRequestTimeout, "body-timeout",
			"the request body sent nothing for too long"), "console", id)
		return
	}
	if errors.Is(err, context.Canceled) {
		// The caller went away; nobody to answer.
		w.WriteHeader(499)
		return
	}
	if f != nil && f.body != nil && f.body.broken.Load() {
		// The caller's body broke its own framing (a malformed chunk, a body shorter than its
		// Content-Length): the console is not down, and the caller's connection cannot be read
		// any further. (Without this, any caller could have a console shown down at will.)
		w.Header().Set("Connection", "close")
		WriteRefusal(w, r, h.log, Refuse(http.StatusBadRequest, "bad-body",
			"the request body is malformed"), "console", id)
		return
	}
	if errors.Is(err, peercred.ErrOtherUser) {
		// Someone else's process holds the console's port: nothing was sent to it.
		WriteRefusal(w, r, h.log, Refuse(http.StatusBadGateway, "console-other-user",
			"the process on this console's port is run by another user; fleet sends it nothing"), "console", id)
		return
	}
	if h.onDown != nil && id != "" {
		h.onDown(id)
	}
	h.log.Warn("fleet.console-down", "console", id, "method", r.Method, "path", contract.LogPath(r), "peer", LogPeer(r), "error", err.Error())
	w.Header().Set("Cache-Control", "no-store")
	SetPageHeaders(w.Header())
	w.Header().Set("X-Fleet-Reason", "console-down")
	noteRefusal(w, "console-down")
	look.WriteConsoleDown(w, r, id) // names the console and tries again by itself (SPEC U6)
}
