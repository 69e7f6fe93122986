package supervisor

// More of the test harness (see harness_test.go): requests with any Host, local API requests,
// a refusal check that also reads the fleet.rejected log line (S11), connections kept open for
// upgrades and streams, and a console that holds its answers until the test lets them go, so that
// "it streams" is proven by order of events, never by timing.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// waitLimit bounds every wait in these tests; nothing is asserted about how long anything takes.
const waitLimit = 10 * time.Second

// serveReqHost is serveReq with another Host (Serve keeps the Host that the caller used).
func serveReqHost(method, path, host string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Host: %s\nX-Forwarded-Proto: https\nTailscale-User-Login: %s\n",
		method, path, host, aliceIP, host, alice)
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

// localReq is a request as a process on this machine sends it: Host is the door's own address,
// no Serve headers. body, when not empty, is sent with its Content-Length.
func (d *door) localReq(method, path, body string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\n", method, path, d.addr)
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\nContent-Length: %d\n", len(body))
	}
	b.WriteString("\n")
	// crlf (in raw) must not touch the body: JSON bodies here hold no newline.
	return b.String() + body
}

// bearer is the Authorization line with the real fleet token.
func (d *door) bearer() string { return "Authorization: Bearer " + d.token }

// addConsole starts another echo console and registers it as id.
func (d *door) addConsole(t *testing.T, id string) *echoConsole {
	t.Helper()
	e := newEchoConsole(t)
	if _, err := d.srv.registry.Put(Console{ID: id, Addr: e.addr(), Name: id}); err != nil {
		t.Fatal(err)
	}
	return e
}

// wantRejected sends req and checks the refusal (wantRefused: status, reason, console saw nothing)
// and its log line (S11): exactly one new fleet.rejected line, with the reason, the method, the
// path without its query, and the peer.
func (d *door) wantRejected(t *testing.T, req string, status int, reason string) response {
	t.Helper()
	before, logsBefore := d.alpha.count(), len(d.logs.Events("fleet.rejected"))
	r := d.rawAs(req)
	d.wantRefused(t, r, before, status, reason)
	d.wantRejectedLine(t, logsBefore, req, reason)
	return r
}

// wantRejectedLine checks that exactly one fleet.rejected line was written since logsBefore, and
// that it describes req.
func (d *door) wantRejectedLine(t *testing.T, logsBefore int, req, reason string) {
	t.Helper()
	lines := d.logs.Events("fleet.rejected")[logsBefore:]
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

// rawAs is raw, but reads the response as the answer to req's method (a HEAD answer has no body).
func (d *door) rawAs(req string) response {
	d.t.Helper()
	conn, _, resp := d.open(req)
	defer conn.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return response{status: resp.StatusCode, reason: resp.Header.Get("X-Fleet-Reason"), header: resp.Header, body: string(body)}
}

// open writes req on a new connection and reads the response head. The connection stays open
// (for an upgrade or a stream); the caller closes it. Every read and write is bounded by waitLimit.
func (d *door) open(req string) (net.Conn, *bufio.Reader, *http.Response) {
	d.t.Helper()
	d.rejectedBefore, d.lastExchange = len(d.logs.Events("fleet.rejected")), 1
	conn, err := net.Dial("tcp", d.addr)
	if err != nil {
		d.t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(conn, crlf(req)); err != nil {
		conn.Close()
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

// dial opens a connection to the door whose reads and writes are bounded by waitLimit.
func (d *door) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(waitLimit))
	return conn
}

// waitFor waits for ch, at most waitLimit.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// wsKey is a WebSocket handshake's key line.
const wsKey = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
