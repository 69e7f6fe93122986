package proxy

// The door harness: a Door (the judgement every door shares) served by NewServer on a real
// 127.0.0.1 listener, with a stand-in for a door's own rules (Host admission, caller
// verification), echo consoles that record what reached them, and raw requests written as bytes
// over net.Dial. The rules of the hop (S3, S4, S6, S7, S9, S12) are proven here once for both
// doors; each door's own rules (S5, S10; R5–R9) are proven in its package.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/testlog"
)

const (
	tsName  = "sup.tail1234.ts.net"
	aliceIP = "100.101.102.103"
	alice   = "alice@example.com"
)

// seen is one request as a console received it.
type seen = echoconsole.Request

// echoConsole records every request that reaches it (internal/echoconsole): /sse streams three
// events, a WebSocket upgrade echoes lines, anything else answers "echo <path>".
type echoConsole struct{ *echoconsole.Console }

func newEchoConsole(t testing.TB, opts ...echoconsole.Option) *echoConsole {
	return &echoConsole{echoconsole.New(t, opts...)}
}

func (e *echoConsole) addr() string       { return e.Addr() }
func (e *echoConsole) count() int         { return e.Count() }
func (e *echoConsole) last() (seen, bool) { return e.Last() }

// standIn is a door's own rules, as the harness plays them: Host is admitted when it is
// tsName or a loopback name (else 421 host); every caller is alice at aliceIP, unless refuse is
// set. It counts what it was asked, so that a test can show that a request was refused before.
type standIn struct {
	asked   atomic.Int64 // VerifyCaller calls
	refuse  atomic.Pointer[Refusal]
	tokErr  atomic.Bool
	token   string
	mu      sync.Mutex
	console map[string]string
	down    []string
}

func (s *standIn) AdmitHost(r *http.Request) *Refusal {
	h := r.Host
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	if h == tsName || h == "localhost" || h == "127.0.0.1" {
		return nil
	}
	return Refuse(http.StatusMisdirectedRequest, "host", "not this door's name")
}

func (s *standIn) VerifyCaller(r *http.Request, consoleID string) (Caller, *Refusal) {
	s.asked.Add(1)
	if ref := s.refuse.Load(); ref != nil {
		return Caller{}, ref
	}
	return Caller{Login: alice, IP: netip.MustParseAddr(aliceIP)}, nil
}

func (s *standIn) Lookup(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.console[id]
	return a, ok
}

func (s *standIn) Current() (string, error) {
	if s.tokErr.Load() {
		return "", errors.New("token file unusable")
	}
	return s.token, nil
}

func (s *standIn) MarkDown(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = append(s.down, id)
}

// testDoor is a running Door with its stand-in and one console, alpha.
type testDoor struct {
	t     testing.TB
	door  *Door
	own   *standIn
	addr  string // 127.0.0.1:port
	alpha *echoConsole
	logs  *testlog.Buffer
	token string

	// Set by rawMany: how many fleet.rejected lines there were before the last exchange, and
	// how many requests it held.
	rejectedBefore, lastExchange int
}

// startTestDoor serves a Door on 127.0.0.1. setup, if any, changes the Door before it serves.
func startTestDoor(t testing.TB, setup ...func(*Door)) *testDoor {
	t.Helper()
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	own := &standIn{token: "fleet-token-for-tests-0123456789abcdef", console: map[string]string{}}
	d := &testDoor{t: t, own: own, logs: logs, token: own.token}
	d.door = &Door{
		Hop:       NewHop(log, own, nil),
		Log:       log,
		Host:      own,
		Callers:   own,
		Consoles:  own,
		Token:     own,
		FromServe: true,
	}
	for _, f := range setup {
		f(d.door)
	}
	d.addr = d.serve(t, NewServer(d.door, log))
	d.alpha = d.addConsole("alpha")
	return d
}

// ServeDoorConns serves the connections of ln for a test door whose net/http server is srv, as
// the loopback door serves its own, and returns what closes them all. It is set by
// loopback_door_test.go to the loopback door's connection loop (package proxy/fastloop: the fast
// loop, then srv), which this package must not import, so that every rule here is proven on the
// loop too; nil (a test binary without that file) serves with srv alone.
var ServeDoorConns func(d *Door, srv *http.Server, ln net.Listener) (closeAll func())

// serve serves srv on a new 127.0.0.1 listener until the test ends (ServeDoorConns).
func (d *testDoor) serve(t testing.TB, srv *http.Server) string {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ServeDoorConns == nil {
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	} else {
		t.Cleanup(ServeDoorConns(d.door, srv, ln))
	}
	return ln.Addr().String()
}

// addConsole starts an echo console and registers it as id.
func (d *testDoor) addConsole(id string) *echoConsole {
	e := newEchoConsole(d.t)
	d.setConsole(id, e.addr())
	return e
}

func (d *testDoor) setConsole(id, addr string) {
	d.own.mu.Lock()
	defer d.own.mu.Unlock()
	d.own.console[id] = addr
}

// response is one parsed answer to a raw request.
type response struct {
	status int
	reason string // X-Fleet-Reason
	header http.Header
	body   string
}

// raw writes req (line ends may be written as \n) to a new connection and reads one response.
func (d *testDoor) raw(req string) response {
	d.t.Helper()
	return d.rawMany(req, 1)[0]
}

// rawMany writes req (possibly several pipelined requests) and reads n responses.
func (d *testDoor) rawMany(req string, n int) []response {
	d.t.Helper()
	d.rejectedBefore, d.lastExchange = len(d.logs.Events(EventRejected)), n
	conn := d.dial()
	defer conn.Close()
	return toResponses(rawhttp.Exchange(d.t, conn, req, n))
}

// rawAs writes req from another goroutine (the door may answer and close before all of it is
// written) and reads one response.
func (d *testDoor) rawAs(req string) response {
	d.t.Helper()
	d.rejectedBefore, d.lastExchange = len(d.logs.Events(EventRejected)), 1
	conn := d.dial()
	defer conn.Close()
	go io.WriteString(conn, crlf(req))
	method, _ := requestLine(req)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		d.t.Fatalf("reading the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return response{status: resp.StatusCode, reason: resp.Header.Get("X-Fleet-Reason"), header: resp.Header, body: string(body)}
}

// open writes req on a new connection and reads the response head (as the answer to req's
// method). The connection stays open (for an upgrade or a stream); the caller closes it.
func (d *testDoor) open(req string) (net.Conn, *bufio.Reader, *http.Response) {
	d.t.Helper()
	d.rejectedBefore, d.lastExchange = len(d.logs.Events(EventRejected)), 1
	conn := d.dial()
	if _, err := io.WriteString(conn, crlf(req)); err != nil {
		d.t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	method, _ := requestLine(req)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		conn.Close()
		d.t.Fatalf("reading the response: %v", err)
	}
	return conn, br, resp
}

// dial opens a connection to the door with a deadline that only guards against a hang.
func (d *testDoor) dial() net.Conn {
	d.t.Helper()
	conn, err := net.Dial("tcp", d.addr)
	if err != nil {
		d.t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(waitLimit))
	return conn
}

// waitLimit bounds every wait of these tests: a guard against a hang, never an assertion.
const waitLimit = 10 * time.Second

// waitFor waits for ch, at most waitLimit.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// serveReq is a request as Tailscale Serve sends it for alice, with extra header lines.
func serveReq(method, path string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Host: %s\nX-Forwarded-Proto: https\nTailscale-User-Login: %s\n",
		method, path, tsName, aliceIP, tsName, alice)
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

// wantRefused checks a refusal: status, reason, one fleet.rejected log line with that reason, and
// that the console saw nothing new.
func (d *testDoor) wantRefused(t *testing.T, r response, before int, status int, reason string) {
	t.Helper()
	if r.status != status || r.reason != reason {
		t.Errorf("got %d %q, want %d %q (body %q)", r.status, r.reason, status, reason, r.body)
	}
	if n := d.alpha.count(); n != before {
		t.Errorf("the console saw %d new request(s); a refused request must never be forwarded", n-before)
	}
	if d.lastExchange == 1 { // S11: exactly one log line for this refusal, with its reason
		lines := d.logs.Events(EventRejected)[d.rejectedBefore:]
		if len(lines) != 1 || lines[0]["reason"] != reason {
			t.Errorf("want one fleet.rejected line with reason %q, got %v", reason, lines)
		}
	}
}

// wantRejected sends req and checks the refusal (wantRefused: status, reason, console saw
// nothing) and its log line (S11): the reason, the method, the path without its query, the peer.
func (d *testDoor) wantRejected(t *testing.T, req string, status int, reason string) response {
	t.Helper()
	before := d.alpha.count()
	r := d.rawAs(req)
	d.wantRefused(t, r, before, status, reason)
	d.wantRejectedLine(t, d.rejectedBefore, req, reason)
	return r
}

// wantRejectedLine checks that exactly one fleet.rejected line was written since logsBefore, and
// that it describes req.
func (d *testDoor) wantRejectedLine(t *testing.T, logsBefore int, req, reason string) {
	t.Helper()
	lines := d.logs.Events(EventRejected)[logsBefore:]
	if len(lines) != 1 {
		t.Errorf("%d fleet.rejected lines for one refusal, want 1", len(lines))
		return
	}
	l := lines[0]
	method, target := requestLine(req)
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

// wantForwarded checks that the request reached alpha as login with path, and returns what it saw.
func (d *testDoor) wantForwarded(t *testing.T, r response, before int, login, path string) seen {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("got %d %q (%q), want 200", r.status, r.reason, r.body)
	}
	if n := d.alpha.count(); n != before+1 {
		t.Fatalf("the console saw %d new requests, want 1", n-before)
	}
	s, _ := d.alpha.last()
	if got := s.Header.Values(contract.HeaderFleetLogin); len(got) != 1 || got[0] != login {
		t.Errorf("console saw login %q, want %q", got, login)
	}
	if got := s.Header.Values(contract.HeaderFleet); len(got) != 1 || got[0] != d.token {
		t.Errorf("console saw %d fleet token header(s), or not the token", len(got))
	}
	if s.Path != path {
		t.Errorf("console saw path %q, want %q", s.Path, path)
	}
	if s.Host != d.alpha.addr() {
		t.Errorf("console saw Host %q, want its own address %q", s.Host, d.alpha.addr())
	}
	return s
}

// The raw-request helpers every door's tests share (internal/rawhttp).
var (
	crlf         = rawhttp.CRLF
	requestLine  = rawhttp.RequestLine
	foldForTest  = rawhttp.Fold
	hasFolded    = rawhttp.HasFolded
	foldedValues = rawhttp.FoldedValues
)

// toResponses is what rawhttp read, in this harness's shape.
func toResponses(rs []rawhttp.Response) []response {
	out := make([]response, len(rs))
	for i, r := range rs {
		out[i] = response{status: r.Status, reason: r.Reason, header: r.Header, body: r.Body}
	}
	return out
}
