package proxy

import (
	"log/slog"
	"net/http"
	"time"
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
func checkHeaderSize(r *http.Request) *Refusal {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 16
	for k, vv := range r.Header {
		for _, v := range vv {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	if n > MaxHeaderBytes {
		return Refuse(http.StatusRequestHeaderFieldsTooLarge, "header-too-large", "request headers are limited to 64 KiB")
	}
	return nil
}
