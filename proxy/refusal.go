package proxy

import (
	"fmt"
	"html"
	"log/slog"
	"net/http"

	"github.com/phase-console/fleet/contract"
)

// A Refusal is the answer to a request that fleet will not forward: an HTTP status and the reason
// word from the spec (SPEC S11). Every check returns one, so the status, the reason word and the
// log line come from one place.
type Refusal struct {
	Status int    // HTTP status, e.g. 400
	Reason string // the spec's reason word, e.g. "assertion-sent"
	Detail string // a short, secret-free sentence for the page and the log
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

// WriteRefusal logs ref as one fleet.rejected line and answers the request with ref's status and a
// short page naming the reason. Nothing secret is ever part of ref, so nothing secret is logged or
// shown. extra attributes (for example the door) are added to the log line.
func WriteRefusal(w http.ResponseWriter, r *http.Request, log *slog.Logger, ref *Refusal, extra ...any) {
	if log != nil {
		attrs := []any{
			"reason", ref.Reason,
			"status", ref.Status,
			"method", r.Method,
			"path", contract.LogPath(r),
			"peer", r.RemoteAddr,
		}
		if ref.Detail != "" {
			attrs = append(attrs, "detail", ref.Detail)
		}
		attrs = append(attrs, extra...)
		log.Warn(EventRejected, attrs...)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Fleet-Reason", ref.Reason)
	switch {
	case ref.Status == http.StatusBadRequest, ref.Status == http.StatusUnauthorized,
		ref.Status == http.StatusMisdirectedRequest, ref.Status == http.StatusRequestHeaderFieldsTooLarge,
		ref.Status >= 500:
		// The caller wrote what no honest client writes, is not who it must be, or reached the
		// wrong door (a 421 is to be retried on another connection, RFC 9110): nothing after
		// this answer rides on the same connection. 403, 404, 405 and 429 keep it, as a
		// browser's next request on it is judged on its own.
		h.Set("Connection", "close")
	}
	w.WriteHeader(ref.Status)
	fmt.Fprintf(w, "<!doctype html><title>%d %s</title><h1>%d %s</h1><p>%s</p>\n",
		ref.Status, html.EscapeString(ref.Reason), ref.Status, html.EscapeString(ref.Reason),
		html.EscapeString(ref.Detail))
}
