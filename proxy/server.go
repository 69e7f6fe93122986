package proxy

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/phase-console/fleet/contract"
)

// A door's limits on slow or huge requests (SPEC S9), set on purpose: headers must arrive quickly,
// idle connections go away, but a streaming response (SSE, WebSocket) may last as long as it
// lasts, so there is no read or write timeout on the whole request.
const (
	ReadHeaderTimeout = 10 * time.Second
	IdleTimeout       = 2 * time.Minute
	// MaxHeaderBytes bounds a request's head. It is net/http's own limit too (NewServer sets
	// it), so no more than it (plus net/http's 4 KiB of read slack) is ever read for one: a
	// head that net/http still read but is over the limit is 431 header-too-large from
	// Door.ServeHTTP, with its log line; beyond that net/http answers its own bare 431 and
	// closes.
	MaxHeaderBytes = 64 << 10
)

// NewServer is an http.Server for a door: h behind the limits of SPEC S9 (ReadHeaderTimeout,
// IdleTimeout, MaxHeaderBytes), with net/http's own errors (accept failures, panics in a handler)
// logged to log as warnings, never hidden. The door adds what is its own (ConnContext, TLS).
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          WarnLogger(log, "fleet.http-error"),
	}
}

// checkHeaderSize refuses request headers over MaxHeaderBytes (S9): 431 header-too-large.
// fields is what scanHeader measured of r.Header.
func checkHeaderSize(r *http.Request, fields int) *Refusal {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 16 + fields
	if n > MaxHeaderBytes {
		return Refuse(http.StatusRequestHeaderFieldsTooLarge, "header-too-large", "request headers are limited to 64 KiB")
	}
	return nil
}

// scanHeader walks h once for what the Door asks of every field of a request: their size as
// written ("k: v\r\n" each: checkHeaderSize, S9) and whether any name is an assertion header's
// under any spelling (S3, CheckNoAssertion).
func scanHeader(h http.Header) (fields int, assertion bool) {
	for k, vv := range h {
		if contract.IsAssertionName(k) {
			assertion = true
		}
		for _, v := range vv {
			fields += len(k) + len(v) + 4
		}
	}
	return fields, assertion
}
