package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// leanConsole is a console for the lean transport's tests: it counts the connections it accepted
// and answers by path.
type leanConsole struct {
	addr    string
	srv     *http.Server
	accepts atomic.Int64
	release chan struct{}
}

func newLeanConsole(t *testing.T) *leanConsole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &leanConsole{addr: ln.Addr().String(), release: make(chan struct{})}
	c.srv = &http.Server{Handler: http.HandlerFunc(c.serve), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.accepts.Add(1)
		}
	}}
	go c.srv.Serve(ln)
	t.Cleanup(func() { c.srv.Close() })
	return c
}

func (c *leanConsole) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/close":
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	case "/hints":
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "after hints")
	case "/stream":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-c.release:
		case <-r.Context().Done():
		}
	case "/big":
		io.WriteString(w, strings.Repeat("x", 1<<20))
	default:
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}
}

func newLean(idle time.Duration) *leanTransport {
	var d net.Dialer
	full := &http.Transport{DialContext: d.DialContext, DisableCompression: true}
	return &leanTransport{full: full, dial: d.DialContext, maxIdle: 4, idleTimeout: idle}
}

func leanGet(t *testing.T, lt *leanTransport, ctx context.Context, method, url string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, url, nil)
	resp, err := lt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestLeanReusesConnections_Issue8: requests in turn share one connection to the console, HEAD
// and OPTIONS included; a request with a body takes the full Transport and still works.
func TestLeanReusesConnections_Issue8(t *testing.T) {
	c := newLeanConsole(t)
	lt := newLean(time.Minute)
	defer lt.CloseIdleConnections()
	for i, m := range []string{"GET", "HEAD", "GET", "OPTIONS", "GET"} {
		status, body, err := leanGet(t, lt, context.Background(), m, "http://"+c.addr+"/p")
		if err != nil || status != 200 {
			t.Fatalf("request %d (%s): %d %v", i, m, status, err)
		}
		if m != "HEAD" && body != m+" /p" {
			t.Fatalf("request %d: body %q", i, body)
		}
	}
	if n := c.accepts.Load(); n != 1 {
		t.Errorf("the console accepted %d connections, want 1", n)
	}
	req, _ := http.NewRequest("POST", "http://"+c.addr+"/p", strings.NewReader("body"))
	resp, err := lt.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
}

// TestLeanConnectionNotReusedAfterClose_Issue8: an answer that asks to close, one left unread,
// and one whose caller went away each end their connection; the next request dials afresh and
// succeeds.
func TestLeanConnectionNotReusedAfterClose_Issue8(t *testing.T) {
	c := newLeanConsole(t)
	lt := newLean(time.Minute)
	defer lt.CloseIdleConnections()
	url := "http://" + c.addr

	if status, body, err := leanGet(t, lt, context.Background(), "GET", url+"/close"); err != nil || status != 200 || body != "bye" {
		t.Fatalf("/close: %d %q %v", status, body, err)
	}
	leanGet(t, lt, context.Background(), "GET", url+"/a")
	if n := c.accepts.Load(); n != 2 {
		t.Errorf("after Connection: close, %d connections, want 2", n)
	}

	// Left unread: closing the body mid-answer must not put the connection back.
	req, _ := http.NewRequest("GET", url+"/big", nil)
	resp, err := lt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 10))
	resp.Body.Close()
	if status, body, err := leanGet(t, lt, context.Background(), "GET", url+"/b"); err != nil || body != "GET /b" {
		t.Fatalf("after an unread answer: %d %q %v", status, body, err)
	}
	if n := c.accepts.Load(); n != 3 {
		t.Errorf("after an unread answer, %d connections, want 3", n)
	}

	// The caller goes away in the middle of a stream.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", url+"/stream", nil)
	resp, err = lt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _ := resp.Body.Read(buf); !strings.Contains(string(buf[:n]), "data: one") {
		t.Fatalf("stream: %q", buf[:n])
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); done <- err }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a canceled stream ended cleanly")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a canceled stream's read did not end")
	}
	resp.Body.Close()
	if _, body, err := leanGet(t, lt, context.Background(), "GET", url+"/c"); err != nil || body != "GET /c" {
		t.Fatalf("after a canceled stream: %q %v", body, err)
	}
	if n := c.accepts.Load(); n != 4 {
		t.Errorf("after a canceled stream, %d connections, want 4", n)
	}
}

// TestLeanCanceledBeforeAnswer_Issue8: a caller that goes away while the console thinks gets the
// context's error (so the hop answers 499 and does not call the console down).
func TestLeanCanceledBeforeAnswer_Issue8(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held sync.WaitGroup
	held.Go(func() {
		conn, err := ln.Accept() // accepts, reads, never answers
		if err == nil {
			io.Copy(io.Discard, conn)
			conn.Close()
		}
	})
	lt := newLean(time.Minute)
	defer lt.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, _, err = leanGet(t, lt, ctx, "GET", "http://"+ln.Addr().String()+"/slow")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	ln.Close()
}

// TestLeanRetriesClosedIdleConnection_Issue8: a console that closed a kept connection (it
// restarted, or timed it out) costs the caller nothing: the request goes again on a new one.
func TestLeanRetriesClosedIdleConnection_Issue8(t *testing.T) {
	c := newLeanConsole(t)
	lt := newLean(time.Minute)
	defer lt.CloseIdleConnections()
	url := "http://" + c.addr
	for i := 0; i < 3; i++ {
		if _, body, err := leanGet(t, lt, context.Background(), "GET", url+"/a"); err != nil || body != "GET /a" {
			t.Fatalf("before: %q %v", body, err)
		}
	}
	// The console closes its idle connections (as on its IdleTimeout or a restart).
	c.srv.SetKeepAlivesEnabled(false) // closes idle connections now, and each after its answer
	c.srv.SetKeepAlivesEnabled(true)
	for i := 0; i < 3; i++ {
		if status, body, err := leanGet(t, lt, context.Background(), "GET", url+"/b"); err != nil || status != 200 || body != "GET /b" {
			t.Fatalf("after the console closed its idle connections: %d %q %v", status, body, err)
		}
	}
}

// TestLeanEarlyHints_Issue8: informational answers are passed over; the final one is returned.
func TestLeanEarlyHints_Issue8(t *testing.T) {
	c := newLeanConsole(t)
	lt := newLean(time.Minute)
	defer lt.CloseIdleConnections()
	if status, body, err := leanGet(t, lt, context.Background(), "GET", "http://"+c.addr+"/hints"); err != nil || status != 200 || body != "after hints" {
		t.Fatalf("%d %q %v", status, body, err)
	}
}

// TestLeanIdleTimeout_Issue8: idle connections are closed after the idle timeout, and the pool
// keeps at most maxIdle per console.
func TestLeanIdleTimeout_Issue8(t *testing.T) {
	c := newLeanConsole(t)
	lt := newLean(20 * time.Millisecond)
	defer lt.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { leanGet(t, lt, context.Background(), "GET", "http://"+c.addr+"/a") })
	}
	wg.Wait()
	lt.mu.Lock()
	if n := len(lt.idle[c.addr]); n > lt.maxIdle {
		t.Errorf("%d idle connections kept, want at most %d", n, lt.maxIdle)
	}
	lt.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lt.mu.Lock()
		n, sweeping := len(lt.idle[c.addr]), lt.sweeper
		lt.mu.Unlock()
		if n == 0 && !sweeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections still kept after the idle timeout", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
