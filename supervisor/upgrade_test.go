package supervisor

// The hop's own WebSocket path (proxy/upgrade.go), byte by byte: what rides in the same packet as
// a handshake, what a console answers instead of 101, and how live upgraded connections end.

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// rawConsole is a console the test drives by hand: each upgrade request that reaches it is handed
// to the test, which answers it byte by byte. Connections without a request (the registry's
// probes) are closed.
type rawConsole struct {
	ln    net.Listener
	conns chan *consoleSide
}

// consoleSide is one connection as the console has it, its request head read.
type consoleSide struct {
	net.Conn
	req *http.Request
	br  *bufio.Reader // holds whatever came after the head
}

func newRawConsole(t testing.TB) *rawConsole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &rawConsole{ln: ln, conns: make(chan *consoleSide, 16)}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					conn.Close()
					return
				}
				c.conns <- &consoleSide{Conn: conn, req: req, br: br}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

func (c *rawConsole) addr() string { return c.ln.Addr().String() }

// next is the next request that reached the console.
func (c *rawConsole) next(t testing.TB) *consoleSide {
	t.Helper()
	select {
	case s := <-c.conns:
		t.Cleanup(func() { s.Close() })
		return s
	case <-time.After(doortest.WaitLimit):
		t.Fatal("gave up waiting for a request at the console")
		return nil
	}
}

// switching is a console's 101 to wsReq's handshake, its Sec-WebSocket-Accept proving the switch.
var switching = rawhttp.SwitchingHead(strings.TrimPrefix(wsKey, "Sec-WebSocket-Key: "))

// wsReq is a WebSocket handshake as Serve passes it on for alice.
func wsReq(path string, extra ...string) string {
	return rawhttp.CRLF(doortest.ServeReq("GET", path, append([]string{"Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", wsKey}, extra...)...))
}

func (d *door) addRawConsole(t testing.TB, id string) *rawConsole {
	t.Helper()
	c := newRawConsole(t)
	if _, err := d.srv.registry.Put(Console{ID: id, Addr: c.addr()}); err != nil {
		t.Fatal(err)
	}
	return c
}

// readN reads exactly n bytes from r, or fails the test.
func readN(t *testing.T, r io.Reader, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read %q, then %v", b, err)
	}
	return string(b)
}

// wantEnd waits for r to end (EOF or reset; a timeout fails the test).
func wantEnd(t *testing.T, r io.Reader, who string) {
	t.Helper()
	b, err := io.ReadAll(r)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: the connection is still open (read %q)", who, b)
	}
}

// upgradeThrough opens a WebSocket through the door to console c and returns the caller's end
// (after the 101) and the console's.
func upgradeThrough(t *testing.T, d *door, c *rawConsole, path string) (net.Conn, *bufio.Reader, *consoleSide) {
	t.Helper()
	conn := d.Dial()
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, wsReq(path))
	side := c.next(t)
	io.WriteString(side, switching)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return conn, br, side
}

// TestUpgradeBytesInTheHandshakePacket_S9: bytes that arrive together with a handshake are not
// lost: the caller's first frames, written in the same packet as its request, reach the console;
// the console's first frames, written with its 101, reach the caller.
func TestUpgradeBytesInTheHandshakePacket_S9(t *testing.T) {
	d := startDoor(t)
	c := d.addRawConsole(t, "raw")

	conn := d.Dial()
	defer conn.Close()
	if _, err := io.WriteString(conn, wsReq("/c/raw/ws")+"caller-first"); err != nil {
		t.Fatal(err)
	}
	side := c.next(t)
	if got := side.req.Header.Get("X-Phase-Console-Fleet-Login"); got != doortest.Alice || side.req.URL.Path != "/ws" {
		t.Fatalf("console saw %q as %q", side.req.URL.Path, got)
	}
	if _, err := io.WriteString(side, switching+"console-first"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	if got := readN(t, br, len("console-first")); got != "console-first" {
		t.Errorf("caller read %q after the 101", got)
	}
	if got := readN(t, side.br, len("caller-first")); got != "caller-first" {
		t.Errorf("console read %q after the request", got)
	}
	// And the tunnel carries more both ways after that.
	io.WriteString(conn, "ping")
	if got := readN(t, side.br, 4); got != "ping" {
		t.Errorf("console read %q", got)
	}
	io.WriteString(side, "pong")
	if got := readN(t, br, 4); got != "pong" {
		t.Errorf("caller read %q", got)
	}
}

// TestUpgradeHalfClose_S9: the end of one direction is passed on and the other keeps working, as
// ReverseProxy did; the tunnel closes when both have ended.
func TestUpgradeHalfClose_S9(t *testing.T) {
	d := startDoor(t)
	c := d.addRawConsole(t, "raw")
	conn, br, side := upgradeThrough(t, d, c, "/c/raw/ws")
	io.WriteString(conn, "last words")
	conn.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(side.br); string(got) != "last words" || err != nil {
		t.Fatalf("console read %q, %v; want the words, then the end", got, err)
	}
	io.WriteString(side, "reply")
	side.Conn.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(br); string(got) != "reply" || err != nil {
		t.Fatalf("caller read %q, %v; want the reply, then the end", got, err)
	}
}

// TestUpgradeDeclined_S9: a console that answers an upgrade with anything but 101 has its answer
// passed on as an ordinary response, and the caller's connection stays an HTTP connection.
func TestUpgradeDeclined_S9(t *testing.T) {
	d := startDoor(t)
	c := d.addRawConsole(t, "raw")
	conn := d.Dial()
	defer conn.Close()
	io.WriteString(conn, wsReq("/c/raw/ws"))
	side := c.next(t)
	io.WriteString(side, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-Console: said-no\r\n\r\nnope!")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || string(body) != "nope!" || resp.Header.Get("X-Console") != "said-no" {
		t.Fatalf("got %d %q %v, want the console's 403", resp.StatusCode, body, resp.Header)
	}
	// The same connection carries the next request, to another console.
	before := d.Alpha.Count()
	io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/next")))
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || d.Alpha.Count() != before+1 {
		t.Fatalf("next request: %d, console saw %d", resp.StatusCode, d.Alpha.Count()-before)
	}
}

// TestUpgradeWrongSwitch_S9: a 101 to another protocol than the one asked for is not passed on
// (ReverseProxy's check): 502, and the console's connection is closed.
func TestUpgradeWrongSwitch_S9(t *testing.T) {
	d := startDoor(t)
	c := d.addRawConsole(t, "raw")
	for _, answer := range []string{
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
	} {
		conn := d.Dial()
		defer conn.Close()
		io.WriteString(conn, wsReq("/c/raw/ws"))
		side := c.next(t)
		io.WriteString(side, answer)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("answer %q: got %d, want 502", answer, resp.StatusCode)
		}
		wantEnd(t, side, "console")
	}
}

// TestUpgradeRefusals_S9: h2c is still refused before anything is dialled, and a WebSocket
// handshake with a body is refused (a body would ride into the tunnel): 400 bad-upgrade.
func TestUpgradeRefusals_S9(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name string
		req  string
	}{
		{"S9 h2c", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")},
		{"S9 websocket with a body", doortest.ServeReq("GET", "/c/alpha/ws", "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", wsKey, "Content-Length: 5") + "hello"},
		{"S9 websocket with a chunked body", doortest.ServeReq("POST", "/c/alpha/ws", "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", wsKey, "Transfer-Encoding: chunked") + "5\nhello\n0\n\n"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, http.StatusBadRequest, "bad-upgrade")
		})
	}
}

// TestCloseEndsUpgraded: http.Server.Close leaves hijacked connections open; the door's Close
// ends its live WebSockets, both ends, and the hop's CloseUpgraded ends those of one console only.
func TestCloseEndsUpgraded(t *testing.T) {
	d := startDoor(t)
	a := d.addRawConsole(t, "a")
	b := d.addRawConsole(t, "b")
	connA, brA, sideA := upgradeThrough(t, d, a, "/c/a/ws")
	connB, brB, sideB := upgradeThrough(t, d, b, "/c/b/ws")

	t.Run("one console's", func(t *testing.T) {
		n := d.srv.hop.CloseUpgraded(func(consoleID, login string) bool { return consoleID == "a" })
		if n != 1 {
			t.Fatalf("closed %d, want 1", n)
		}
		wantEnd(t, brA, "caller of a")
		wantEnd(t, sideA.br, "console a")
		io.WriteString(connB, "still")
		if got := readN(t, sideB.br, 5); got != "still" {
			t.Fatalf("console b read %q", got)
		}
		_ = connA
	})
	t.Run("every one, on Close", func(t *testing.T) {
		if err := d.srv.Close(); err != nil {
			t.Fatal(err)
		}
		wantEnd(t, brB, "caller of b")
		wantEnd(t, sideB.br, "console b")
	})
}

// pattern is n bytes that are not all alike, different for each seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i/251) ^ seed
	}
	return b
}

// bulkBothWays sends 4 MiB each way at once through a tunnel and checks every byte arrived, in
// order.
func bulkBothWays(t *testing.T, caller io.ReadWriter, callerR io.Reader, console io.ReadWriter, consoleR io.Reader) {
	t.Helper()
	const n = 4 << 20
	up, down := pattern(n, 1), pattern(n, 2)
	errs := make(chan error, 2)
	go func() { _, err := caller.Write(up); errs <- err }()
	go func() { _, err := console.Write(down); errs <- err }()
	gotUp, gotDown := make([]byte, n), make([]byte, n)
	read := make(chan error, 2)
	go func() { _, err := io.ReadFull(consoleR, gotUp); read <- err }()
	go func() { _, err := io.ReadFull(callerR, gotDown); read <- err }()
	for i := 0; i < 4; i++ {
		var err error
		select {
		case err = <-errs:
		case err = <-read:
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
		t.Fatal("the bytes that arrived are not the bytes sent")
	}
}

// TestUpgradeCarriesBulk_S9: a busy WebSocket moves every byte, in order, both ways at once.
func TestUpgradeCarriesBulk_S9(t *testing.T) {
	d := startDoor(t)
	c := d.addRawConsole(t, "raw")
	conn, br, side := upgradeThrough(t, d, c, "/c/raw/ws")
	bulkBothWays(t, conn, br, side, side.br)
}

// TestUpgradeThroughUnixDoor_S9: on the unix-socket door (the caller's end is a unix socket) a
// WebSocket is asserted and carries bytes both ways too.
func TestUpgradeThroughUnixDoor_S9(t *testing.T) {
	d := uxStart(t, os.Getuid())
	c := newRawConsole(t)
	if _, err := d.srv.registry.Put(Console{ID: "raw", Addr: c.addr()}); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	io.WriteString(conn, rawhttp.CRLF("GET /c/raw/ws HTTP/1.1\nHost: localhost\nX-Forwarded-Host: "+uxSupName+
		"\nX-Forwarded-For: "+uxUserIP+"\nX-Forwarded-Proto: https\nTailscale-User-Login: "+uxUserLogin+
		"\nConnection: Upgrade\nUpgrade: websocket\nSec-WebSocket-Version: 13\n"+wsKey+"\n\n"))
	side := c.next(t)
	if got := side.req.Header.Get("X-Phase-Console-Fleet-Login"); got != uxUserLogin {
		t.Fatalf("console saw login %q", got)
	}
	io.WriteString(side, switching)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	bulkBothWays(t, conn, br, side, side.br)
}
