package fastloop

// The door's own connection loop (ConnServer, conn.go) on the wire: raw requests over net.Dial
// to a real listener, asserting what the caller got and what the console saw — which requests
// the fast loop serves and which it hands to net/http (with the bytes read and the verdict made),
// its kept console connections (pool.go), streams, and Shutdown.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/proxy"
)

// countFast counts the requests the fast loop serves from now until the test ends.
func countFast(t *testing.T) func() int64 {
	var n atomic.Int64
	fastServedHook = func() { n.Add(1) }
	t.Cleanup(func() { fastServedHook = nil })
	return n.Load
}

// readAnswer reads one answer to a request of method from br.
func readAnswer(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer to %s: %v", method, err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the body of the answer to %s: %v", method, err)
	}
	return res, string(body)
}

// TestConnFastThenHandedOver_S6: one connection carries a plain GET (the fast loop), a POST with a
// body (handed to net/http, with the bytes read), then a GET (net/http's now): each is answered in
// order, and the console sees exactly the three, with the POST's body.
func TestConnFastThenHandedOver_S6(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	before := d.Alpha.Count()
	conn := d.Dial()
	defer conn.Close()
	steps := []struct{ req, body string }{
		{doortest.ServeReq("GET", "/c/alpha/one"), "echo /one"},
		{doortest.ServeReq("POST", "/c/alpha/two", "Content-Type: text/plain", "Content-Length: 5") + "hello", "echo /two"},
		{doortest.ServeReq("GET", "/c/alpha/three"), "echo /three"},
	}
	for i, s := range steps {
		r := (rawhttp.Exchange(t, conn, s.req, 1))[0]
		if r.Status != http.StatusOK || r.Body != s.body {
			t.Fatalf("request %d: got %d %q %q, want 200 %q", i+1, r.Status, r.Reason, r.Body, s.body)
		}
	}
	got := d.Alpha.Since(before)
	var saw []string
	for _, s := range got {
		saw = append(saw, s.Method+" "+s.Path+" "+s.Body)
	}
	if want := []string{"GET /one ", "POST /two hello", "GET /three "}; !slices.Equal(saw, want) {
		t.Errorf("the console saw %q, want %q", saw, want)
	}
	if n := fast(); n != 1 {
		t.Errorf("the fast loop served %d requests, want only the first (the rest are net/http's)", n)
	}
}

// TestConnRefusalJudgedOnce_S7_S11: pipelined in one write, a GET, a request the Door refuses
// with a keep-alive refusal, and a GET are all answered; the refused one — judged by the fast loop
// and answered by net/http with that verdict — is logged once, and the caller verification is
// asked once per request that reaches it, not again when net/http serves the refusal.
func TestConnRefusalJudgedOnce_S7_S11(t *testing.T) {
	rows := []struct {
		name, path, reason string
		status             int
		asked              int64 // verifications for the three requests
	}{
		{"S7 hooks", "/c/alpha/hooks/x", "hooks", http.StatusForbidden, 2}, // refused before verification
		{"S8 unknown console", "/c/nosuch/x", "unknown-console", http.StatusNotFound, 3},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := startTestDoor(t)
			fast := countFast(t)
			before := d.Alpha.Count()
			rs := d.RawMany(doortest.ServeReq("GET", "/c/alpha/one")+doortest.ServeReq("GET", row.path)+doortest.ServeReq("GET", "/c/alpha/three"), 3)
			if rs[0].Status != 200 || rs[0].Body != "echo /one" || rs[1].Status != row.status || rs[1].Reason != row.reason ||
				rs[2].Status != 200 || rs[2].Body != "echo /three" {
				t.Fatalf("got %d %q, %d %q, %d %q; want 200, %d %s, 200", rs[0].Status, rs[0].Body, rs[1].Status, rs[1].Reason,
					rs[2].Status, rs[2].Body, row.status, row.reason)
			}
			if paths := pathsOf(d.Alpha.Since(before)); !slices.Equal(paths, []string{"/one", "/three"}) {
				t.Errorf("the console saw %q, want /one and /three", paths)
			}
			d.WantRejectedLine(t, d.RejectedBefore(), doortest.ServeReq("GET", row.path), row.reason)
			if n := d.own.asked.Load(); n != row.asked {
				t.Errorf("the caller verification was asked %d times, want %d (judged once each)", n, row.asked)
			}
			if n := fast(); n != 1 {
				t.Errorf("the fast loop served %d requests, want 1 (it hands over at the refusal)", n)
			}
		})
	}
}

func pathsOf(rs []echoconsole.Request) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Path)
	}
	return out
}

// TestConnKeptConsoleConnectionClosed_F: a kept console connection that the console closed
// meanwhile costs nothing: the next GET is sent again once, on a fresh connection, and answered;
// the console sees it once.
func TestConnKeptConsoleConnectionClosed_F(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, _ *http.Request) bool {
		io.WriteString(c, doortest.AnswerOK)
		return false // and closes the connection without a word
	})
	d.setConsole("raw", rc.Addr())
	conn := d.Dial()
	defer conn.Close()
	if r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", "/c/raw/one"), 1))[0]; r.Status != 200 || r.Body != "ok" {
		t.Fatalf("first GET: %d %q %q", r.Status, r.Reason, r.Body)
	}
	rc.WaitEnded(t, rc.Seen()[0].Conn) // the door keeps a connection that the console has closed now
	if r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", "/c/raw/two"), 1))[0]; r.Status != 200 || r.Body != "ok" {
		t.Fatalf("GET after the console closed the kept connection: %d %q %q, want 200", r.Status, r.Reason, r.Body)
	}
	if got := rc.Seen(); len(got) != 2 || got[0].Path != "/one" || got[1].Path != "/two" || got[1].Conn == got[0].Conn {
		t.Errorf("the console saw %v; want /one, then /two once on a fresh connection", rawPaths(got))
	}
	if n := fast(); n != 2 {
		t.Errorf("the fast loop served %d requests, want 2", n)
	}
}

// TestConnEveryKeptConnectionClosed_F: when the console has closed every connection the door
// keeps for it (a console restarted, or one that closes idle connections after a while), the next
// GET skips them all, goes out once on a fresh connection and is answered — however many were
// kept, not only the first.
func TestConnEveryKeptConnectionClosed_F(t *testing.T) {
	const kept = 4
	d := startTestDoor(t)
	var arrived sync.WaitGroup
	arrived.Add(kept)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		if r.URL.Path == "/held" {
			// Held until all kept requests are in: each has a connection of its own.
			arrived.Done()
			select {
			case <-all:
			case <-time.After(doortest.WaitLimit):
			}
		}
		io.WriteString(c, doortest.AnswerOK)
		return r.URL.Path != "/held" // and closes each held one without a word
	})
	d.setConsole("raw", rc.Addr())
	errs := make(chan error, kept)
	for range kept {
		go func() {
			c, err := net.Dial("tcp", d.Addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(doortest.WaitLimit))
			if _, err := io.WriteString(c, rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw/held"))); err != nil {
				errs <- err
				return
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil && res.StatusCode != 200 {
				err = fmt.Errorf("held GET: %d", res.StatusCode)
			}
			errs <- err
		}()
	}
	for range kept {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	held := map[int]bool{}
	for _, s := range rc.Seen() {
		held[s.Conn] = true
	}
	if len(held) != kept {
		t.Fatalf("the console got the held GETs on %d connections, want %d", len(held), kept)
	}
	// The door keeps connections that the console has closed now.
	for ended := map[int]bool{}; len(ended) < kept; {
		select {
		case n := <-rc.Ended():
			if held[n] {
				ended[n] = true
			}
		case <-time.After(doortest.WaitLimit):
			t.Fatalf("the console's held connections did not end")
		}
	}
	if r := d.Raw(doortest.ServeReq("GET", "/c/raw/next")); r.Status != 200 || r.Body != "ok" {
		t.Fatalf("GET after the console closed every kept connection: %d %q %q, want 200", r.Status, r.Reason, r.Body)
	}
	var next []doortest.RawSeen
	for _, s := range rc.Seen() {
		if s.Path == "/next" {
			next = append(next, s)
		}
	}
	if len(next) != 1 || held[next[0].Conn] {
		t.Errorf("the console saw /next as %v; want it once, on a fresh connection", rawPaths(next))
	}
}

// TestConnConsoleHangsUp_F: a console that closes each connection after reading a request,
// without answering, gets a GET at most twice — once on the kept connection, once on a fresh one
// — and the caller gets 502 console-down; with no kept connection, it gets the GET once.
func TestConnConsoleHangsUp_F(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	var hangUp atomic.Bool
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, _ *http.Request) bool {
		if hangUp.Load() {
			return false
		}
		io.WriteString(c, doortest.AnswerOK)
		return true
	})
	d.setConsole("raw", rc.Addr())
	conn := d.Dial()
	defer conn.Close()
	if r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", "/c/raw/warm"), 1))[0]; r.Status != 200 {
		t.Fatalf("warm-up GET: %d %q", r.Status, r.Reason)
	}
	hangUp.Store(true)
	r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", "/c/raw/x"), 1))[0]
	if r.Status != http.StatusBadGateway || r.Reason != "console-down" {
		t.Errorf("got %d %q, want 502 console-down", r.Status, r.Reason)
	}
	got := rc.Seen()
	var conns []int
	for _, s := range got {
		if s.Path == "/x" {
			conns = append(conns, s.Conn)
		}
	}
	if len(conns) < 1 || len(conns) > 2 || len(conns) == 2 && conns[1] == conns[0] {
		t.Errorf("the console got the GET on connections %v; want at most twice, the second on a fresh one", conns)
	}

	t.Run("no kept connection", func(t *testing.T) {
		rc2 := doortest.NewRawConsole(t, func(int, net.Conn, *http.Request) bool { return false })
		d.setConsole("raw2", rc2.Addr())
		r := d.Raw(doortest.ServeReq("GET", "/c/raw2/x"))
		if r.Status != http.StatusBadGateway || r.Reason != "console-down" {
			t.Errorf("got %d %q, want 502 console-down", r.Status, r.Reason)
		}
		if got := rc2.Seen(); len(got) != 1 {
			t.Errorf("the console got the GET %d times on a fresh connection, want once", len(got))
		}
	})
	if n := fast(); n != 3 {
		t.Errorf("the fast loop served %d requests, want 3", n)
	}
}

// TestConnServerSentEvents_S9: an event stream through the fast loop reaches the caller event by
// event, as the console sends them; when the caller goes while the console is silent, the console's
// connection is closed (a console waits for no one).
func TestConnServerSentEvents_S9(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	next := make(chan struct{})
	gone := make(chan error, 1)
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"b\r\ndata: one\n\n\r\n")
		select {
		case <-next:
		case <-time.After(doortest.WaitLimit):
			return false
		}
		io.WriteString(c, "b\r\ndata: two\n\n\r\n")
		// Silent now, until the door closes the connection.
		c.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
		_, err := c.Read(make([]byte, 1))
		gone <- err
		return false
	})
	d.setConsole("raw", rc.Addr())
	conn, _, resp := d.Open(doortest.ServeReq("GET", "/c/raw/sse", "Accept: text/event-stream"))
	defer conn.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body := bufio.NewReader(resp.Body)
	readEvent := func(want string) {
		t.Helper()
		for _, w := range []string{want + "\n", "\n"} {
			if line, err := body.ReadString('\n'); line != w {
				t.Fatalf("read %q, %v; want %q", line, err, w)
			}
		}
	}
	// The console sends "two" only after this read: a door that waited for more would fail it at
	// the connection's deadline.
	readEvent("data: one")
	close(next)
	readEvent("data: two")
	callerLeaves(t, d, conn, gone, fast)
}

// callerLeaves closes the caller's connection conn, the one request on it served by the fast
// loop, and checks that the console's connection then closes (gone: the console's read of it
// ends with EOF), and that nothing is logged as a fault: a caller leaving is none, of the
// console's or the door's.
func callerLeaves(t *testing.T, d *testDoor, conn net.Conn, gone <-chan error, fast func() int64) {
	t.Helper()
	conn.Close()
	select {
	case err := <-gone:
		if !errors.Is(err, io.EOF) {
			t.Errorf("the console's read ended with %v, want EOF (the door closing its connection)", err)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatal("the console's connection stayed open after the caller went")
	}
	if n := fast(); n != 1 {
		t.Errorf("the fast loop served %d requests, want 1", n)
	}
	wantNoFaultLogged(t, d, "a caller that left")
}

// wantNoFaultLogged wants no fleet.hop-error or fleet.console-down line in d's log: what happened
// (what names it) is no fault of the console's or the door's.
func wantNoFaultLogged(t *testing.T, d *testDoor, what string) {
	t.Helper()
	for _, event := range []string{"fleet.hop-error", "fleet.console-down"} {
		if n := len(d.Logs.Events(event)); n != 0 {
			t.Errorf("%d %s log lines for %s", n, event, what)
		}
	}
}

// TestConnHeadAnswer_S6: a HEAD through the fast loop is answered with the head alone — the
// answer to a GET written after it starts right after that head.
func TestConnHeadAnswer_S6(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	before := d.Alpha.Count()
	conn := d.Dial()
	defer conn.Close()
	if _, err := io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("HEAD", "/c/alpha/h")+doortest.ServeReq("GET", "/c/alpha/g"))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, body := readAnswer(t, br, "HEAD")
	if res.StatusCode != 200 || body != "" || len(res.TransferEncoding) != 0 {
		t.Errorf("HEAD: got %d %q, transfer encoding %v; want 200 and no body", res.StatusCode, body, res.TransferEncoding)
	}
	// Read as a GET's, a body after the HEAD's head would be taken for this answer's start.
	if res, body := readAnswer(t, br, "GET"); res.StatusCode != 200 || body != "echo /g" {
		t.Errorf("GET after HEAD: got %d %q, want 200 \"echo /g\"", res.StatusCode, body)
	}
	var saw []string
	for _, s := range d.Alpha.Since(before) {
		saw = append(saw, s.Method+" "+s.Path)
	}
	if want := []string{"HEAD /h", "GET /g"}; !slices.Equal(saw, want) {
		t.Errorf("the console saw %q, want %q", saw, want)
	}
	if n := fast(); n != 2 {
		t.Errorf("the fast loop served %d requests, want 2", n)
	}
}

// TestConnConnectionClose_S6: a caller's Connection: close is answered with Connection: close and
// the connection closed after the answer; the console is asked once, without the caller's
// Connection line.
func TestConnConnectionClose_S6(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	before := d.Alpha.Count()
	conn := d.Dial()
	defer conn.Close()
	if _, err := io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/x", "Connection: close"))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, body := readAnswer(t, br, "GET")
	if res.StatusCode != 200 || body != "echo /x" || !res.Close {
		t.Errorf("got %d %q, close %v; want 200 with Connection: close", res.StatusCode, body, res.Close)
	}
	doortest.WantClosed(t, conn, br, "after the answer to Connection: close")
	got := d.Alpha.Since(before)
	if len(got) != 1 || got[0].Path != "/x" {
		t.Fatalf("the console saw %q, want /x once", pathsOf(got))
	}
	if v := got[0].Header.Values("Connection"); len(v) != 0 {
		t.Errorf("the console was sent Connection %q: a hop-by-hop header of the caller's", v)
	}
	if n := fast(); n != 1 {
		t.Errorf("the fast loop served %d requests, want 1", n)
	}
}

// slowDoor is a door served by a ConnServer of the test's own, with a console "slow" whose answer
// to /slow waits for release (arrived says it has the request); it answers anything else at once.
type slowDoor struct {
	*testDoor
	cs       *ConnServer
	serveErr chan error
	arrived  chan struct{}
	release  chan struct{}
	ended    chan struct{} // /slow's request ended before its release: its connection closed
}

func startSlowDoor(t *testing.T) *slowDoor {
	d := &slowDoor{testDoor: startTestDoor(t), serveErr: make(chan error, 1),
		arrived: make(chan struct{}, 1), release: make(chan struct{}), ended: make(chan struct{}, 1)}
	slow := echoconsole.New(t, echoconsole.Answer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			d.arrived <- struct{}{}
			select {
			case <-d.release:
			case <-r.Context().Done():
				d.ended <- struct{}{}
				return
			case <-time.After(doortest.WaitLimit):
			}
		}
		fmt.Fprintf(w, "answer %s", r.URL.Path)
	}))
	d.setConsole("slow", slow.Addr())
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.testDoor.Addr = ln.Addr().String() // d.dial dials this ConnServer
	d.cs = &ConnServer{Door: d.door, Server: proxy.NewServer(d.door, d.door.Log)}
	go func() { d.serveErr <- d.cs.Serve(ln) }()
	t.Cleanup(func() { d.cs.Close() })
	return d
}

// connections opens the three kinds of connection that Shutdown and Close find: one idle in the
// fast loop after a GET, one idle in net/http after a POST (handed over), and one in the fast
// loop's exchange of /slow, whose console holds the answer. busy's reader is returned with it.
func (d *slowDoor) connections(t *testing.T) (idle, handed, busy net.Conn, busyBr *bufio.Reader) {
	t.Helper()
	idle, handed, busy = d.Dial(), d.Dial(), d.Dial()
	t.Cleanup(func() { idle.Close(); handed.Close(); busy.Close() })
	if r := (rawhttp.Exchange(t, idle, doortest.ServeReq("GET", "/c/slow/x"), 1))[0]; r.Status != 200 {
		t.Fatalf("GET: %d %q", r.Status, r.Reason)
	}
	post := doortest.ServeReq("POST", "/c/slow/p", "Content-Length: 2") + "hi"
	if r := (rawhttp.Exchange(t, handed, post, 1))[0]; r.Status != 200 {
		t.Fatalf("POST: %d %q", r.Status, r.Reason)
	}
	if _, err := io.WriteString(busy, rawhttp.CRLF(doortest.ServeReq("GET", "/c/slow/slow"))); err != nil {
		t.Fatal(err)
	}
	doortest.WaitFor(t, d.arrived, "the console to hold /slow")
	return idle, handed, busy, bufio.NewReader(busy)
}

// TestConnShutdown: Shutdown closes the connections that wait for a request at once, lets the one
// in an exchange finish its answer (then closes it), and only then returns; Serve, before and
// after, returns http.ErrServerClosed.
func TestConnShutdown(t *testing.T) {
	d := startSlowDoor(t)
	idle, handed, busy, busyBr := d.connections(t)

	done := make(chan error, 1)
	go func() { done <- d.cs.Shutdown(context.Background()) }()
	doortest.WantClosed(t, idle, nil, "a fast connection idle at Shutdown")
	doortest.WantClosed(t, handed, nil, "a handed-over connection idle at Shutdown")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while an exchange was still running", err)
	default:
	}

	close(d.release)
	res, body := readAnswer(t, busyBr, "GET")
	if res.StatusCode != 200 || body != "answer /slow" {
		t.Errorf("the exchange running at Shutdown: got %d %q, want its whole answer", res.StatusCode, body)
	}
	doortest.WantClosed(t, busy, busyBr, "the busy connection after its answer")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatal("Shutdown did not return after the last exchange ended")
	}
	select {
	case err := <-d.serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatal("Serve did not return after Shutdown")
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve after Shutdown returned %v, want http.ErrServerClosed", err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Errorf("Serve after Shutdown left its listener open")
	}
}

// TestConnClose: Close closes every connection at once, the one in an exchange too, before its
// console answers — and that exchange's connection to its console, so the console is not left
// answering nobody.
func TestConnClose(t *testing.T) {
	d := startSlowDoor(t)
	idle, handed, busy, busyBr := d.connections(t)
	if err := d.cs.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	doortest.WantClosed(t, idle, nil, "a fast connection idle at Close")
	doortest.WantClosed(t, handed, nil, "a handed-over connection idle at Close")
	doortest.WantClosed(t, busy, busyBr, "a connection in an exchange at Close")
	// Its console is told too: the door's connection to it closes, and its request ends.
	doortest.WaitFor(t, d.ended, "the console's request for a closed connection to end")
	close(d.release)
	select {
	case err := <-d.serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatal("Serve did not return after Close")
	}
}

// TestConnHeadOverReadBuffer_S9: a head that does not fit the fast loop's 8 KiB buffer is served
// by net/http from the bytes read, whole — alone, after a fast GET, or pipelined behind one.
func TestConnHeadOverReadBuffer_S9(t *testing.T) {
	cookie := "big=" + strings.Repeat("c", 20<<10)
	big := doortest.ServeReq("GET", "/c/alpha/big", "Cookie: "+cookie)
	small := doortest.ServeReq("GET", "/c/alpha/small")
	rows := []struct {
		name  string
		reqs  []string // written in turn, each answered before the next
		paths []string
		fast  int64
	}{
		{"S9 alone", []string{big}, []string{"/big"}, 0},
		{"S9 after a fast GET", []string{small, big}, []string{"/small", "/big"}, 1},
		{"S9 pipelined behind a fast GET", []string{small + big}, []string{"/small", "/big"}, 1},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := startTestDoor(t)
			fast := countFast(t)
			conn := d.Dial()
			defer conn.Close()
			var rs []doortest.Response
			for _, req := range row.reqs {
				rs = append(rs, (rawhttp.Exchange(t, conn, req, strings.Count(req, " HTTP/1.1\n")))...)
			}
			for i, r := range rs {
				if r.Status != 200 || r.Body != "echo "+row.paths[i] {
					t.Errorf("answer %d: %d %q %q", i+1, r.Status, r.Reason, r.Body)
				}
			}
			got := d.Alpha.All()
			if paths := pathsOf(got); !slices.Equal(paths, row.paths) {
				t.Fatalf("the console saw %q, want %q", paths, row.paths)
			}
			if c := got[len(got)-1].Header.Get("Cookie"); c != cookie {
				t.Errorf("the console saw a Cookie of %d bytes, want the whole %d", len(c), len(cookie))
			}
			if n := fast(); n != row.fast {
				t.Errorf("the fast loop served %d requests, want %d", n, row.fast)
			}
		})
	}
}

// TestConnHeadOver64KiB_S9: a head over 64 KiB, handed to net/http, is 431 and reaches no console.
func TestConnHeadOver64KiB_S9(t *testing.T) {
	d := startTestDoor(t)
	t.Run("S9 65 KiB Cookie", func(t *testing.T) {
		d.WantRejected(t, doortest.ServeReq("GET", "/c/alpha/x", "Cookie: big="+strings.Repeat("c", 65<<10)),
			http.StatusRequestHeaderFieldsTooLarge, "header-too-large")
	})
	t.Run("S9 80 KiB Cookie", func(t *testing.T) {
		before := d.Alpha.Count()
		r := d.RawAs(doortest.ServeReq("GET", "/c/alpha/x", "Cookie: big="+strings.Repeat("c", 80<<10)))
		if r.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("got %d %q, want 431", r.Status, r.Reason)
		}
		if n := d.Alpha.Count(); n != before {
			t.Errorf("the console saw %d request(s)", n-before)
		}
	})
}

// TestConnPoolReuse: sequential requests reuse one kept console connection, whether they come on
// one caller connection or on one caller connection after another.
func TestConnPoolReuse(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, _ *http.Request) bool {
		_, err := io.WriteString(c, doortest.AnswerOK)
		return err == nil
	})
	d.setConsole("raw", rc.Addr())
	conn := d.Dial()
	defer conn.Close()
	for i := range 32 {
		r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", fmt.Sprintf("/c/raw/%d", i)), 1))[0]
		if r.Status != 200 || r.Body != "ok" {
			t.Fatalf("GET %d: %d %q %q", i, r.Status, r.Reason, r.Body)
		}
	}
	// One caller after another: each waits for the door to close its connection, which it does
	// after putting the console's connection back.
	for i := range 32 {
		c := d.Dial()
		r := (rawhttp.Exchange(t, c, doortest.ServeReq("GET", fmt.Sprintf("/c/raw/c%d", i), "Connection: close"), 1))[0]
		if r.Status != 200 || r.Body != "ok" {
			t.Fatalf("caller %d: %d %q %q", i, r.Status, r.Reason, r.Body)
		}
		doortest.WantClosed(t, c, nil, "a Connection: close caller")
		c.Close()
	}
	if got := rc.Seen(); len(got) != 64 || doortest.UsedConns(got) != 1 {
		t.Errorf("the console saw %d requests on %d connections, want 64 on one: %v", len(got), doortest.UsedConns(got), rawPaths(got))
	}
	if n := fast(); n != 64 {
		t.Errorf("the fast loop served %d requests, want 64", n)
	}
}

// stray looks like an answer: a console's bytes that no request asked for.
const stray = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nstolen"

// A consoleEndsRow is a console's answer to method path after which its connection cannot carry
// another exchange; late, if any, is written once the caller has the answer.
type consoleEndsRow struct {
	name, method, path string
	answer, late       string
}

var consoleEndsRows = []consoleEndsRow{
	{"Connection: close", "GET", "/close", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", ""},
	{"HTTP/1.0", "GET", "/http10", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", ""},
	{"HEAD answered with a body", "HEAD", "/headbody", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", ""},
	{"more than Content-Length", "GET", "/extra", doortest.AnswerOK + stray, ""},
}

// TestConnCallerConnectionOutlivesConsoles_S6: when the console's answer ends the console's
// connection, the caller's connection carries the next request, as ReverseProxy's does — or, if
// the door closes it, the answer said Connection: close.
func TestConnCallerConnectionOutlivesConsoles_S6(t *testing.T) {
	for _, row := range consoleEndsRows {
		t.Run(row.name, func(t *testing.T) {
			d := startTestDoor(t)
			rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
				if r.URL.Path == row.path {
					io.WriteString(c, row.answer)
				} else {
					io.WriteString(c, doortest.AnswerOK)
				}
				return true
			})
			d.setConsole("raw", rc.Addr())
			conn := d.Dial()
			defer conn.Close()
			br := bufio.NewReader(conn)
			io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq(row.method, "/c/raw"+row.path)))
			first, _ := readAnswer(t, br, row.method)
			io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw/after")))
			res, err := http.ReadResponse(br, nil)
			switch {
			case err != nil && !first.Close:
				t.Errorf("the door closed the caller's connection after an answer that did not say Connection: close "+
					"(ReverseProxy keeps it): the next request got %v", err)
			case err == nil && res.StatusCode != 200:
				t.Errorf("the next request got %d %q", res.StatusCode, res.Header.Get("X-Fleet-Reason"))
			}
		})
	}
}

// TestConnPoolNotReused_F: a console connection whose answer ends it — Connection: close, an
// HTTP/1.0 answer, a HEAD answered with a body, more bytes than the answer's length — is not used
// again, even when the console keeps it open: the next request goes on a fresh connection and gets
// its own answer. Bytes the console sends after the door passed the answer on count too (net/http's
// Transport watches its idle connections for them: "Unsolicited response received on idle HTTP
// channel"); here they look like an answer, which must never reach the next caller.
func TestConnPoolNotReused_F(t *testing.T) {
	rows := slices.Concat(consoleEndsRows, []consoleEndsRow{
		{"HEAD answered with a body sent late", "HEAD", "/headlate", "HTTP/1.1 200 OK\r\nContent-Length: 46\r\n\r\n", stray},
		{"more than Content-Length sent late", "GET", "/extralate", doortest.AnswerOK, stray},
	})
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := startTestDoor(t)
			fast := countFast(t)
			late, lateSent := make(chan struct{}), make(chan struct{})
			rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
				if r.URL.Path != row.path {
					io.WriteString(c, doortest.AnswerOK)
					return true
				}
				io.WriteString(c, row.answer)
				if row.late != "" {
					select {
					case <-late:
						io.WriteString(c, row.late)
					case <-time.After(doortest.WaitLimit):
					}
					close(lateSent)
				}
				return true // the console keeps every connection: only the door can tell
			})
			d.setConsole("raw", rc.Addr())
			conn := d.Dial()
			defer conn.Close()
			if _, err := io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq(row.method, "/c/raw"+row.path))); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			first, body := readAnswer(t, br, row.method)
			if first.StatusCode != 200 || row.method == "GET" && body != "ok" || row.method == "HEAD" && body != "" {
				t.Fatalf("first answer: %d %q", first.StatusCode, body)
			}
			if row.late != "" {
				close(late)
				doortest.WaitFor(t, lateSent, "the console's late bytes")
			}
			// On the same connection: the fast loop puts the console's connection back before it
			// reads the caller's next request.
			io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw/after")))
			res, err := http.ReadResponse(br, nil)
			if err != nil { // the door closed it (TestConnCallerConnectionOutlivesConsoles_S6)
				c2 := d.Dial()
				defer c2.Close()
				c2.Write([]byte(rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw/after"))))
				if res, err = http.ReadResponse(bufio.NewReader(c2), nil); err != nil {
					t.Fatalf("the next GET, on a new connection: %v", err)
				}
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || string(b) != "ok" {
				t.Errorf("the next GET got %d %q %q, want its own answer, 200 \"ok\"", res.StatusCode, res.Header.Get("X-Fleet-Reason"), b)
			}
			if got := rc.Seen(); len(got) < 2 || got[1].Path != "/after" || got[1].Conn == got[0].Conn {
				t.Errorf("the console saw %v; want /after on a connection of its own", rawPaths(got))
			}
			if n := fast(); n != 2 {
				t.Errorf("the fast loop served %d requests, want 2", n)
			}
		})
	}
}

// TestConnStrayBytesReachNoOtherCaller_F: bytes a console sends after an answer, while its
// connection is kept, are never taken for the answer to another caller's request.
func TestConnStrayBytesReachNoOtherCaller_F(t *testing.T) {
	d := startTestDoor(t)
	late, lateSent := make(chan struct{}), make(chan struct{})
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		io.WriteString(c, doortest.AnswerOK)
		if r.URL.Path == "/first" {
			select {
			case <-late:
				io.WriteString(c, stray)
			case <-time.After(doortest.WaitLimit):
			}
			close(lateSent)
		}
		return true
	})
	d.setConsole("raw", rc.Addr())
	// The first caller's connection closes once its exchange is over: the console's connection
	// is kept by then.
	first := d.Dial()
	defer first.Close()
	if r := (rawhttp.Exchange(t, first, doortest.ServeReq("GET", "/c/raw/first", "Connection: close"), 1))[0]; r.Status != 200 {
		t.Fatalf("first caller: %d %q", r.Status, r.Reason)
	}
	doortest.WantClosed(t, first, nil, "the first caller's connection")
	close(late)
	doortest.WaitFor(t, lateSent, "the console's stray bytes")
	r := d.Raw(doortest.ServeReq("GET", "/c/raw/second"))
	if r.Status != 200 || r.Body != "ok" {
		t.Errorf("another caller got %d %q %q, want its own answer, 200 \"ok\"", r.Status, r.Reason, r.Body)
	}
}

func rawPaths(got []doortest.RawSeen) []string {
	var out []string
	for _, s := range got {
		out = append(out, fmt.Sprintf("%s %s on #%d", s.Method, s.Path, s.Conn))
	}
	return out
}

// TestConnCallerGone_S9: a caller that goes away while its console is slow — still thinking
// (a long poll, a slow page), or stalled in the middle of a body — closes the door's connection to
// that console, as net/http's server and ReverseProxy do (the request's context ends): the console
// learns that nobody waits, and the door holds nothing for a caller that is gone.
func TestConnCallerGone_S9(t *testing.T) {
	rows := []struct {
		name    string
		partial string // what the console writes before it stalls
	}{
		{"S9 before the answer begins", ""},
		{"S9 in a body that stalls", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := startTestDoor(t)
			fast := countFast(t)
			asked := make(chan struct{})
			gone := make(chan error, 1)
			rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
				io.WriteString(c, row.partial)
				close(asked)
				// Nothing more: wait until the door closes the connection.
				c.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
				_, err := c.Read(make([]byte, 1))
				gone <- err
				return false
			})
			d.setConsole("raw", rc.Addr())
			conn := d.Dial()
			if _, err := io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw/poll"))); err != nil {
				t.Fatal(err)
			}
			doortest.WaitFor(t, asked, "the console to be asked")
			if row.partial != "" { // the caller has the head: the door is in the body
				if res, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || res.StatusCode != 200 {
					t.Fatalf("the answer's head: %v, %v", res, err)
				}
			}
			callerLeaves(t, d, conn, gone, fast)
		})
	}
}

// TestConnSlowAnswer_S9: an answer that begins after the fast exchange's grace, a head that
// arrives in pieces across it, and a body that comes slowly after it all reach a caller that
// waits, whole — the grace bounds only the wait before the watch on the caller begins.
func TestConnSlowAnswer_S9(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	// Each answer in two parts, with a pause longer than the grace between them.
	answers := map[string][2]string{
		"/late":     {"", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate"},
		"/pieces":   {"HTTP/1.1 200 OK\r\nContent-", "Length: 6\r\n\r\npieces"},
		"/slowbody": {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nslow", "-body"},
		"/hints": {"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhints"},
	}
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		parts := answers[r.URL.Path]
		io.WriteString(c, parts[0])
		time.Sleep(answerGrace + answerGrace/2)
		io.WriteString(c, parts[1])
		return true
	})
	d.setConsole("raw", rc.Addr())
	conn := d.Dial()
	defer conn.Close()
	br := bufio.NewReader(conn)
	for _, path := range []string{"/late", "/pieces", "/slowbody", "/hints"} {
		if _, err := io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw"+path))); err != nil {
			t.Fatal(err)
		}
		if path == "/hints" {
			if res, _ := readAnswer(t, br, "GET"); res.StatusCode != 103 {
				t.Fatalf("%s: got %d first, want 103", path, res.StatusCode)
			}
		}
		res, body := readAnswer(t, br, "GET")
		if want := path[1:]; res.StatusCode != 200 || strings.ReplaceAll(body, "-", "") != want {
			t.Errorf("%s: got %d %q, want 200 %q", path, res.StatusCode, body, want)
		}
	}
	if n := fast(); n != 4 {
		t.Errorf("the fast loop served %d requests, want 4", n)
	}
	if accepts, got := rc.Accepts(), len(rc.Seen()); accepts != 1 || got != 4 {
		t.Errorf("the console accepted %d connections and read %d requests, want 1 and 4: a slow answer must not cost a retry or its connection", accepts, got)
	}
	wantNoFaultLogged(t, d, "slow answers")
}

// TestConnAnswerHeadOverReadBuffer_S6: a console's answer whose head does not fit the fast
// exchange's 8 KiB buffer (a long Content-Security-Policy, a big cookie) is read by net/http's
// parser instead, and reaches the caller whole — twice in a row on one kept console connection,
// so the first answer's end is where the second is read from.
func TestConnAnswerHeadOverReadBuffer_S6(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	policy := strings.Repeat("p", 20<<10)
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		body := "body of " + r.URL.Path
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Security-Policy: %s\r\nContent-Length: %d\r\n\r\n%s", policy, len(body), body)
		return true
	})
	d.setConsole("raw", rc.Addr())
	conn := d.Dial()
	defer conn.Close()
	for _, path := range []string{"/one", "/two"} {
		r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", "/c/raw"+path), 1))[0]
		if r.Status != 200 || r.Body != "body of "+path || r.Header.Get("Content-Security-Policy") != policy {
			t.Fatalf("GET %s: %d %q, body %q, policy of %d bytes; want 200, the body and the whole policy",
				path, r.Status, r.Reason, r.Body, len(r.Header.Get("Content-Security-Policy")))
		}
	}
	if got := rc.Seen(); len(got) != 2 || doortest.UsedConns(got) != 1 {
		t.Errorf("the console saw %d requests on %d connections, want 2 on 1", len(got), doortest.UsedConns(got))
	}
	if n := fast(); n != 2 {
		t.Errorf("the fast loop served %d requests, want 2", n)
	}
}

// TestConnWorkerServesTheNext: the goroutine that served a connection serves the next one (a
// new connection costs no goroutine and no stack to grow), each connection answered whole and
// on its own; Close ends the workers that wait.
func TestConnWorkerServesTheNext(t *testing.T) {
	d := startTestDoor(t)
	for i := range 4 {
		conn := d.Dial()
		path := fmt.Sprintf("/c/alpha/conn%d", i)
		r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", path, "Connection: close"), 1))[0]
		if r.Status != http.StatusOK || r.Body != "echo /"+path[len("/c/alpha/"):] {
			t.Fatalf("connection %d: got %d %q %q", i, r.Status, r.Reason, r.Body)
		}
		conn.Close()
		// Served and closed: its worker waits for the next connection, and it is the only one.
		waitUntil(t, func() bool { all, waiting := workersOf(d.cs); return all == 1 && waiting == 1 },
			fmt.Sprintf("one worker, waiting, after connection %d", i))
	}
	d.cs.Close()
	waitUntil(t, func() bool { all, _ := workersOf(d.cs); return all == 0 }, "no worker after Close")
}

// TestConnIdleWorkersEnd: a worker that waits for a connection longer than workerIdle ends, and
// the next connection is served by a new one.
func TestConnIdleWorkersEnd(t *testing.T) {
	d := startTestDoor(t)
	d.cs.mu.Lock()
	d.cs.idleFor = time.Millisecond
	d.cs.mu.Unlock()
	for i := range 2 {
		conn := d.Dial()
		r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", "/c/alpha/x", "Connection: close"), 1))[0]
		conn.Close()
		if r.Status != http.StatusOK {
			t.Fatalf("connection %d: got %d %q", i, r.Status, r.Reason)
		}
		waitUntil(t, func() bool { all, _ := workersOf(d.cs); return all == 0 },
			fmt.Sprintf("the worker of connection %d to end", i))
	}
}

// workersOf counts cs's worker goroutines, and those of them waiting for a connection.
func workersOf(cs *ConnServer) (all, waiting int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	me := fmt.Sprintf("fastloop.(*ConnServer).work(%p", cs)
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, me) {
			all++
			if !strings.Contains(g, "fastloop.(*fastConn).serve(") {
				waiting++
			}
		}
	}
	return all, waiting
}

// waitUntil polls cond until it holds, failing the test after doortest.WaitLimit.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(doortest.WaitLimit); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// TestConnPrejudgedVerdictTakenOnce_S3: the verdict the fast loop hands to net/http with a
// connection is applied to that request only. A redirect (308, the connection kept) followed on
// the same connection by the same request line carrying an assertion header: the second is
// judged afresh, 400 assertion-sent, not given the first one's redirect.
func TestConnPrejudgedVerdictTakenOnce_S3(t *testing.T) {
	d := startTestDoor(t)
	before := d.Alpha.Count()
	rs := d.RawMany(doortest.ServeReq("GET", "/c/alpha")+doortest.ServeReq("GET", "/c/alpha", "X-Phase-Console-Fleet: x"), 2)
	if rs[0].Status != http.StatusPermanentRedirect {
		t.Errorf("first: %d %q, want 308", rs[0].Status, rs[0].Reason)
	}
	if rs[1].Status != http.StatusBadRequest || rs[1].Reason != "assertion-sent" {
		t.Errorf("second, same request line with an assertion header: %d %q, want 400 assertion-sent",
			rs[1].Status, rs[1].Reason)
	}
	if n := d.Alpha.Count(); n != before {
		t.Errorf("the console saw %d requests, want none", n-before)
	}
}

// stallConn is a console connection whose goroutine is held up (descheduled, throttled, the
// machine suspended) for longer than answerGrace right after the exchange set its grace
// deadline, the first stalls times only: before it has looked at the socket or written anything.
type stallConn struct {
	*net.TCPConn
	stalls *atomic.Int32
}

func (c stallConn) SetReadDeadline(t time.Time) error {
	err := c.TCPConn.SetReadDeadline(t)
	if d := time.Until(t); !t.IsZero() && d > 0 && d <= answerGrace && c.stalls.Add(-1) >= 0 {
		time.Sleep(d + 20*time.Millisecond)
	}
	return err
}

// downRecorder is a DownMarker that records the consoles it is told are down.
type downRecorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *downRecorder) MarkDown(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
}

func (r *downRecorder) marked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// TestConnGraceSpentBeforeSendNotConsoleDown_S8: when the fast exchange's 100 ms grace runs out
// before it has looked at the console's connection (its goroutine held up between setting the
// deadline and rc.Read, which checks the deadline before it calls send), nothing has been sent:
// that is no failed exchange. The grace is armed again and the request goes out and is answered;
// the console, which never failed, is not answered for as 502 console-down nor shown down. (On a
// kept connection the one retry of a GET on a fresh connection would hide a single stall, so
// this is the first exchange, on a connection dialled for it; a second stall in a row is a
// pause of over 100 ms at that very point again, and is armed again too.)
func TestConnGraceSpentBeforeSendNotConsoleDown_S8(t *testing.T) {
	for _, stalls := range []int32{1, 2} {
		t.Run(fmt.Sprintf("%d stalls", stalls), func(t *testing.T) {
			var left atomic.Int32
			down := &downRecorder{}
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				var dl net.Dialer
				c, err := dl.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return stallConn{c.(*net.TCPConn), &left}, nil
			}
			d := startTestDoor(t, func(door *proxy.Door) { door.Hop = proxy.NewHop(door.Log, down, dial) })
			fast := countFast(t)
			before := d.Alpha.Count()
			left.Store(stalls)
			r := d.Raw(doortest.ServeReq("GET", "/c/alpha/x"))
			if n := fast(); n != 1 {
				t.Fatalf("the fast loop served %d requests, want 1", n)
			}
			if r.Status != http.StatusOK || r.Body != "echo /x" {
				t.Errorf("got %d %q %q; want 200 \"echo /x\" (nothing had been sent)", r.Status, r.Reason, r.Body)
			}
			if n := d.Alpha.Count(); n != before+1 {
				t.Errorf("the console saw %d requests, want 1", n-before)
			}
			if ids := down.marked(); len(ids) != 0 {
				t.Errorf("console(s) %q marked down; the console never failed", ids)
			}
			if left.Load() > 0 {
				t.Errorf("%d stall(s) left: the exchange did not arm its grace as often as it meant to", left.Load())
			}
		})
	}
}

// wantPanicLogged wants exactly one warning since logsBefore that reports a panic in serving a
// connection, with why and its stack (SPEC S9: logged at warning level or above, never hidden).
func wantPanicLogged(t *testing.T, d *testDoor, why string) {
	t.Helper()
	var got []map[string]any
	for _, l := range d.Logs.Events("fleet.http-error") {
		if e, _ := l["error"].(string); strings.Contains(e, "panic serving") {
			got = append(got, l)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d log lines of a panic, want 1; the log:\n%s", len(got), d.Logs.String())
	}
	e, _ := got[0]["error"].(string)
	if got[0]["level"] != "WARN" || !strings.Contains(e, why) || !strings.Contains(e, "goroutine ") ||
		!strings.Contains(e, "fastloop.(*fastConn).serve(") {
		t.Errorf("the panic's log line: %v; want a warning with %q and the stack", got[0], why)
	}
}

// TestConnPanicRecovered_S9: a panic while the fast loop serves a connection (here in Prepare,
// before the Door judges) does not take the supervisor down, as net/http's server recovers one in
// a handler: it is logged at warning level with its stack, that connection is closed with
// nothing written to it (an earlier request on it answered first), and the worker goes on to
// serve the next connection.
func TestConnPanicRecovered_S9(t *testing.T) {
	d := startTestDoor(t)
	d.cs.mu.Lock()
	d.cs.Prepare = func(r *http.Request) {
		if r.URL.Path == "/c/alpha/panic" {
			panic("Prepare panics on purpose")
		}
	}
	d.cs.mu.Unlock()
	fast := countFast(t)
	before := d.Alpha.Count()

	conn := d.Dial()
	defer conn.Close()
	br := bufio.NewReader(conn)
	io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/before")+doortest.ServeReq("GET", "/c/alpha/panic")))
	if res, body := readAnswer(t, br, "GET"); res.StatusCode != http.StatusOK || body != "echo /before" {
		t.Errorf("the request before the panic: %d %q, want 200", res.StatusCode, body)
	}
	doortest.WantClosed(t, conn, br, "the connection whose serving panicked")
	wantPanicLogged(t, d, "Prepare panics on purpose")
	if paths := pathsOf(d.Alpha.Since(before)); !slices.Equal(paths, []string{"/before"}) {
		t.Errorf("the console saw %q, want /before only", paths)
	}
	// The worker that recovered waits for the next connection, and serves it.
	waitUntil(t, func() bool { all, waiting := workersOf(d.cs); return all == 1 && waiting == 1 },
		"the worker to wait for the next connection")
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha/after"))
	if r.Status != http.StatusOK || r.Body != "echo /after" {
		t.Errorf("the next connection: %d %q %q, want 200", r.Status, r.Reason, r.Body)
	}
	if n := fast(); n != 2 {
		t.Errorf("the fast loop served %d requests, want 2 (before and after)", n)
	}
	if all, _ := workersOf(d.cs); all != 1 {
		t.Errorf("%d workers, want the one that recovered", all)
	}
}

// panicConn is a console connection whose Write panics, the first panics times, and which counts
// its Closes.
type panicConn struct {
	*net.TCPConn
	panics, closes *atomic.Int32
}

func (c panicConn) Write(p []byte) (int, error) {
	if c.panics.Add(-1) >= 0 {
		panic("the console connection's Write panics on purpose")
	}
	return c.TCPConn.Write(p)
}

func (c panicConn) Close() error {
	c.closes.Add(1)
	return c.TCPConn.Close()
}

// TestConnPanicInExchange_S9: a panic in the middle of a fast exchange, with a console
// connection in hand, closes that console connection too: it is never put back in the pool (the
// next exchange dials a new one), and the console is not shown down. The panic is logged with
// its stack, the caller's connection closed, and the next connection served.
func TestConnPanicInExchange_S9(t *testing.T) {
	var panics, closes, dials atomic.Int32
	down := &downRecorder{}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var dl net.Dialer
		c, err := dl.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		dials.Add(1)
		return panicConn{c.(*net.TCPConn), &panics, &closes}, nil
	}
	d := startTestDoor(t, func(door *proxy.Door) { door.Hop = proxy.NewHop(door.Log, down, dial) })
	fast := countFast(t)

	if r := d.Raw(doortest.ServeReq("GET", "/c/alpha/one")); r.Status != http.StatusOK { // a kept console connection
		t.Fatalf("first: %d %q", r.Status, r.Reason)
	}
	panics.Store(1)
	conn := d.Dial()
	defer conn.Close()
	io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/panic")))
	doortest.WantClosed(t, conn, nil, "the connection whose exchange panicked")
	wantPanicLogged(t, d, "Write panics on purpose")
	if n := closes.Load(); n != 1 {
		t.Errorf("%d console connections closed, want the one the exchange held", n)
	}
	if r := d.Raw(doortest.ServeReq("GET", "/c/alpha/after")); r.Status != http.StatusOK || r.Body != "echo /after" {
		t.Errorf("after the panic: %d %q %q, want 200", r.Status, r.Reason, r.Body)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d console connections dialled, want 2 (the one closed is not kept)", n)
	}
	if n := fast(); n != 3 {
		t.Errorf("the fast loop served %d requests, want 3", n)
	}
	if ids := down.marked(); len(ids) != 0 {
		t.Errorf("console(s) %q marked down; the console never failed", ids)
	}
}
