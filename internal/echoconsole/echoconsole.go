// Package echoconsole is a stand-in console for the doors' tests: a loopback HTTP server that
// records every request that reaches it and answers by path. It is for tests only; nothing in
// the product imports it.
//
// Each request is recorded once its body has been read to the end (or has failed), with its
// method, request-URI, path, Host, header, trailer and body, in the order the console received
// them. Then it is answered:
//
//   - /sse (or /sse/…): an event stream. By default three events, "data: tick 0" to
//     "data: tick 2", each flushed, then the stream ends. With [HeldStreams], "data: hello",
//     then "data: tick" at each [Console.Tick], until the request ends.
//   - a WebSocket upgrade (Upgrade: websocket): "101 Switching Protocols", then every line read
//     is written back as "echo:<line>" until the connection ends.
//   - anything else: 200 text/plain "echo <path>".
//
// [Answer] replaces these answers with the test's own handler; the request is still recorded.
package echoconsole

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/phase-console/fleet/internal/rawhttp"
)

// Request is one request as the console received it.
type Request struct {
	Method     string
	RequestURI string
	Path       string
	Host       string
	Header     http.Header
	Trailer    http.Header
	Body       string
}

// An Option changes how a Console answers.
type Option func(*Console)

// HeldStreams makes /sse streams send "data: hello", then "data: tick" at each Tick, and end
// only when the request ends: a stream that stays open while the test acts on the door.
func HeldStreams() Option { return func(c *Console) { c.held = true } }

// Answer has h answer every request, after the console has recorded it.
func Answer(h http.HandlerFunc) Option { return func(c *Console) { c.answer = h } }

// A Console is a running echo console on 127.0.0.1. It is closed when the test ends.
type Console struct {
	ln     net.Listener
	srv    *http.Server
	held   bool
	answer http.HandlerFunc

	mu    sync.Mutex
	reqs  []Request
	ticks int           // Tick calls so far
	next  chan struct{} // closed at the next Tick
}

// New starts a Console on a free 127.0.0.1 port; it is closed when t ends.
func New(t testing.TB, opts ...Option) *Console {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Console{ln: ln, next: make(chan struct{})}
	for _, o := range opts {
		o(c)
	}
	c.srv = &http.Server{Handler: http.HandlerFunc(c.serve)}
	go c.srv.Serve(ln)
	t.Cleanup(func() { c.srv.Close() })
	return c
}

// Close stops the console now, as a console that went down: its listener and every connection
// it holds are closed (hijacked WebSocket connections are not).
func (c *Console) Close() error { return c.srv.Close() }

// Addr is the console's address, 127.0.0.1:port.
func (c *Console) Addr() string { return c.ln.Addr().String() }

// Count is how many requests have reached the console.
func (c *Console) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

// Last is the last request received, and whether there was one.
func (c *Console) Last() (Request, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) == 0 {
		return Request{}, false
	}
	return c.reqs[len(c.reqs)-1], true
}

// Received is how many requests have reached the console, and the last one's path and header:
// what internal/doorrules asks of a door's console.
func (c *Console) Received() (n int, path string, header http.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) == 0 {
		return 0, "", nil
	}
	last := c.reqs[len(c.reqs)-1]
	return len(c.reqs), last.Path, last.Header
}

// All is every request received so far, in order.
func (c *Console) All() []Request { return c.Since(0) }

// Since is the requests received after the first n (n from an earlier Count).
func (c *Console) Since(n int) []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.reqs[n:]...)
}

// Paths is the path of every request received so far, in order.
func (c *Console) Paths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	paths := make([]string, len(c.reqs))
	for i, r := range c.reqs {
		paths[i] = r.Path
	}
	return paths
}

// Tick sends one "data: tick" event on every held stream open now (see HeldStreams).
func (c *Console) Tick() {
	c.mu.Lock()
	c.ticks++
	close(c.next)
	c.next = make(chan struct{})
	c.mu.Unlock()
}

func (c *Console) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, Request{Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, Host: r.Host,
		Header: r.Header.Clone(), Trailer: r.Trailer.Clone(), Body: string(body)})
	sent := c.ticks // a held stream sends the ticks from now on
	c.mu.Unlock()
	switch {
	case c.answer != nil:
		c.answer(w, r)
	case r.URL.Path == "/sse" || strings.HasPrefix(r.URL.Path, "/sse/"):
		w.Header().Set("Content-Type", "text/event-stream")
		if c.held {
			c.hold(w, r, sent)
			return
		}
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: tick %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	case strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString(rawhttp.SwitchingHead(r.Header.Get("Sec-WebSocket-Key")))
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo:" + line)
			brw.Flush()
		}
	default:
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "echo %s", r.URL.Path)
	}
}

// hold streams "data: hello", then a tick for each Tick after the first sent, until r ends.
func (c *Console) hold(w http.ResponseWriter, r *http.Request, sent int) {
	io.WriteString(w, "data: hello\n\n")
	w.(http.Flusher).Flush()
	for {
		c.mu.Lock()
		n, next := c.ticks, c.next
		c.mu.Unlock()
		for ; sent < n; sent++ {
			io.WriteString(w, "data: tick\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-next:
		}
	}
}
