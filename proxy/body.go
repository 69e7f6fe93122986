package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// BodyIdleTimeout is how long a request body may send nothing before the hop cuts it off (SPEC S9,
// like nginx's client_body_timeout): it bounds the silence between two bytes, never the whole
// upload, so a slow body that keeps moving is never cut.
const BodyIdleTimeout = 60 * time.Second

// ErrBodyStalled is the error a cut-off request body returns; the hop answers 408 body-timeout.
var ErrBodyStalled = errors.New("proxy: the request body sent nothing for too long")

// A Timer is what the hop needs of a *time.Timer; tests pass a fake one.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// An AfterFunc starts a Timer that calls f in its own goroutine after d, like time.AfterFunc.
type AfterFunc func(d time.Duration, f func()) Timer

func realAfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// aLongTimeAgo is a read deadline in the past: it wakes up a Read blocked on the connection at once.
var aLongTimeAgo = time.Unix(1, 0)

// idleBody is a request body that is cut off when a Read waits idle for data from the caller: a
// timer runs only while a Read waits (a console that reads slowly never counts against the
// caller), and when it fires it sets the connection's read deadline in the past, which ends the
// Read. The caller's connection is then closed by the hop's answer. With idle zero or less it
// only reports (eof) whether the body was read to its end.
type idleBody struct {
	body    io.ReadCloser
	idle    time.Duration
	after   AfterFunc
	ctrl    *http.ResponseController
	stalled atomic.Bool
	broken  atomic.Bool // the caller's framing of the body failed (a bad chunk, a short body)
	// eof: a Read returned io.EOF, so nothing of the body is left on the caller's connection.
	// Until then the hop's answer closes the connection and reads no more of it (Forward).
	eof atomic.Bool

	mu     sync.Mutex // guards timer and closed: Close may come from another goroutine than Read
	timer  Timer      // started by the first Read
	closed bool       // after Close (before the handler returns), cut touches nothing
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.stalled.Load() {
		return 0, ErrBodyStalled
	}
	if b.idle <= 0 {
		n, err := b.body.Read(p)
		b.ended(err)
		return n, err
	}
	b.mu.Lock()
	if b.timer == nil {
		b.timer = b.after(b.idle, b.cut)
	} else {
		b.timer.Reset(b.idle)
	}
	b.mu.Unlock()
	n, err := b.body.Read(p)
	b.mu.Lock()
	fired := !b.timer.Stop() && !b.closed // a Close stops the timer too
	b.mu.Unlock()
	if fired || b.stalled.Load() {
		// The Read ended because of the deadline (or a byte came in just as the timer fired:
		// the caller was silent for the whole window either way).
		b.stalled.Store(true)
		return n, ErrBodyStalled
	}
	b.ended(err)
	return n, err
}

// ended notes how a Read of the caller's body ended: at its end (eof), or broken.
func (b *idleBody) ended(err error) {
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case err != nil:
		b.broken.Store(true)
	}
}

func (b *idleBody) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return // the request is over: its connection is not this body's any more
	}
	b.stalled.Store(true)
	b.ctrl.SetReadDeadline(aLongTimeAgo)
}

func (b *idleBody) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	return b.body.Close()
}

// hasBody reports whether r has a request body to read at all.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}
