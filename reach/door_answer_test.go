package reach

// The door's own answers bounded in time (S9, R6): one its caller does not take is given up
// after AnswerTimeout; a body the door reads, and a request it forwards, are not cut by it. The
// door's tests set a short answerTimeout: what is tested is that an answer is given up, or not,
// never how soon; every wait is bounded by doortest.WaitLimit, a guard against a hang.

import (
	"bufio"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/phase-console/fleet/internal/doortest"
)

// TestUntakenHTTP2AnswersGivenUp_S9_R6: a stranger on the LAN — no code, no cookie — opens one
// HTTP/2 connection whose SETTINGS_INITIAL_WINDOW_SIZE is 0 and asks for as many pages as the
// door lets it have streams at once. The door answers each itself (303 to /pair, with a body),
// and none of those answers can ever be sent: the client never opens its window. Each handler's
// goroutine then waited in net/http's HTTP/2 writer for as long as the client kept the
// connection up — about 16 KiB a stream, 250 streams (4 MiB) a connection, past ReadHeaderTimeout
// and IdleTimeout, since HTTP/2's idle timer does not run while streams are open — so a few
// hundred connections grew the process that serves both doors by gigabytes (S9: slow requests
// are bounded; R6: memory stays bounded under a flood). Now each stream is reset once its answer
// has waited AnswerTimeout, and its goroutine goes; the door offers HTTP2MaxStreams streams.
func TestUntakenHTTP2AnswersGivenUp_S9_R6(t *testing.T) {
	if got := (&Door{}).answerTimeout(); got != AnswerTimeout {
		t.Fatalf("the door's answer timeout is %v, want AnswerTimeout (%v)", got, AnswerTimeout)
	}
	d := startTestDoor(t, func(c *Config) { c.answerTimeout = 250 * time.Millisecond })
	runtime.GC()
	before := runtime.NumGoroutine()
	c := d.dialH2(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool { return len(c.settings) > 0 }) {
		t.Fatal("no SETTINGS from the door")
	}
	c.mu.Lock()
	streams, ok := c.settings[http2.SettingMaxConcurrentStreams]
	c.mu.Unlock()
	if !ok || streams != HTTP2MaxStreams {
		t.Errorf("the door offers %d streams at once (sent: %v), want HTTP2MaxStreams (%d)", streams, ok, HTTP2MaxStreams)
	}

	const n = HTTP2MaxStreams
	for i := range uint32(n) {
		c.get(2*i+1, "/c/alpha/x")
	}
	if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool {
		if c.ended != nil {
			return true
		}
		for _, s := range c.streams {
			if s.done == "" {
				return false
			}
		}
		return true
	}) {
		c.mu.Lock()
		open := 0
		for _, s := range c.streams {
			if s.done == "" {
				open++
			}
		}
		c.mu.Unlock()
		t.Fatalf("%d of the stranger's %d streams are still held open by the door (%d goroutines, %d before): "+
			"an answer the client will not take is never given up", open, n, runtime.NumGoroutine(), before)
	}
	c.mu.Lock()
	answered := 0
	for id, s := range c.streams {
		if s.status != 0 {
			answered++
			if s.status != http.StatusSeeOther {
				t.Errorf("stream %d: %d %q, want the stranger's 303 to /pair", id, s.status, s.reason)
			}
		}
		if s.done == "end" {
			t.Errorf("stream %d ended with its answer, which a window of 0 cannot let out", id)
		}
	}
	ended := c.ended
	c.mu.Unlock()
	if answered == 0 && ended == nil {
		t.Error("no stream was answered: the door gave up answers it had not begun")
	}

	// The handlers' goroutines are gone (the connection's own remain: it is still open).
	for limit := time.Now().Add(doortest.WaitLimit); runtime.NumGoroutine() > before+20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("%d goroutines after the streams were reset, %d before the connection", runtime.NumGoroutine(), before)
		}
	}
}

// TestSlowPairingFormNotCutByAnswerDeadline_S9: the one body the door reads itself, the pairing
// form, is never cut for being slow while it keeps moving (S9): the answer's deadline waits while
// the form is read, and counts from its last byte. A pairing form that takes several times
// AnswerTimeout to arrive is answered, over HTTP/1.1 and over HTTP/2; over HTTP/2, to a client
// that takes no answer, the answer is still given up after the form is in.
func TestSlowPairingFormNotCutByAnswerDeadline_S9(t *testing.T) {
	const timeout = 300 * time.Millisecond
	pieces := []string{"code=BCDF", "-GHJK&password=", "correct-horse"}
	form := strings.Join(pieces, "")
	d := startTestDoor(t, func(c *Config) {
		c.answerTimeout = timeout
		c.Pairing = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "the form was cut: "+err.Error(), http.StatusBadRequest)
				return
			}
			io.WriteString(w, "form: "+string(b))
		})
	})
	head := "Content-Type: application/x-www-form-urlencoded"

	t.Run("HTTP/1.1", func(t *testing.T) {
		conn := d.dial("")
		defer conn.Close()
		io.WriteString(conn, d.req("POST", "/pair", head, "Content-Length: "+strconv.Itoa(len(form))))
		for i, p := range pieces {
			if i > 0 {
				time.Sleep(2 * timeout)
			}
			io.WriteString(conn, p)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST"})
		if err != nil {
			t.Fatalf("no answer to a form that kept moving: %v", err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(body) != "form: "+form {
			t.Errorf("%d %q, want 200 with the whole form", res.StatusCode, body)
		}
	})

	t.Run("HTTP/2", func(t *testing.T) {
		c := d.dialH2(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.open(1, "POST", "/pair", false, head)
		for i, p := range pieces {
			if i > 0 {
				time.Sleep(2 * timeout)
			}
			c.data(1, p, i == len(pieces)-1)
		}
		if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool { return c.streams[1].done != "" || c.ended != nil }) {
			t.Fatal("the answer to the form, which the client does not take, was never given up")
		}
		status, reason, _, done := c.stream(1)
		if status != http.StatusOK {
			t.Errorf("%d %q (%s), want 200: the form was cut while it kept moving", status, reason, done)
		}
		if !strings.HasPrefix(done, "rst") {
			t.Errorf("the stream ended %q, want reset: its answer cannot be sent", done)
		}
	})
}

// TestPairingWorkNotChargedToCaller_S9: the door's own work on a pairing form (scrypt, a wait
// for a turn at its gate) is not the caller's delay: an answer that takes several times
// AnswerTimeout to compute is delivered whole, over HTTP/1.1 and over HTTP/2; and over HTTP/2,
// to a client that takes no answer, that answer is still given up once it is written.
func TestPairingWorkNotChargedToCaller_S9(t *testing.T) {
	const timeout = 200 * time.Millisecond
	form := "code=BCDF-GHJK&password=correct-horse"
	d := startTestDoor(t, func(c *Config) {
		c.answerTimeout = timeout
		c.Pairing = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "the form was cut: "+err.Error(), http.StatusBadRequest)
				return
			}
			if r.Method == http.MethodPost {
				time.Sleep(4 * timeout) // the door's work: longer than the caller's deadline
			}
			io.WriteString(w, "form: "+string(b))
		})
	})
	head := "Content-Type: application/x-www-form-urlencoded"

	t.Run("HTTP/1.1", func(t *testing.T) {
		conn := d.dial("")
		defer conn.Close()
		io.WriteString(conn, d.req("POST", "/pair", head, "Content-Length: "+strconv.Itoa(len(form)))+form)
		res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST"})
		if err != nil {
			t.Fatalf("no answer to a form the door was slow to judge: %v", err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || string(body) != "form: "+form {
			t.Errorf("%d %q (%v), want 200 with the whole form", res.StatusCode, body, err)
		}
	})

	t.Run("HTTP/2", func(t *testing.T) {
		c := d.dialH2(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.open(1, "POST", "/pair", false, head)
		c.data(1, form, true)
		if !c.wait(time.Now().Add(doortest.WaitLimit), func() bool { return c.streams[1].done != "" || c.ended != nil }) {
			t.Fatal("the answer, which the client does not take, was never given up")
		}
		status, reason, _, done := c.stream(1)
		if status != http.StatusOK {
			t.Errorf("%d %q (%s), want 200: the door's own work was charged to the caller", status, reason, done)
		}
		if !strings.HasPrefix(done, "rst") {
			t.Errorf("the stream ended %q, want reset: its answer cannot be sent", done)
		}
	})
}

// TestForwardedStreamHasNoAnswerDeadline_S9: a paired device's request for a console is the
// console's to answer, for as long as it lasts (S9: server-sent events flushed as they come): the
// deadline of the door's own answers is lifted from it, and one set for an earlier answer on the
// same HTTP/1.1 connection does not carry over to it.
func TestForwardedStreamHasNoAnswerDeadline_S9(t *testing.T) {
	const timeout = 100 * time.Millisecond
	d := startTestDoor(t, func(c *Config) { c.answerTimeout = timeout })
	_, cookie := d.pair("phone")
	conn := d.dial("")
	defer conn.Close()
	br := bufio.NewReader(conn)
	io.WriteString(conn, d.req("GET", "/c/alpha/x")) // without the cookie: the door's own 303
	res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Close {
		t.Fatalf("%d, closes: %v; want 303 on a kept connection", res.StatusCode, res.Close)
	}
	time.Sleep(3 * timeout)

	io.WriteString(conn, d.req("GET", "/c/alpha/sse", cookie))
	res, err = http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	body := bufio.NewReader(res.Body) // not closed: it would read to the end; conn.Close ends it
	if line, err := body.ReadString('\n'); res.StatusCode != http.StatusOK || err != nil || line != "data: hello\n" {
		t.Fatalf("the device's event stream: %d %q %v", res.StatusCode, line, err)
	}
	time.Sleep(3 * timeout)
	d.Alpha.Tick()
	if line, err := skipBlank(body); err != nil || line != "data: tick\n" {
		t.Errorf("the event stream after the door's answer timeout: %q %v, want a tick", line, err)
	}
}

// TestIdleConnectionKeepsNoAnswerDeadline_S9: once the door's answer is out, its HTTP/1.1
// connection waits for the next request with no write deadline left of it (net/http's server
// clears it after each answer; the door relies on that), so net/http's own answers to that
// request, written before any handler runs, still get out: headers over 64 KiB are 431 (S9),
// whenever they come within the connection's idle timeout.
func TestIdleConnectionKeepsNoAnswerDeadline_S9(t *testing.T) {
	const timeout = 100 * time.Millisecond
	d := startTestDoor(t, func(c *Config) { c.answerTimeout = timeout })
	conn := d.dial("")
	defer conn.Close()
	br := bufio.NewReader(conn)
	io.WriteString(conn, d.req("GET", "/c/alpha/x"))
	res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	time.Sleep(3 * timeout)

	go io.WriteString(conn, d.req("GET", "/c/alpha/x", "X-Big: "+strings.Repeat("a", 72<<10)))
	res, err = http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("no answer to headers over 64 KiB on a kept connection: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("%d, want 431", res.StatusCode)
	}
}
