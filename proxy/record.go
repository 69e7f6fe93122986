package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/phase-console/fleet/audit"
)

// This file is what a door tells its audit.Recorder (Door.Audit) of each request it answers
// (SPEC G3, G4): exactly one audit.Entry for every request forwarded to a console and every
// refusal, when the answer is complete — an upgraded stream's when it closes (upgrade.go). A
// door's own pages, redirects and successful API answers are neither, and are not recorded.
//
// What it records is what the verdict knew (Door.judge): the console id and the path as it is or
// would be forwarded (Route), and the caller when the door had identified it — verified (S5) or
// paired (R9) — before it decided (Entry.Identified). The caller is identified at the door's
// caller verification and not before: a refusal decided earlier (S3, S7 hooks, S9, S12, Host)
// names nobody, even on the reach door, whose device cookie is read first. A verifier that
// refuses a caller it identified (G1's not-granted) says so by returning the Caller with its
// Refusal (CallerVerifier).
//
// Cost: nothing when Door.Audit is nil. Otherwise, on the net/http path, one allocation a
// request — the recording, which holds the Entry and the hop's forward too, so that a forwarded
// request allocates no forward of its own; the fast loop (package proxy/fastloop) keeps its Entry
// in its connection's reused exchange and allocates nothing.

// recording is a request's answer as the door records it: the ResponseWriter the door's handlers
// write to, counting the status and body bytes sent, and the Entry recorded once when done.
type recording struct {
	http.ResponseWriter
	entry     audit.Entry
	rec       audit.Recorder
	now       func() time.Time
	head      bool // HEAD: no body goes to the caller, whatever is written
	status    int  // the final status written (0: none yet)
	bytes     int64
	forwarded bool // the door handed the request to the hop
	upgraded  bool // an upgraded stream's tunnel records the entry when it closes
	fwd       forward
}

// Unwrap lets http.ResponseController reach the server's writer (flush, hijack, deadlines).
func (a *recording) Unwrap() http.ResponseWriter { return a.ResponseWriter }

func (a *recording) WriteHeader(code int) {
	if a.status == 0 && code >= 200 { // a 1xx is informational: the final status is to come
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *recording) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	n, err := a.ResponseWriter.Write(p)
	a.bytes += int64(n)
	return n, err
}

// recordingOf finds the recording that w is, or wraps (a wrapper that has Unwrap), or nil.
func recordingOf(w http.ResponseWriter) *recording {
	for range 8 {
		switch x := w.(type) {
		case *recording:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// noteRefusal marks the request w answers as refused for reason (the first refusal written).
func noteRefusal(w http.ResponseWriter, reason string) {
	if a := recordingOf(w); a != nil && a.entry.Reason == "" {
		a.entry.Reason = reason
	}
}

// Recorded serves r with serve through a ResponseWriter that records the answer to d.Audit
// (SPEC G3, G4) once serve returns — or, for an upgraded stream, when it closes. A door whose
// outermost handler is not the Door's own ServeHTTP (the reach door, with refusals of its own
// before the Door judges) serves through it, so that every answer of that door is recorded
// once; the Door's ServeHTTP then adds its verdict to the same recording. With no d.Audit, or
// when w records already, serve gets w as it is.
func (d *Door) Recorded(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request)) {
	if d.Audit == nil || recordingOf(w) != nil {
		serve(w, r)
		return
	}
	now := d.Now
	if now == nil {
		now = time.Now
	}
	a := &recording{ResponseWriter: w, rec: d.Audit, now: now, head: r.Method == http.MethodHead}
	a.entry.Time = now()
	a.entry.Door = d.Name
	a.entry.Method = r.Method
	serve(a, r)
	a.done()
}

// judged adds to the recording what v says of r: the console and path judged, and the caller
// when it was identified.
func (a *recording) judged(v *verdict) {
	e := &a.entry
	e.Console, e.Path = v.route.ID, v.route.Path
	if v.caller.Login != "" {
		e.Login, e.Peer, e.Identified = v.caller.Login, v.caller.IP, true
	}
}

// verifiedPeerKey holds, in a refused request's context, the address that the door verified for
// its caller before it refused (LogPeer).
type verifiedPeerKey struct{}

// withVerifiedPeer is r carrying ip as its verified peer, when ip is one.
func withVerifiedPeer(r *http.Request, ip netip.Addr) *http.Request {
	if !ip.IsValid() {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), verifiedPeerKey{}, ip))
}

// LogPeer is the peer a door's log line names for r (SPEC S11, O8): the connection's peer address
// — on the TCP doors, the connection's other end — and on the unix-socket door, whose connection
// has no address (net/http reports "@"), the tailnet address the door verified for its caller
// when it did before it answered, else "unix:" and the socket's path. Never "@".
func LogPeer(r *http.Request) string {
	if _, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return r.RemoteAddr
	}
	if ip, ok := r.Context().Value(verifiedPeerKey{}).(netip.Addr); ok {
		return ip.String()
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la.Network() == "unix" && la.String() != "" {
		return "unix:" + la.String()
	}
	return "unix"
}

// NotePairing marks the request w answers as a pairing attempt (SPEC O7): result (one of
// audit.PairingResults), the refusal's reason word when the answer itself did not name one
// (empty when paired), the new device's login when paired, the path, and the TCP peer. It is
// recorded once its answer is complete, as every answer is, and never names the code, the
// password or the name typed: it is given none of them. Without a recording in w it does
// nothing.
func NotePairing(w http.ResponseWriter, result, reason, login, path string, peer netip.Addr) {
	a := recordingOf(w)
	if a == nil {
		return
	}
	e := &a.entry
	e.Pairing, e.Login, e.Path, e.Peer = result, login, path, peer.Unmap()
	if e.Reason == "" {
		e.Reason = reason
	}
}

// done records the entry, unless the request was neither forwarded nor refused nor a pairing
// attempt (a page, a redirect) or an upgraded stream's tunnel records it.
func (a *recording) done() {
	if a.upgraded || !a.forwarded && a.entry.Reason == "" && a.entry.Pairing == "" {
		return
	}
	a.record(a.bytes)
}

// record records the entry with the answer's status and bytes body bytes sent: at the handler's
// end (done), or an upgraded stream's when its tunnel's pipes have both returned (upgrade.go).
// detached is what record needs of a, and nothing of the request or its writer: a stream that
// lives for hours keeps only this, never net/http's buffers for the request it came in on.
func (a *recording) detached() *recording {
	return &recording{entry: a.entry, rec: a.rec, now: a.now, head: a.head, status: a.status}
}

func (a *recording) record(bytes int64) {
	e := &a.entry
	e.Status = a.status
	if e.Status == 0 {
		e.Status = http.StatusOK // net/http's answer to a handler that wrote nothing
	}
	if !a.head {
		e.Bytes = bytes
	}
	e.Duration = a.now().Sub(e.Time)
	a.rec.Record(e)
}

// FillEntry fills e with what j's verdict says of the request judged, for a connection loop's own
// record of a request it forwarded (package proxy/fastloop): the door, the method, the console
// and path judged and, when identified, the caller. Time, Status, Bytes, Duration and Reason are
// the loop's to fill.
func (j *Judged) FillEntry(e *audit.Entry) {
	v := &j.v
	e.Door, e.Method = "", j.method
	if j.door != nil {
		e.Door = j.door.Name
	}
	e.Console, e.Path = v.route.ID, v.route.Path
	e.Login, e.Peer, e.Identified, e.Pairing = "", netip.Addr{}, false, "" // a loop's request is never a pairing attempt
	if v.caller.Login != "" {
		e.Login, e.Peer, e.Identified = v.caller.Login, v.caller.IP, true
	}
}
