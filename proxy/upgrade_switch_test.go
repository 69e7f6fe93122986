package proxy

// A caller's bytes must never reach a console, on fleet's connection, as a request without
// fleet's assertion (S9): what the hop does with a console's switch.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// A console whose WebSocket route answers "101 Switching Protocols" without switching (a Go
// handler that calls WriteHeader(101) and returns, as net/http's server allows, and then goes
// on reading HTTP on the connection): fleet takes the 101 as a switch and splices the caller's
// bytes onto its console connection, where the console reads them as requests of their own,
// with no assertion — LOCAL, the machine's owner. A real WebSocket server always proves the
// switch with Sec-WebSocket-Accept (RFC 6455 §4.2.2), which a client MUST check (§4.1); fleet,
// the client on this hop, does not.
func TestUpgradeSwitchWithoutAcceptNeverTunnelled_S9(t *testing.T) {
	d := startTestDoor(t)
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		if r.URL.Path == "/ws" {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			return true // and goes on reading HTTP: it never switched
		}
		io.WriteString(c, doortest.AnswerOK)
		return true
	})
	d.setConsole("raw", rc.Addr())
	conn := d.Dial()
	defer conn.Close()
	io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw/ws", "Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")))
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusBadGateway {
		t.Errorf("a 101 without Sec-WebSocket-Accept: %d, want 502", res.StatusCode)
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The caller now writes plain HTTP into what fleet believes is a WebSocket.
		io.WriteString(conn, "POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		b, _ := io.ReadAll(br)
		t.Logf("the caller read through the tunnel: %q", b)
	}
	for _, s := range rc.Seen() {
		if s.Header.Get(contract.HeaderFleet) != d.Token {
			t.Errorf("the console read %s %s without fleet's assertion, on fleet's connection", s.Method, s.Path)
		}
	}
}

// A head over the console writer's 4 KiB goes out in part before the look at a kept connection
// (roundTrip's MSG_PEEK): the console has closed it, or wrote stray bytes on it. The part sent
// must never become a request the console reads (the assertion lines come last, so a head cut
// short is one without them), and the request goes whole on a new connection.
func TestConnLongHeadOnStaleKeptConnection_S6(t *testing.T) {
	d := startTestDoor(t)
	rc := doortest.NewRawConsole(t, func(_ int, c net.Conn, r *http.Request) bool {
		io.WriteString(c, doortest.AnswerOK)
		if r.URL.Path == "/first" {
			time.Sleep(30 * time.Millisecond)                                 // after fleet has read the answer and kept the connection
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") // stray
		}
		return true
	})
	d.setConsole("raw", rc.Addr())
	if r := d.Raw(doortest.ServeReq("GET", "/c/raw/first")); r.Status != 200 {
		t.Fatalf("first: %d %q", r.Status, r.Reason)
	}
	time.Sleep(100 * time.Millisecond) // the stray bytes are in fleet's socket
	long := "X-Pad: " + strings.Repeat("a", 6000)
	if r := d.Raw(doortest.ServeReq("GET", "/c/raw/second", long)); r.Status != 200 || r.Body != "ok" {
		t.Errorf("second: %d %q %q", r.Status, r.Reason, r.Body)
	}
	for _, s := range rc.Seen() {
		if s.Header.Get(contract.HeaderFleet) != d.Token {
			t.Errorf("the console read %s %s without fleet's assertion", s.Method, s.Path)
		}
	}
	if n := len(rc.Seen()); n != 2 || doortest.UsedConns(rc.Seen()) != 2 {
		t.Errorf("the console read %d requests on %d connections, want 2 on 2", n, doortest.UsedConns(rc.Seen()))
	}
}

// TestUpgradeHandshakeWithoutKeyRefused_S9: a WebSocket handshake is forwarded only with one
// Sec-WebSocket-Key of 16 bytes and Sec-WebSocket-Version 13 (RFC 6455 §4.1), so that the
// console's 101 can be checked against the key; anything else is 400 bad-upgrade and reaches no
// console.
func TestUpgradeHandshakeWithoutKeyRefused_S9(t *testing.T) {
	d := startTestDoor(t)
	up := []string{"Connection: Upgrade", "Upgrade: websocket"}
	for _, row := range []struct {
		name  string
		extra []string
	}{
		{"S9 no key", []string{"Sec-WebSocket-Version: 13"}},
		{"S9 no version", []string{"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="}},
		{"S9 version 8", []string{"Sec-WebSocket-Version: 8", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="}},
		{"S9 key of 15 bytes", []string{"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ"}},
		{"S9 key not base64", []string{"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: not base64 at all!!"}},
		{"S9 two keys", []string{"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="}},
	} {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, doortest.ServeReq("GET", "/c/alpha/ws", append(append([]string{}, up...), row.extra...)...), http.StatusBadRequest, "bad-upgrade")
		})
	}
}
