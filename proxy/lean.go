package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// leanTransport carries the hop's common request — no body, no upgrade — to a console over a
// pooled connection, writing the request and reading the answer on the handler's own goroutine.
// net/http's Transport hands each request to two goroutines of its own (a write loop and a read
// loop) and waits for them on channels: on loopback those wake-ups cost more than fleet's whole
// judgement of the request. Every other request (a body, which the console may answer before it
// is read, an Expect, trailers) goes to full, the ordinary Transport, which also dials through
// the same checked dialer.
//
// A connection is reused only after its answer was read to the end and neither side asked to
// close; one that fails before any byte of an answer came back, after sitting idle, is taken for
// closed by the console (it restarted, or timed the connection out): the request is sent again on
// a fresh one, once, as net/http's Transport does for a request without a body. Idle connections
// are closed after idleTimeout.
type leanTransport struct {
	full        *http.Transport
	dial        DialFunc
	maxIdle     int // per console address
	idleTimeout time.Duration

	mu      sync.Mutex
	idle    map[string][]*leanConn // by console address, most recently used last
	closed  bool
	sweeper bool // a sweep goroutine is running
}

type leanConn struct {
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// leanable reports whether req can take the lean path: a GET, HEAD or OPTIONS to a console with
// nothing to send after its head — requests HTTP lets a client send again when a kept connection
// turns out closed (RFC 9110 §9.2.2), as a page's loads are.
func leanable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return false
	}
	return req.URL.Scheme == "http" && (req.Body == nil || req.Body == http.NoBody) && req.ContentLength <= 0 &&
		len(req.TransferEncoding) == 0 && len(req.Trailer) == 0 && req.Header.Get("Expect") == "" &&
		!isUpgrade(req.Header) && !req.Close
}

func (t *leanTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !leanable(req) {
		return t.full.RoundTrip(req)
	}
	addr := req.URL.Host
	for attempt := 0; ; attempt++ {
		lc, reused, err := t.get(req.Context(), addr)
		if err != nil {
			return nil, err
		}
		resp, err := t.send(lc, req)
		if err == nil {
			return resp, nil
		}
		lc.conn.Close()
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, fmt.Errorf("proxy: %w (%v)", ctxErr, err)
		}
		var stale staleError
		if reused && attempt == 0 && errors.As(err, &stale) {
			// The console closed connections we kept (a restart, its own idle timeout):
			// every other idle one to it is likely gone too.
			t.dropIdle(addr)
			continue
		}
		return nil, err
	}
}

// staleError is a failure before any byte of an answer came back.
type staleError struct{ err error }

func (e staleError) Error() string { return e.err.Error() }
func (e staleError) Unwrap() error { return e.err }

// send writes req on lc and reads the head of its answer; the body's end puts lc back.
func (t *leanTransport) send(lc *leanConn, req *http.Request) (*http.Response, error) {
	// A canceled request (the caller went away) unblocks the connection at once.
	stop := context.AfterFunc(req.Context(), func() { lc.conn.SetDeadline(aLongTimeAgo) })
	if err := req.Write(lc.bw); err != nil {
		stop()
		return nil, staleError{err}
	}
	if err := lc.bw.Flush(); err != nil {
		stop()
		return nil, staleError{err}
	}
	if _, err := lc.br.Peek(1); err != nil {
		stop()
		return nil, staleError{err}
	}
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(lc.br, req)
		if err != nil {
			stop()
			return nil, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			stop()
			resp.Body.Close()
			return nil, errors.New("proxy: the console switched protocols on a request that asked for no upgrade")
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			break
		}
		resp.Body.Close() // an informational answer (103 Early Hints): wait for the real one
	}
	b := &leanBody{t: t, lc: lc, addr: req.URL.Host, stop: stop, body: resp.Body, reuse: !resp.Close}
	if resp.Body == http.NoBody {
		b.release(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// leanBody is an answer's body: at its end the connection goes back to the pool, unless the
// answer was left unread or either side asked to close.
type leanBody struct {
	t     *leanTransport
	lc    *leanConn
	addr  string
	stop  func() bool
	body  io.ReadCloser
	reuse bool
	done  bool
}

func (b *leanBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.release(true)
	} else if err != nil {
		b.release(false)
	}
	return n, err
}

func (b *leanBody) Close() error {
	b.release(false) // an answer not read to its end leaves the connection mid-message
	return nil
}

// release ends the body once: the connection goes back to the pool when the answer was read
// to its end (atEOF), nothing more was sent, and the cancellation had not fired.
func (b *leanBody) release(atEOF bool) {
	if b.done {
		return
	}
	b.done = true
	stopped := b.stop() // false: the request was canceled and the connection's deadline is gone
	if atEOF && b.reuse && stopped && b.lc.br.Buffered() == 0 {
		b.t.put(b.addr, b.lc)
		return
	}
	b.lc.conn.Close()
}

// get returns an idle connection to addr (reused true) or dials a new one.
func (t *leanTransport) get(ctx context.Context, addr string) (*leanConn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		lc := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[addr] = list[:len(list)-1]
		if now.Sub(lc.idleSince) < t.idleTimeout {
			t.mu.Unlock()
			return lc, true, nil
		}
		lc.conn.Close()
	}
	t.mu.Unlock()
	conn, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return &leanConn{conn: conn, br: bufio.NewReaderSize(conn, 4<<10), bw: bufio.NewWriterSize(conn, 4<<10)}, false, nil
}

func (t *leanTransport) put(addr string, lc *leanConn) {
	lc.idleSince = time.Now()
	t.mu.Lock()
	if t.closed || len(t.idle[addr]) >= t.maxIdle {
		t.mu.Unlock()
		lc.conn.Close()
		return
	}
	if t.idle == nil {
		t.idle = map[string][]*leanConn{}
	}
	t.idle[addr] = append(t.idle[addr], lc)
	if !t.sweeper {
		t.sweeper = true
		go t.sweep()
	}
	t.mu.Unlock()
}

// sweep closes connections idle for longer than idleTimeout, until none is left idle.
func (t *leanTransport) sweep() {
	for {
		time.Sleep(t.idleTimeout / 2)
		now := time.Now()
		t.mu.Lock()
		left := 0
		for addr, list := range t.idle {
			keep := list[:0]
			for _, lc := range list {
				if now.Sub(lc.idleSince) >= t.idleTimeout {
					lc.conn.Close()
				} else {
					keep = append(keep, lc)
				}
			}
			clear(list[len(keep):])
			if len(keep) == 0 {
				delete(t.idle, addr)
			} else {
				t.idle[addr] = keep
			}
			left += len(keep)
		}
		if left == 0 || t.closed {
			t.sweeper = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
	}
}

// dropIdle closes every idle connection to addr.
func (t *leanTransport) dropIdle(addr string) {
	t.mu.Lock()
	list := t.idle[addr]
	delete(t.idle, addr)
	t.mu.Unlock()
	for _, lc := range list {
		lc.conn.Close()
	}
}

// CloseIdleConnections closes every idle connection, lean and full, and keeps no more.
func (t *leanTransport) CloseIdleConnections() {
	t.mu.Lock()
	t.closed = true
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, list := range idle {
		for _, lc := range list {
			lc.conn.Close()
		}
	}
	t.full.CloseIdleConnections()
}
