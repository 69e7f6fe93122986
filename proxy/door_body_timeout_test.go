package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// fakeClock is the hop's clock in these tests: its timers fire only when the test moves it on,
// so "60 s of silence" takes no time and a slow body is slow by the clock, not by sleeping.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Duration
	timers []*fakeTimer
	armed  chan struct{} // a timer was armed (buffered 1, never blocks)
}

type fakeTimer struct {
	c      *fakeClock
	at     time.Duration
	f      func()
	active bool
}

func newFakeClock() *fakeClock { return &fakeClock{armed: make(chan struct{}, 1)} }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{c: c, f: f}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	was := t.active
	t.at, t.active = t.c.now+d, true
	t.c.mu.Unlock()
	select {
	case t.c.armed <- struct{}{}:
	default:
	}
	return was
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

// advance moves the clock on by d and fires (each in its own goroutine, as time.AfterFunc does)
// every armed timer that is due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now += d
	var due []func()
	for _, t := range c.timers {
		if t.active && t.at <= c.now {
			t.active = false
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// waitArmed waits until some timer is armed (a Read of the body is waiting for the caller).
func (c *fakeClock) waitArmed(t *testing.T) {
	t.Helper()
	deadline := time.After(doortest.WaitLimit)
	for {
		c.mu.Lock()
		for _, tm := range c.timers {
			if tm.active {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-c.armed:
		case <-deadline:
			t.Fatal("gave up waiting for the hop to wait for the body")
		}
	}
}

// trickleConsole reads request bodies one byte at a time and reports each byte, then what the
// whole body was and the error that ended it (nil when it ended well).
type trickleConsole struct {
	ln   net.Listener
	got  chan byte
	done chan trickleEnd
}

type trickleEnd struct {
	body string
	err  error
}

func newTrickleConsole(t *testing.T) *trickleConsole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &trickleConsole{ln: ln, got: make(chan byte, 64), done: make(chan trickleEnd, 4)}
	srv := &http.Server{Handler: http.HandlerFunc(c.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return c
}

func (c *trickleConsole) serve(w http.ResponseWriter, r *http.Request) {
	var body []byte
	var b [1]byte
	var err error
	for {
		var n int
		n, err = r.Body.Read(b[:])
		if n == 1 {
			body = append(body, b[0])
			c.got <- b[0]
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	c.done <- trickleEnd{string(body), err}
	if err == nil {
		io.WriteString(w, "got "+string(body))
	}
}

func (c *trickleConsole) wantByte(t *testing.T, want byte) {
	t.Helper()
	select {
	case b := <-c.got:
		if b != want {
			t.Fatalf("console read %q, want %q", b, want)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatalf("gave up waiting for the console to read %q", want)
	}
}

func (c *trickleConsole) end(t *testing.T) trickleEnd {
	t.Helper()
	select {
	case e := <-c.done:
		return e
	case <-time.After(doortest.WaitLimit):
		t.Fatal("gave up waiting for the console's request to end")
	}
	return trickleEnd{}
}

func withClock(c *fakeClock) func(*Door) {
	return func(d *Door) { d.Hop.AfterFunc = c.AfterFunc }
}

// TestStalledBodyCut_S9: a request body that sends nothing for 60 s (by the hop's clock) is cut
// off: 408 body-timeout, one fleet.rejected line, the console's request aborted (its body read
// fails), and the caller's connection closed.
func TestStalledBodyCut_S9(t *testing.T) {
	clk := newFakeClock()
	d := startTestDoor(t, withClock(clk))
	slow := newTrickleConsole(t)
	d.setConsole("slow", slow.ln.Addr().String())
	for _, row := range []struct {
		name  string
		head  string
		first string
	}{
		{"S9 chunked body stalls after one byte", doortest.ServeReq("POST", "/c/slow/upload", "Transfer-Encoding: chunked"), "1\r\na\r\n"},
		{"S9 Content-Length body stalls after one byte", doortest.ServeReq("POST", "/c/slow/upload", "Content-Length: 10"), "a"},
	} {
		t.Run(row.name, func(t *testing.T) {
			logsBefore := len(d.Logs.Events("fleet.rejected"))
			conn := d.Dial()
			defer conn.Close()
			if _, err := io.WriteString(conn, rawhttp.CRLF(row.head)+row.first); err != nil {
				t.Fatal(err)
			}
			if row.first == "a" {
				// With a Content-Length, the Transport buffers the first byte: the console
				// sees the request's head only. Wait for the hop to wait for more.
				clk.waitArmed(t)
			} else {
				slow.wantByte(t, 'a')
				clk.waitArmed(t)
			}
			clk.advance(BodyIdleTimeout)

			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("X-Fleet-Reason") != "body-timeout" {
				t.Errorf("got %d %q, want 408 body-timeout", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("the connection stayed open after the cut (read: %v)", err)
			}
			if e := slow.end(t); e.err == nil {
				t.Errorf("the console's request ended well with body %q; it must be aborted", e.body)
			}
			d.WantRejectedLine(t, logsBefore, row.head, "body-timeout")
			if n := len(d.Logs.Events("fleet.console-down")); n != 0 {
				t.Errorf("a caller's stalled body marked the console down (%d lines)", n)
			}
		})
	}
}

// TestSlowBodyNotCut_S9: a body that keeps moving is never cut, however long it takes in all:
// five bytes, 50 s apart by the hop's clock (250 s in all), reach the console whole.
func TestSlowBodyNotCut_S9(t *testing.T) {
	clk := newFakeClock()
	d := startTestDoor(t, withClock(clk))
	slow := newTrickleConsole(t)
	d.setConsole("slow", slow.ln.Addr().String())
	conn := d.Dial()
	defer conn.Close()
	if _, err := io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("POST", "/c/slow/upload", "Transfer-Encoding: chunked"))); err != nil {
		t.Fatal(err)
	}
	const body = "hello"
	for i := 0; i < len(body); i++ {
		if _, err := io.WriteString(conn, "1\r\n"+body[i:i+1]+"\r\n"); err != nil {
			t.Fatal(err)
		}
		slow.wantByte(t, body[i])
		clk.advance(BodyIdleTimeout * 5 / 6)
	}
	if _, err := io.WriteString(conn, "0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(got) != "got "+body {
		t.Errorf("got %d %q %q, want 200 %q", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), got, "got "+body)
	}
	if e := slow.end(t); e.err != nil || e.body != body {
		t.Errorf("console got %q, %v; want %q whole", e.body, e.err, body)
	}
}

// earlyConsole is an honest net/http console whose handler answers 404 without reading the
// request body, as any router does for a path it does not serve, and closes its connection (as
// net/http itself does when 256 KiB or more are left unread); it reports each answer.
func earlyConsole(t *testing.T) (addr string, answered <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		http.NotFound(w, r)
		ch <- struct{}{}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), ch
}

// TestBodyLeftByConsoleNeverReadWithoutDeadline_S9: a console answers at once without reading
// the body (a 404 of any Go console); the caller has sent some of it, sends a few bytes more,
// then nothing. The hop's Transport stops forwarding the body at its next write; nothing that
// reads it afterwards may do so without a deadline (S9: a body that sends nothing for the idle
// timeout is cut off). Left to itself, net/http's server reads the rest — up to 256 KiB as the
// answer's head is written (it cannot tell the hop's idleBody from a body the handler left), and
// again when it closes the body — with no deadline and no idle timer: the caller would hold a
// goroutine, its connection and the console's answer for ever. So the console's answer goes out
// at once with "Connection: close" and the connection closes after it. Here the
// idle timeout is 300 ms; 4 s of silence later the caller must have been answered and closed.
func TestBodyLeftByConsoleNeverReadWithoutDeadline_S9(t *testing.T) {
	const idle = 300 * time.Millisecond
	d := startTestDoor(t, func(door *Door) { door.Hop.BodyIdleTimeout = idle })
	addr, answered := earlyConsole(t)
	d.setConsole("early", addr)
	for _, row := range []struct{ name, framing, first, more string }{
		// Over 256 KiB left: net/http's discard as the answer's head was written.
		{"S9 Content-Length 1 MiB", "Content-Length: 1048576", strings.Repeat("a", 1000), "b"},
		// Under 256 KiB left: its read when closing the body after the handler.
		{"S9 Content-Length 100 KB", "Content-Length: 100000", strings.Repeat("a", 1000), "b"},
		{"S9 chunked", "Transfer-Encoding: chunked", "3e8\r\n" + strings.Repeat("a", 1000) + "\r\n", "1\r\nb\r\n"},
	} {
		t.Run(row.name, func(t *testing.T) {
			conn := d.Dial()
			defer conn.Close()
			head := doortest.ServeReq("POST", "/c/early/nowhere", "Content-Type: application/octet-stream", row.framing)
			if _, err := io.WriteString(conn, rawhttp.CRLF(head)+row.first); err != nil {
				t.Fatal(err)
			}
			select {
			case <-answered:
			case <-time.After(doortest.WaitLimit):
				t.Fatal("the console never saw the request")
			}
			time.Sleep(200 * time.Millisecond) // the console's answer reaches the hop
			// The body moves on, well within the idle timeout: the first write ends the
			// Transport's forwarding (its write to the closed console connection fails).
			for i := 0; i < 4; i++ {
				if _, err := io.WriteString(conn, row.more); err != nil {
					break // closed already: fine
				}
				time.Sleep(idle / 4)
			}
			// Then the caller goes silent.
			start := time.Now()
			conn.SetReadDeadline(start.Add(4 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				// Answered (the close that follows may reset the connection before the caller
				// reads all of it: what is asserted is that it comes, and closes).
				if resp.StatusCode != http.StatusNotFound || !resp.Close {
					t.Errorf("got %d %q (close: %v), want the console's 404 with Connection: close",
						resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), resp.Close)
				}
				_, err = io.Copy(io.Discard, br)
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after %v of silence (body idle timeout %v) the caller's connection is still open: "+
					"what is left of the body is read with no deadline", time.Since(start).Round(time.Millisecond), idle)
			}
		})
	}
}

// TestBodyReadWholeKeepsConnection_S9: the close above costs only a request whose body the
// console did not take whole. A body the console read to its end (with a length or chunked)
// leaves the caller's connection open for its next request, which is judged and answered on it.
func TestBodyReadWholeKeepsConnection_S9(t *testing.T) {
	d := startTestDoor(t)
	before := d.Alpha.Count()
	first := doortest.ServeReq("POST", "/c/alpha/form", "Content-Length: 5") + "hello"
	second := doortest.ServeReq("POST", "/c/alpha/chunked", "Transfer-Encoding: chunked") + "5\r\nworld\r\n0\r\n\r\n"
	rs := d.RawMany(first+second+doortest.ServeReq("GET", "/c/alpha/last"), 3)
	for i, r := range rs {
		if r.Status != http.StatusOK {
			t.Fatalf("answer %d: %d %q, want 200", i, r.Status, r.Reason)
		}
		if hasToken(r.Header["Connection"], "close") {
			t.Errorf("answer %d says Connection: close: a body read whole must not close the connection", i)
		}
	}
	if got := d.Alpha.Since(before); len(got) != 3 || got[0].Body != "hello" || got[1].Body != "world" {
		t.Errorf("the console saw %d requests (%v), want the three with their bodies whole", len(got), got)
	}
}
