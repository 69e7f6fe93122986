package proxy

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/look"
)

// A Refusal is the answer to a request that fleet will not forward: an HTTP status and the reason
// word from the spec (SPEC S11). Every check returns one, so the status, the reason word and the
// log line come from one place.
//
// Detail is shown to whoever sent the request — which may be anyone: a Funnel visitor from the
// internet, a tagged node (refusals judged before SPEC S5c answer them too). LogDetail is for the
// operator only.
type Refusal struct {
	Status int    // HTTP status, e.g. 400
	Reason string // the spec's reason word, e.g. "assertion-sent"
	Detail string // a short, secret-free sentence for the page and the log
	// LogDetail is secret-free, but about this machine's set-up (a flag of tailscaled's, a
	// socket's path, a forward's target, an error naming files): in the fleet.rejected line (as
	// "why"), never on the page, in an API answer or in Error.
	LogDetail string
}

func (r *Refusal) Error() string {
	if r.Detail == "" {
		return fmt.Sprintf("%d %s", r.Status, r.Reason)
	}
	return fmt.Sprintf("%d %s: %s", r.Status, r.Reason, r.Detail)
}

// Refuse builds a Refusal.
func Refuse(status int, reason, detail string) *Refusal {
	return &Refusal{Status: status, Reason: reason, Detail: detail}
}

// EventRejected is the event name of every refusal's log line (SPEC S11).
const EventRejected = "fleet.rejected"

// WriteRefusal logs ref as one fleet.rejected line and answers the request with ref's status, its
// reason in X-Fleet-Reason, and a body in the caller's language (SPEC U5, package look): the
// refusal page when its Accept prefers text/html, else JSON {"error","detail"}. Nothing secret is
// ever part of ref, so nothing secret is logged or shown; ref.LogDetail is logged ("why"), never
// shown. extra attributes (for example the door) are added to the log line.
func WriteRefusal(w http.ResponseWriter, r *http.Request, log *slog.Logger, ref *Refusal, extra ...any) {
	writeRefusal(w, r, log, ref, false, extra)
}

// WriteJSONRefusal is WriteRefusal with a JSON body whatever the caller asked for: the answer of
// the metrics and registry endpoints (SPEC U5).
func WriteJSONRefusal(w http.ResponseWriter, r *http.Request, log *slog.Logger, ref *Refusal, extra ...any) {
	writeRefusal(w, r, log, ref, true, extra)
}

func writeRefusal(w http.ResponseWriter, r *http.Request, log *slog.Logger, ref *Refusal, onlyJSON bool, extra []any) {
	if log != nil {
		attrs := []any{
			"reason", ref.Reason,
			"status", ref.Status,
			"method", r.Method,
			"path", contract.LogPath(r),
			"peer", LogPeer(r),
		}
		if ref.Detail != "" {
			attrs = append(attrs, "detail", ref.Detail)
		}
		if ref.LogDetail != "" {
			attrs = append(attrs, "why", ref.LogDetail)
		}
		attrs = append(attrs, extra...)
		log.Warn(EventRejected, attrs...)
	}
	noteRefusal(w, ref.Reason) // the door's record of the answer (record.go)
	h := w.Header()
	SetPageHeaders(h)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Fleet-Reason", ref.Reason)
	switch {
	case ref.Status == http.StatusBadRequest, ref.Status == http.StatusUnauthorized,
		ref.Status == http.StatusMisdirectedRequest, ref.Status == http.StatusRequestHeaderFieldsTooLarge,
		ref.Status >= 500:
		// The caller wrote what no honest client writes, is not who it must be, or reached the
		// wrong door (a 421 is to be retried on another connection, RFC 9110): nothing after
		// this answer rides on the same connection. 403, 404, 405 and 429 keep it, as a
		// browser's next request on it is judged on its own — unless r has a body.
		h.Set("Connection", "close")
	case unreadBody(r):
		// A body nobody read: to keep the connection, net/http's server would first read up
		// to 256 KiB of it with no deadline, and a caller that declared a body it never sends
		// would hold a goroutine and a descriptor for ever (S9).
		h.Set("Connection", "close")
	}
	if onlyJSON {
		look.WriteRefusalJSON(w, ref.Status, ref.Reason, ref.Detail)
	} else {
		look.WriteRefusal(w, r, ref.Status, ref.Reason, ref.Detail)
	}
	if unreadBody(r) {
		leaveBody(w)
	}
}

// PagePolicy is the Content-Security-Policy of a page fleet writes itself (SetPageHeaders): it
// loads fleet's one stylesheet from its own origin (package look, SPEC U1) and nothing else, runs
// no script, posts no form, and no site may frame it.
const PagePolicy = "default-src 'none'; style-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// SetPageHeaders sets on h what every answer fleet writes itself sends — its pages (the index, a
// refusal, the console-down page, a device's index) and its JSON: PagePolicy, X-Frame-Options
// DENY (for browsers without frame-ancestors), nosniff and Referrer-Policy same-origin (as the
// pairing page: a link to a console sends its Referer, nothing goes to another site). A tailnet
// identity and a device's cookie are ambient (SPEC S12): no other site may frame a page that
// shows them, nor read an answer as a script or a style sheet. No inline style or script is
// ever allowed.
func SetPageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", PagePolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

// unreadBody reports whether r, on HTTP/1, declared a body (a Content-Length other than 0, or
// chunked) that an answer the door writes itself may leave unread on the connection. To keep the
// connection, net/http's server reads what is left of it — up to 256 KiB, before it writes the
// answer and again when it closes the body after the handler — with no deadline (ReadTimeout is
// not set: a body may stream for long): a caller that sends "Content-Length: 1000" and no byte
// more would get no answer and hold a goroutine and a descriptor for ever (S9). So such an answer
// says "Connection: close", which stops the first read, and leaveBody stops the second. A body
// that was read (a page that reads its form) costs only the connection. On HTTP/2 neither is
// needed — its server never waits for a body the handler left — and "Connection: close" there
// would end every stream of the connection (net/http sends GOAWAY): not set.
func unreadBody(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.ContentLength != 0
}

// leaveBody, once an answer that closes the connection is written (unreadBody), stops net/http's
// server from reading what is left of the request body: its read deadline is set in the past, so
// that its closing of the body reads nothing more from the caller. A ResponseWriter that cannot
// reach its connection (a wrapper without Unwrap) is left as it is; the Door's own answers are
// written to net/http's own.
func leaveBody(w http.ResponseWriter) {
	http.NewResponseController(w).SetReadDeadline(aLongTimeAgo)
}

// AnswerItself prepares an answer that a door writes itself — anything but a forwarded request:
// a page, a redirect, a refusal not written by WriteRefusal — to r, which it may leave unread:
// when r has a body (unreadBody), "Connection: close" is set, and done, called once the answer
// is written (defer it), stops net/http's read of what is left (leaveBody). Both doors use it.
func AnswerItself(w http.ResponseWriter, r *http.Request) (done func()) {
	if !unreadBody(r) {
		return func() {}
	}
	w.Header().Set("Connection", "close")
	return func() { leaveBody(w) }
}
