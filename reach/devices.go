package reach

import (
	"context"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
)

// This file is the paired device on the door (SPEC R9): its cookie, its assertion, and the end of
// its live connections when it is revoked.

type admittedKey struct{}

// admitted is what a request's context holds once its device is authenticated: the device, and
// the streams' mark taken before it was authenticated (streams.track). One value, so that a
// request adds one entry to its context, not one per field.
type admitted struct {
	dev  pairing.Device
	mark uint64
}

// admittedContext is a request's context with its admission: one allocation for both, on each
// request of a paired device.
type admittedContext struct {
	context.Context
	a admitted
}

func (c *admittedContext) Value(key any) any {
	if key == (admittedKey{}) {
		return &c.a
	}
	return c.Context.Value(key)
}

func withAdmitted(ctx context.Context, dev pairing.Device, mark uint64) context.Context {
	return &admittedContext{Context: ctx, a: admitted{dev: dev, mark: mark}}
}

func deviceFrom(r *http.Request) (pairing.Device, bool) {
	a, ok := r.Context().Value(admittedKey{}).(*admitted)
	if !ok {
		return pairing.Device{}, false
	}
	return a.dev, true
}

// markFrom is the streams' mark of r's admission; none: 0, which any revocation since the start
// is past, so a request never admitted is refused by track (fail closed).
func markFrom(r *http.Request) uint64 {
	if a, ok := r.Context().Value(admittedKey{}).(*admitted); ok {
		return a.mark
	}
	return 0
}

// authenticate reports whether r sent a device cookie and, if so, whether it names a paired
// device. Two device cookies are one too many: neither is believed. closed is whether r's
// connection was closed for the device's bound (R6e): r is to be abandoned.
func (d *Door) authenticate(r *http.Request) (dev pairing.Device, sent, ok, closed bool) {
	cred, n := deviceCookie(r)
	if n == 0 {
		return pairing.Device{}, false, false, false
	}
	if n > 1 {
		return pairing.Device{}, true, false, false
	}
	dev, ok = d.cfg.Devices.Authenticate(cred, d.now(), peerText(r))
	if ok {
		closed = !d.conns.credentialShown(r, dev.ID6) // R6c: its connection is a device's from now on
	}
	return dev, true, ok, closed
}

// deviceCookie is what r.Cookies() finds of the device cookie, without making the list of every
// cookie (each request of a paired device asks): the value of the last one, and how many there
// are. It follows net/http's rules (readCookies): each Cookie line split on ';', each part and
// then its name trimmed of ASCII space, a value in double quotes unquoted, a value holding a byte
// that no cookie value may hold skipped. With more parts than cookieScanLimit it asks r.Cookies() itself,
// whose limit on how many cookies a request may carry then applies as it does.
func deviceCookie(r *http.Request) (cred string, n int) {
	lines := r.Header["Cookie"]
	parts := 0
	for _, line := range lines {
		parts += strings.Count(line, ";") + 1
	}
	if parts > cookieScanLimit {
		for _, c := range r.Cookies() {
			if c.Name == pairing.CookieName {
				cred, n = c.Value, n+1
			}
		}
		return cred, n
	}
	for _, line := range lines {
		for rest := line; rest != ""; {
			var part string
			part, rest, _ = strings.Cut(rest, ";")
			name, value, _ := strings.Cut(textproto.TrimString(part), "=")
			if textproto.TrimString(name) != pairing.CookieName {
				continue
			}
			if len(value) > 1 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			if validCookieValue(value) {
				cred, n = value, n+1
			}
		}
	}
	return cred, n
}

// cookieScanLimit is how many cookie parts deviceCookie scans itself: far more than any browser
// sends a door, far fewer than net/http's own limit.
const cookieScanLimit = 64

// validCookieValue is net/http's test of a cookie value's bytes (validCookieValueByte).
func validCookieValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x20 || b >= 0x7f || b == '"' || b == ';' || b == '\\' {
			return false
		}
	}
	return true
}

// deviceCallers is R9 as the shared Door's caller verification: the device the door
// authenticated, asserted as device:<slug>#<id6>, from its TCP peer. A request that reached it
// without a device is refused (it cannot: the door sends unpaired callers to /pair).
type deviceCallers struct{}

// VerifyCaller is the device the door authenticated, which opens only the consoles it was
// paired for (SPEC G1): any other is 403 not-granted, whether or not it exists, and never a
// failure (R6).
func (deviceCallers) VerifyCaller(r *http.Request, consoleID string) (proxy.Caller, *proxy.Refusal) {
	dev, ok := deviceFrom(r)
	src := peerAddr(r)
	if !ok || dev.ID6 == "" || !src.IsValid() {
		return proxy.Caller{}, proxy.Refuse(http.StatusInternalServerError, "internal", "the door verified no device")
	}
	who := proxy.Caller{Login: dev.Login(), IP: src.Unmap()}
	if !dev.Consoles.Allows(consoleID) {
		// Paired, then refused: the door records whom (G3); never forwarded.
		return who, proxy.Refuse(http.StatusForbidden, "not-granted",
			"this device may not open this console: pair it again with 'fleet reach pair --consoles' to change what it may open")
	}
	return who, nil
}

// isDeviceLogin reports whether login is a device's (device:<slug>#<id6>).
func isDeviceLogin(login string) bool { return strings.HasPrefix(login, "device:") }

// stripDeviceCookie removes the device's credential from every Cookie line of h, keeping the
// other cookies as they were sent; a line left empty is dropped.
func stripDeviceCookie(h http.Header) {
	lines := h["Cookie"]
	if len(lines) == 0 {
		return
	}
	kept := lines[:0:0]
	for _, line := range lines {
		if line = withoutDeviceCookie(line); line != "" {
			kept = append(kept, line)
		}
	}
	if len(kept) == 0 {
		h.Del("Cookie")
		return
	}
	h["Cookie"] = kept
}

// withoutDeviceCookie is one Cookie line without the device's credential, the other cookies as
// they were sent; "" when none is left.
func withoutDeviceCookie(line string) string {
	if onlyDeviceCookie(line) {
		return "" // a phone's usual line, on every request: nothing to build
	}
	return splitWithoutDeviceCookie(line)
}

// splitWithoutDeviceCookie is withoutDeviceCookie without its quick answer for a line that holds
// nothing but the device cookie: the line split, and built again without it.
func splitWithoutDeviceCookie(line string) string {
	var parts []string
	for _, p := range strings.Split(line, ";") {
		name, _, _ := strings.Cut(p, "=")
		if strings.TrimSpace(name) == pairing.CookieName {
			continue
		}
		if strings.TrimSpace(p) != "" {
			parts = append(parts, strings.TrimSpace(p))
		}
	}
	return strings.Join(parts, "; ")
}

// onlyDeviceCookie reports whether every part of line is the device's credential or empty.
func onlyDeviceCookie(line string) bool {
	for rest := line; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, ";")
		name, _, _ := strings.Cut(part, "=")
		if strings.TrimSpace(name) != pairing.CookieName && strings.TrimSpace(part) != "" {
			return false
		}
	}
	return true
}

// Revoke ends the live connections of the device id6 on this door: its WebSockets (the hop's
// upgraded connections asserted with its login) and its in-flight requests, server-sent events
// and other streams included. Subscribe it to the register's revocations (pairing.Register's
// OnRevoke); the register already refuses the device's next request.
func (d *Door) Revoke(id6 string) {
	d.streams.cancel(id6)
	d.conns.revoke(id6) // its idle connections are strangers' again (R6c)
	d.cfg.Hop.CloseUpgraded(func(_, login string) bool {
		return isDeviceLogin(login) && strings.HasSuffix(login, "#"+id6)
	})
}

// streams are the forwarded requests in flight, by device, so that a revocation can end them:
// http.Server knows nothing of who a response is for. It remembers when (in its own count of
// revocations) each device was last revoked, so that a request that authenticated a moment
// before its device's revocation is not forwarded after it. Only such a request is refused: a
// device the register believes again after telling of it (its file was bad for a moment, every
// device was reported gone) is let in again by the requests that authenticate afterwards.
type streams struct {
	mu      sync.Mutex
	live    map[string]map[*stream]struct{}
	seq     atomic.Uint64     // revocations told so far: written under mu, read by mark without it
	revoked map[string]uint64 // by id6: seq just after its last revocation
}

// stream is one forwarded request in flight.
type stream struct {
	cancel context.CancelFunc   // nil: a fast-loop answer, which no context ends (fastAnswer)
	rc     answerEnd            // its answer; nil in tests of the bookkeeping alone
	live   map[*stream]struct{} // its device's streams, while it is among them (guarded by streams.mu)
}

// answerEnd ends a forwarded request's answer at once, whatever it waits for (stream.end).
type answerEnd interface{ endAnswer() }

// netHTTPAnswer is an answer written through net/http: a write deadline in the past ends it.
type netHTTPAnswer struct{ rc *http.ResponseController }

func (a netHTTPAnswer) endAnswer() { a.rc.SetWriteDeadline(time.Unix(1, 0)) }

// fastAnswer is an answer the fast loop passes on (P2): its exchange waits for the console on
// the connection's own goroutine and watches no context once it has its connection to the
// console, so the connection is closed, which ends the exchange (the loop's watch of a stream
// sees its caller gone) and the connection.
type fastAnswer struct{ c *conn }

// fastRequests are what the fast loop's requests on one connection reuse, one after another:
// the stream a revocation ends (its answer: the connection), the func that ends a request, and
// the context that carries its admission (nothing keeps a request's context past done, which
// empties it). Made once, by the connection's first request that the fast loop forwards.
type fastRequests struct {
	stream stream
	done   func()
	ctx    admittedContext
}

func (a fastAnswer) endAnswer() { a.c.Conn.Close() }

// end ends st at once. Cancelling its context ends the hop's exchange with the console, but not
// a write to the device that waits (on HTTP/2, for a flow-control window the device does not
// open; on HTTP/1.1, for a socket it does not read): net/http's writers do not watch the
// context. A write deadline in the past ends that too: the HTTP/2 stream is reset at once
// (RST_STREAM), the HTTP/1.1 connection's writes fail and it is closed (a WebSocket's, which the
// hop hijacked, is closed by Revoke anyway). A stream's entry is forgotten (track's done) before
// its handler returns, and end is only called with streams.mu held, so rc is never used after
// its request is over.
func (st *stream) end() {
	if st.cancel != nil {
		st.cancel()
	}
	if st.rc != nil {
		st.rc.endAnswer()
	}
}

func (s *streams) init() {
	s.live = map[string]map[*stream]struct{}{}
	s.revoked = map[string]uint64{}
}

// mark is taken before a request's device is authenticated: a revocation of that device told
// after it (cancel) refuses the request in track.
func (s *streams) mark() uint64 {
	return s.seq.Load() // a revocation after this load raises seq past it before add looks
}

// track returns a context that the device id6's revocation cancels — which also expires the
// write deadline of rc, the request's answer (stream.end) — and the func that forgets it, to be
// called before the request's handler returns; ok is false when id6 was revoked since mark,
// which was taken before it was authenticated.
func (s *streams) track(parent context.Context, rc answerEnd, id6 string, mark uint64) (_ context.Context, done func(), ok bool) {
	ctx, cancel := context.WithCancel(parent)
	st := &stream{cancel: cancel, rc: rc}
	if !s.add(st, id6, mark) {
		cancel()
		return nil, nil, false
	}
	return ctx, func() {
		s.remove(st)
		cancel()
	}, true
}

// add makes st one of device id6's streams, which its revocation ends; false when id6 was
// revoked since mark, which was taken before it was authenticated. st is in no device's streams.
func (s *streams) add(st *stream, id6 string, mark uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked[id6] > mark {
		return false
	}
	live := s.live[id6]
	if live == nil {
		// Kept while empty, so that a device's requests one after another do not make a map
		// each: one per device that made a request, forgotten when it is revoked (cancel).
		live = map[*stream]struct{}{}
		s.live[id6] = live
	}
	live[st] = struct{}{}
	st.live = live
	return true
}

// remove forgets st, added before: its request is over.
func (s *streams) remove(st *stream) {
	s.mu.Lock()
	delete(st.live, st)
	st.live = nil
	s.mu.Unlock()
}

func (s *streams) cancel(id6 string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[id6] = s.seq.Add(1)
	for st := range s.live[id6] {
		st.end()
	}
	delete(s.live, id6) // its streams' done funcs delete from the map they hold
}

func (s *streams) cancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.live {
		for st := range m {
			st.end()
		}
	}
}
