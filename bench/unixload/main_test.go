package main

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// unixServer is an HTTP server on a unix socket that counts its connections and keeps the heads
// of the requests that reached it.
type unixServer struct {
	srv   *httptest.Server
	sock  string
	conns atomic.Int64
	mu    sync.Mutex
	heads []http.Header
	hosts []string
}

func newUnixServer(t *testing.T) *unixServer {
	t.Helper()
	u := &unixServer{sock: filepath.Join(t.TempDir(), "door.sock")}
	ln, err := net.Listen("unix", u.sock)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("a"), 64<<10)
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.heads = append(u.heads, r.Header.Clone())
		u.hosts = append(u.hosts, r.Host)
		u.mu.Unlock()
		switch r.URL.Path {
		case "/small":
			w.Write([]byte("hello, fleet\n"))
		case "/big":
			w.Write(big) // larger than the server's buffer: the answer goes chunked
		default:
			http.NotFound(w, r)
		}
	}))
	u.srv.Listener.Close()
	u.srv.Listener = ln
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.srv.Start()
	t.Cleanup(u.srv.Close)
	return u
}

func TestRunKeptConnections(t *testing.T) {
	u := newUnixServer(t)
	res := run(config{network: "unix", addr: u.sock, path: "/small", conns: 4, requests: 200,
		headers: []string{"X-Forwarded-Host: bench.example.ts.net", "X-Forwarded-For: 100.64.0.7"}})
	if res.requests != 200 || res.non2xx != 0 || res.errConnect+res.errRead+res.errWrite != 0 {
		t.Fatalf("got %d requests, %d non-2xx, errors %d/%d/%d; want 200 answered, none failed",
			res.requests, res.non2xx, res.errConnect, res.errRead, res.errWrite)
	}
	if n := u.conns.Load(); n > 4 {
		t.Errorf("the server saw %d connections, want at most 4 kept ones", n)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.heads) != 200 {
		t.Fatalf("the server saw %d requests, want 200", len(u.heads))
	}
	for i, h := range u.heads {
		if u.hosts[i] != "localhost" || strings.Join(h.Values("X-Forwarded-Host"), ",") != "bench.example.ts.net" ||
			strings.Join(h.Values("X-Forwarded-For"), ",") != "100.64.0.7" {
			t.Fatalf("request %d: Host %q, head %v: want what Tailscale Serve sends a unix-socket backend", i, u.hosts[i], h)
		}
	}
	if len(res.latencies) != 200 {
		t.Errorf("%d latencies, want one per answer", len(res.latencies))
	}
}

func TestRunChunkedAnswers(t *testing.T) {
	u := newUnixServer(t)
	res := run(config{network: "unix", addr: u.sock, path: "/big", conns: 2, requests: 20})
	if res.requests != 20 || res.errRead != 0 || res.bytesRead < 20*64<<10 {
		t.Fatalf("got %d answers, %d read errors, %d bytes; want 20 whole 64 KiB answers", res.requests, res.errRead, res.bytesRead)
	}
	if n := u.conns.Load(); n > 2 {
		t.Errorf("the server saw %d connections, want the chunked answers read to their end on 2 kept ones", n)
	}
}

func TestRunNewConnectionEach(t *testing.T) {
	u := newUnixServer(t)
	res := run(config{network: "unix", addr: u.sock, path: "/small", conns: 3, requests: 30, close: true})
	if res.requests != 30 || res.errConnect+res.errRead+res.errWrite != 0 {
		t.Fatalf("got %d answers, errors %d/%d/%d; want 30, none failed", res.requests, res.errConnect, res.errRead, res.errWrite)
	}
	if n := u.conns.Load(); n != 30 {
		t.Errorf("the server saw %d connections, want one per request", n)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, h := range u.heads {
		if h.Get("Connection") != "close" {
			t.Fatalf("a request without Connection: close: %v", h)
		}
	}
}

func TestRunCountsNon2xxAndTCP(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	res := run(config{network: "tcp", addr: srv.Listener.Addr().String(), path: "/missing", conns: 2, requests: 10})
	if res.requests != 10 || res.non2xx != 10 {
		t.Fatalf("got %d answers, %d non-2xx; want 10 and 10", res.requests, res.non2xx)
	}
}

func TestReadResponseFraming(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		status    int
		keep      bool
		rest      string // what must be left unread: the next answer
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", 200, true, "NEXT"},
		{"chunked with extension and trailer", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\nNEXT", 200, true, "NEXT"},
		{"no body on 304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\nNEXT", 304, true, "NEXT"},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nokNEXT", 200, false, "NEXT"},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nokNEXT", 200, false, "NEXT"},
		{"to the end", "HTTP/1.1 200 OK\r\n\r\nall of it", 200, false, ""},
	} {
		br := bufio.NewReader(strings.NewReader(tc.raw))
		status, n, keep, err := readResponse(br)
		if err != nil || status != tc.status || keep != tc.keep {
			t.Errorf("%s: status %d keep %v err %v; want %d %v", tc.name, status, keep, err, tc.status, tc.keep)
			continue
		}
		rest := make([]byte, 16)
		k, _ := br.Read(rest)
		if string(rest[:k]) != tc.rest || int(n) != len(tc.raw)-len(tc.rest) {
			t.Errorf("%s: read %d bytes, left %q; want the answer read to its end and %q left", tc.name, n, rest[:k], tc.rest)
		}
	}
	for _, raw := range []string{"HTTP/1.1 2x0 OK\r\n\r\n", "SSH-2.0\r\n\r\n", "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"} {
		if _, _, _, err := readResponse(bufio.NewReader(strings.NewReader(raw))); err == nil {
			t.Errorf("%q: read as an answer, want an error", raw)
		}
	}
}

func TestPercentile(t *testing.T) {
	var l []time.Duration
	for i := 1; i <= 100; i++ {
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	if p := percentile(l, 50); p != 50*time.Millisecond {
		t.Errorf("p50 = %v, want 50ms", p)
	}
	if p := percentile(l, 99); p != 99*time.Millisecond {
		t.Errorf("p99 = %v, want 99ms", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %v, want 0", p)
	}
}
