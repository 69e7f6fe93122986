package reach

import (
	"io"
	"net/http"
	"time"
)

// This file bounds in time what the door writes (S9, R6): an answer of its own that its caller
// does not take is given up, and so is an HTTP/2 connection that takes nothing at all. net/http's
// HTTP/2 server keeps a handler's goroutine — about 16 KiB — for as long as its answer cannot be
// sent: a client that sets SETTINGS_INITIAL_WINDOW_SIZE to 0 and never opens it held one for
// every stream it opened, each beyond ReadHeaderTimeout and IdleTimeout (HTTP/2's idle timer
// does not run while a stream is open). Over HTTP/1.1 the same small answers fit the socket's
// buffer; a larger one not read is given up the same way. A revoked device's streams are ended
// with a write deadline too (devices.go, stream.end).

// AnswerTimeout is how long the door gives an answer of its own — a refusal, the redirect to
// /pair, /ca.crt, the pairing pages, their assets and their POST, a device's index — to be
// written, counted from the moment the door has read all it reads of the request: from the
// request's start for every answer whose body the door does not read, and for the one whose body
// it does read (the pairing form), from the answer's first byte (answerFromFirstByte). Past it the answer is given up: its HTTP/2 stream is
// reset (RST_STREAM INTERNAL_ERROR), or its HTTP/1.1 connection closed. The largest such answer
// is a few KiB, and the work before it is short (scrypt, about 0.25 s, runs only for a live code,
// at most two at a time), so 10 s is lost only by a caller that does not read: the same 10 s a
// stranger is given to send its head (proxy.ReadHeaderTimeout). A request forwarded to a console
// has no such deadline (SSE and WebSockets are long-lived); its HTTP/2 connection is bounded by
// the settings below.
const AnswerTimeout = 10 * time.Second

// The door's HTTP/2 settings (http.HTTP2Config).
const (
	// HTTP2MaxStreams is how many streams a client may have open at once on one HTTP/2
	// connection: the least RFC 9113 (§6.5.2) recommends, where net/http's default is 250. With
	// AnswerTimeout it bounds what a caller that takes no answer holds on one connection: at
	// most HTTP2MaxStreams handlers at a time (about 1.6 MiB), each for at most AnswerTimeout,
	// where it held 250 (4 MiB) for as long as it kept the connection.
	HTTP2MaxStreams = 100
	// HTTP2WriteByteTimeout closes an HTTP/2 connection on which nothing that is ready to be sent
	// could be written for this long: a client that stopped reading its socket altogether, so
	// that not even the reset of a stream gets out.
	HTTP2WriteByteTimeout = 30 * time.Second
	// HTTP2PingAfter is how long an HTTP/2 connection may go without a frame from its client before
	// the door sends a PING; a PING not answered within HTTP2PingTimeout closes the connection (a
	// phone gone to sleep, a peer gone from the LAN).
	HTTP2PingAfter   = 30 * time.Second
	HTTP2PingTimeout = 15 * time.Second
)

// http2Config is the door's HTTP/2 settings.
func http2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxConcurrentStreams: HTTP2MaxStreams,
		WriteByteTimeout:     HTTP2WriteByteTimeout,
		SendPingTimeout:      HTTP2PingAfter,
		PingTimeout:          HTTP2PingTimeout,
	}
}

// answerTimeout is AnswerTimeout, or the tests' Config.answerTimeout.
func (d *Door) answerTimeout() time.Duration {
	if d.cfg.answerTimeout > 0 {
		return d.cfg.answerTimeout
	}
	return AnswerTimeout
}

// ownAnswer gives the answer to r the door's deadline (AnswerTimeout): every answer is the door's
// own until notMine forwards its request (forwarded). It returns r with its body, if it has one,
// read through an ownBody: a body the door reads (the pairing form) holds the deadline off while
// it is read, so that a form that keeps moving is never cut (S9), and its answer gets its
// AnswerTimeout from its last byte, or, for the pairing POST, from the answer's first byte
// (answerFromFirstByte).
func (d *Door) ownAnswer(w http.ResponseWriter, r *http.Request) *http.Request {
	rc := http.NewResponseController(w)
	timeout := d.answerTimeout()
	rc.SetWriteDeadline(time.Now().Add(timeout)) // not supported (a recorder): no deadline
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	r = r.WithContext(r.Context()) // a copy: the server's request is not the door's to change
	r.Body = &ownBody{ReadCloser: r.Body, rc: rc, timeout: timeout}
	return r
}

// ownBody is the body of a request the door may answer itself: while a read of it waits, the
// answer has no write deadline (the read has its own: S9's 60 s, the pairing form's); once it
// returns, the answer has AnswerTimeout again.
type ownBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	held    bool // the deadline waits for the answer's first byte (answerFromFirstByte)
}

func (b *ownBody) Read(p []byte) (int, error) {
	b.rc.SetWriteDeadline(time.Time{})
	n, err := b.ReadCloser.Read(p)
	if !b.held {
		b.rc.SetWriteDeadline(time.Now().Add(b.timeout))
	}
	return n, err
}

// answerFromFirstByte gives h's answer its AnswerTimeout from the moment h starts writing it,
// not from the body's last byte: what h does in between — scrypt for a live code, a wait for a
// turn at its gate (package pairing) — is the door's own work, and charging it to the caller
// would cut a pairing that a busy machine was slow to judge (its answer reset mid-record, which
// a browser reports as a TLS error). While h works its answer has no write deadline; that work is
// bounded by the request's context and the pairing gate, not by the caller. Only for the pairing
// POST: the one answer the door computes at length after reading a body.
func answerFromFirstByte(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := r.Body.(*ownBody)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		b.held = true
		b.rc.SetWriteDeadline(time.Time{})
		h.ServeHTTP(&armedAtFirstByte{ResponseWriter: w, body: b}, r)
	})
}

// armedAtFirstByte sets the answer's deadline when its head or first byte is written.
type armedAtFirstByte struct {
	http.ResponseWriter
	body  *ownBody
	armed bool
}

func (w *armedAtFirstByte) arm() {
	if !w.armed {
		w.armed = true
		w.body.rc.SetWriteDeadline(time.Now().Add(w.body.timeout))
	}
}

func (w *armedAtFirstByte) WriteHeader(code int) { w.arm(); w.ResponseWriter.WriteHeader(code) }

func (w *armedAtFirstByte) Write(p []byte) (int, error) { w.arm(); return w.ResponseWriter.Write(p) }

// Unwrap lets http.ResponseController reach the server's writer.
func (w *armedAtFirstByte) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// forwarded lifts the door's deadline from rc, the answer to r, a paired device's request that is
// forwarded to a console (SSE and WebSockets last as long as they last), and returns r with its
// body as it came: the hop times a forwarded body itself (S9). No deadline of an earlier answer
// is left on an HTTP/1.1 connection for its next request: net/http's server clears the write
// deadline once an answer is out (Go 1.26, conn.serve after finishRequest), and a hijacked
// connection (a WebSocket) is always a forwarded request's, whose deadline was lifted here.
func forwarded(rc *http.ResponseController, r *http.Request) *http.Request {
	rc.SetWriteDeadline(time.Time{})
	if b, ok := r.Body.(*ownBody); ok {
		r.Body = b.ReadCloser
	}
	return r
}
