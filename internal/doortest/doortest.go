// Package doortest is, for tests only, the client side of a fleet door under test: requests
// written as raw bytes the way Tailscale Serve sends them, sent over net.Dial to the door's real
// listener, and the checks every door's tests make of what came back — the answer, the one
// fleet.rejected log line (SPEC S11), and what the echo console behind the door saw. It also holds
// what the doors' tests stand up around a door: a console scripted on the bare connection
// (RawConsole) and tailscaled's LocalAPI, faked over a unix socket (FakeTailscaled).
//
// It states no rule: the rows every door must judge alike are internal/doorrules's, and what is a
// door's own is proven in that door's package. Product code never imports it.
package doortest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/accesslog"
	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/testlog"
)

// The tailnet the tests play: this machine's Serve name and address, and the callers the fake
// tailscaled knows (FakeTailscaled).
const (
	TSName   = "sup.tail1234.ts.net"
	SelfIP   = "100.101.102.1"
	AliceIP  = "100.101.102.103"
	Alice    = "alice@example.com"
	BobIP    = "fd7a:115c:a1e0::b0b"
	Bob      = "bob@example.com"
	TaggedIP = "100.101.102.104"
	JurgenIP = "100.101.102.105"
	Jurgen   = "jürgen@example.com"
)

// EventRejected is the event name of a refusal's log line (SPEC S11), as the tests read it.
const EventRejected = "fleet.rejected"

// WaitLimit bounds every wait of the doors' tests: a guard against a hang, never an assertion.
const WaitLimit = 10 * time.Second

// WaitFor waits for ch, at most WaitLimit.
func WaitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(WaitLimit):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// ServeReq is a request head as Tailscale Serve sends it for Alice to TSName, with extra header
// lines (line ends written as "\n").
func ServeReq(method, path string, extra ...string) string {
	return ServeReqHost(method, path, TSName, extra...)
}

// ServeReqHost is ServeReq with another Host (Serve keeps the Host that the caller used).
func ServeReqHost(method, path, host string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Host: %s\nX-Forwarded-Proto: https\nTailscale-User-Login: %s\n",
		method, path, host, AliceIP, host, Alice)
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

// A Response is one answer as read off the wire.
type Response = rawhttp.Response

// Dial opens a connection to addr whose reads and writes are bounded by WaitLimit.
func Dial(t testing.TB, network, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(WaitLimit))
	return conn
}

// A Client sends raw requests to one door and checks what the door answered, what it logged and
// what its console saw. Its exchanges fail T (the test that started the door); they may run at
// once, but WantRefused and WantRejected check the last one's log lines.
type Client struct {
	T     testing.TB
	Addr  string               // the door's listener, 127.0.0.1:port
	Logs  *testlog.Buffer      // the door's slog JSON log
	Alpha *echoconsole.Console // the door's console "alpha"
	Token string               // the fleet token the door asserts on every hop

	// DialConn, if not nil, opens a connection to the door (a TLS door's own); else Dial opens
	// a TCP connection to Addr.
	DialConn func() net.Conn
	// AsIs has RawAs, ExchangeOn and Open write requests byte for byte; else their "\n" line
	// ends are written as CRLF, as Raw and RawMany always write them.
	AsIs bool

	mu             sync.Mutex // exchanges may run at once; the marks are the last one's
	rejectedBefore int        // fleet.rejected lines before the last exchange
	lastExchange   int        // how many requests the last exchange held
}

// Dial opens a connection to the door (DialConn), bounded by WaitLimit.
func (c *Client) Dial() net.Conn {
	c.T.Helper()
	if c.DialConn != nil {
		return c.DialConn()
	}
	return Dial(c.T, "tcp", c.Addr)
}

// wire is req as the Client writes it (AsIs).
func (c *Client) wire(req string) string {
	if c.AsIs {
		return req
	}
	return rawhttp.CRLF(req)
}

// Exchanging notes that an exchange of n requests begins: WantRefused checks the fleet.rejected
// lines written from now on. Raw, RawMany, RawAs, Open and ExchangeOn call it.
func (c *Client) Exchanging(n int) {
	before := len(c.Logs.Events(EventRejected))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rejectedBefore, c.lastExchange = before, n
}

// RejectedBefore is how many fleet.rejected lines there were before the last exchange.
func (c *Client) RejectedBefore() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rejectedBefore
}

// marks is what Exchanging noted last.
func (c *Client) marks() (rejectedBefore, lastExchange int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rejectedBefore, c.lastExchange
}

// Raw writes req (line ends may be written as "\n") on a new connection and reads one response.
func (c *Client) Raw(req string) Response {
	c.T.Helper()
	return c.RawMany(req, 1)[0]
}

// RawMany writes req (possibly several pipelined requests) on a new connection and reads n
// responses.
func (c *Client) RawMany(req string, n int) []Response {
	c.T.Helper()
	c.Exchanging(n)
	conn := c.Dial()
	defer conn.Close()
	return rawhttp.Exchange(c.T, conn, c.wire(req), n)
}

// RawUpTo writes req (line ends as CRLF) on a new connection whose deadline is wait from now and
// reads up to n responses. It stops at the first error — the door closed the connection, or
// nothing more came within wait — and returns what it read with that error.
func (c *Client) RawUpTo(req string, n int, wait time.Duration) ([]Response, error) {
	c.T.Helper()
	c.Exchanging(n)
	conn := c.Dial()
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	return rawhttp.ExchangeUpTo(conn, req, n)
}

// RawAs writes req on a new connection and reads one response as the answer to req's method (a
// HEAD answer has no body).
func (c *Client) RawAs(req string) Response {
	c.T.Helper()
	return c.ExchangeOn(c.Dial(), req)
}

// ExchangeOn writes req on conn from another goroutine — the door may answer
// and close before all of it is written — reads one response as the answer to req's method, and
// closes conn.
func (c *Client) ExchangeOn(conn net.Conn, req string) Response {
	c.T.Helper()
	defer conn.Close()
	c.Exchanging(1)
	go io.WriteString(conn, c.wire(req))
	method, _ := rawhttp.RequestLine(req)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		c.T.Fatalf("reading the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return Response{Status: resp.StatusCode, Reason: resp.Header.Get("X-Fleet-Reason"), Header: resp.Header, Body: string(body)}
}

// Open writes req on a new connection and reads the response head (as the answer to req's
// method). The connection stays open (for an upgrade or a stream); the caller closes it.
func (c *Client) Open(req string) (net.Conn, *bufio.Reader, *http.Response) {
	c.T.Helper()
	c.Exchanging(1)
	conn := c.Dial()
	if _, err := io.WriteString(conn, c.wire(req)); err != nil {
		conn.Close()
		c.T.Fatal(err)
	}
	br := bufio.NewReader(conn)
	method, _ := rawhttp.RequestLine(req)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		conn.Close()
		c.T.Fatalf("reading the response: %v", err)
	}
	return conn, br, resp
}

// WantRefused checks a refusal: its status and reason, that the console saw nothing new since it
// had seen before requests, and — when the last exchange held one request — one fleet.rejected
// line with that reason (S11).
func (c *Client) WantRefused(t *testing.T, r Response, before int, status int, reason string) {
	t.Helper()
	if r.Status != status || r.Reason != reason {
		t.Errorf("got %d %q, want %d %q (body %q)", r.Status, r.Reason, status, reason, r.Body)
	}
	if n := c.Alpha.Count(); n != before {
		t.Errorf("the console saw %d new request(s); a refused request must never be forwarded", n-before)
	}
	if rejectedBefore, n := c.marks(); n == 1 {
		lines := c.Logs.Events(EventRejected)[rejectedBefore:]
		if len(lines) != 1 || lines[0]["reason"] != reason {
			t.Errorf("want one fleet.rejected line with reason %q, got %v", reason, lines)
		}
	}
}

// WantRejected sends req (RawAs) and checks the refusal (WantRefused) and its log line
// (WantRejectedLine).
func (c *Client) WantRejected(t *testing.T, req string, status int, reason string) Response {
	t.Helper()
	before := c.Alpha.Count()
	r := c.RawAs(req)
	c.WantRefused(t, r, before, status, reason)
	c.WantRejectedLine(t, c.RejectedBefore(), req, reason)
	return r
}

// WantRejectedLine checks that exactly one fleet.rejected line was written since logsBefore, and
// that it describes req (S11): the reason, the method, the path without its query, and a loopback
// peer (the test's own address).
func (c *Client) WantRejectedLine(t *testing.T, logsBefore int, req, reason string) {
	t.Helper()
	lines := c.Logs.Events(EventRejected)[logsBefore:]
	if len(lines) != 1 {
		t.Errorf("%d fleet.rejected lines for one refusal, want 1", len(lines))
		return
	}
	l := lines[0]
	method, target := rawhttp.RequestLine(req)
	path, _, _ := strings.Cut(target, "?")
	path = strings.ToValidUTF8(path, "\uFFFD") // as the JSON log writes it
	if l["reason"] != reason || l["method"] != method || l["path"] != path {
		t.Errorf("log line reason=%v method=%v path=%v, want %s %s %s", l["reason"], l["method"], l["path"], reason, method, path)
	}
	peer, _ := l["peer"].(string)
	if ap, err := netip.ParseAddrPort(peer); err != nil || !ap.Addr().IsLoopback() {
		t.Errorf("log line peer %q, want this test's loopback address", peer)
	}
}

// WantForwarded checks that r is a 200 and that its request reached the console once since it had
// seen before requests: at path, as login, with the fleet token once, and with the console's own
// address as Host. It returns what the console saw.
func (c *Client) WantForwarded(t *testing.T, r Response, before int, login, path string) echoconsole.Request {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("got %d %q (%q), want 200", r.Status, r.Reason, r.Body)
	}
	if n := c.Alpha.Count(); n != before+1 {
		t.Fatalf("the console saw %d new requests, want 1", n-before)
	}
	s, _ := c.Alpha.Last()
	if got := s.Header.Values(contract.HeaderFleetLogin); len(got) != 1 || got[0] != login {
		t.Errorf("console saw login %q, want %q", got, login)
	}
	if got := s.Header.Values(contract.HeaderFleet); len(got) != 1 || got[0] != c.Token {
		t.Errorf("console saw %d fleet token header(s), or not the token", len(got))
	}
	if s.Path != path {
		t.Errorf("console saw path %q, want %q", s.Path, path)
	}
	if s.Host != c.Alpha.Addr() {
		t.Errorf("console saw Host %q, want its own address %q", s.Host, c.Alpha.Addr())
	}
	return s
}

// ServeRules is a door behind Tailscale Serve as internal/doorrules's Door needs it: requests as
// Serve sends them for Alice (ServeReq), sent with RawAs, and what console alpha received.
type ServeRules struct{ *Client }

// Request is ServeReq.
func (r ServeRules) Request(method, target string, extra ...string) string {
	return ServeReq(method, target, extra...)
}

// Send writes raw on a new connection and returns the answer's status and reason.
func (r ServeRules) Send(t *testing.T, raw string) (int, string) {
	resp := r.RawAs(raw)
	return resp.Status, resp.Reason
}

// Received is what console alpha received (echoconsole.Console.Received).
func (r ServeRules) Received() (int, string, http.Header) { return r.Alpha.Received() }

// AccessLog returns the lines of the access log at path (SPEC G3) once it holds at least n,
// waiting at most WaitLimit: a door records an answer just after the caller has it, and the log's
// writer writes it a moment later. A line that does not parse fails the test.
func AccessLog(t testing.TB, path string, n int) []audit.Line {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		var lines []audit.Line
		for _, s := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if s == "" {
				continue
			}
			l, _, err := audit.ParseLine([]byte(s))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			lines = append(lines, l)
		}
		if len(lines) >= n || time.Now().After(deadline) {
			if len(lines) < n {
				t.Fatalf("%s holds %d line(s), want %d: %q", path, len(lines), n, b)
			}
			return lines
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// PrivateAccessLog opens an access log in a fresh 0700 folder of tb's own, closed when tb ends,
// and fails tb if it dropped a line: the writer as `fleet serve` runs it, for a benchmark's "on".
func PrivateAccessLog(tb testing.TB) *accesslog.Log {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "fleet")
	if err := os.Mkdir(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	log, err := accesslog.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		log.Close()
		if n := log.Dropped(); n != 0 {
			tb.Errorf("%d access-log lines dropped", n)
		}
	})
	return log
}
