package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestTunnelOverPlainConns: a tunnel between connections that are not bare sockets (copyConn's
// fallback, with a buffer per direction) carries bytes both ways, and CloseUpgraded ends it, both
// ends, by console id; a tunnel on a closed hop is closed at once.
func TestTunnelOverPlainConns(t *testing.T) {
	var h Hop
	caller, callerFar := net.Pipe()
	console, consoleFar := net.Pipe()
	for _, c := range []net.Conn{callerFar, consoleFar} {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		defer c.Close()
	}
	startTunnel(&h, caller, console)

	go io.WriteString(callerFar, "up")
	if got := readExactly(t, consoleFar, 2); got != "up" {
		t.Fatalf("console read %q", got)
	}
	go io.WriteString(consoleFar, "down")
	if got := readExactly(t, callerFar, 4); got != "down" {
		t.Fatalf("caller read %q", got)
	}

	if n := h.CloseUpgraded(func(id, login string) bool { return id == "beta" }); n != 0 {
		t.Fatalf("closed %d of another console", n)
	}
	if n := h.CloseUpgraded(func(id, login string) bool { return id == "alpha" && login == "alice@example.com" }); n != 1 {
		t.Fatalf("closed %d, want 1", n)
	}
	for _, c := range []net.Conn{callerFar, consoleFar} {
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("after CloseUpgraded: read %v, want EOF", err)
		}
	}

	h.Close()
	a, aFar := net.Pipe()
	b, bFar := net.Pipe()
	if startTunnel(&h, a, b) {
		t.Fatal("a tunnel started on a closed hop")
	}
	for _, c := range []net.Conn{aFar, bFar} {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("a tunnel on a closed hop: read %v, want EOF", err)
		}
	}
}

func readExactly(t *testing.T, r io.Reader, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startTunnel starts a tunnel of console "alpha" for alice between caller and console, as
// upgradeTransport does, and reports whether it started.
func startTunnel(h *Hop, caller, console net.Conn) bool {
	t := h.live.add("alpha", "alice@example.com", caller, console)
	if t == nil {
		return false
	}
	go t.pipe(console, caller, nil)
	go t.pipe(caller, console, nil)
	return true
}

// TestHopRefusesOtherUpgrades_S9: the hop itself forwards no upgrade but a bodiless WebSocket one,
// whatever the door checked before: 400 bad-upgrade, and nothing is dialled.
func TestHopRefusesOtherUpgrades_S9(t *testing.T) {
	var dials atomic.Int32
	h := NewHop(slog.New(slog.DiscardHandler), nil, func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return nil, io.ErrUnexpectedEOF
	})
	rows := []struct {
		name    string
		headers [][2]string
		body    bool
	}{
		{"S9 h2c", [][2]string{{"Connection", "Upgrade, HTTP2-Settings"}, {"Upgrade", "h2c"}}, false},
		{"S9 websocket, h2c", [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "websocket, h2c"}}, false},
		{"S9 two Upgrade lines", [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Upgrade", "h2c"}}, false},
		{"S9 websocket with a body", [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "websocket"}}, true},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/c/alpha/ws", nil)
			if row.body {
				r = httptest.NewRequest("POST", "/c/alpha/ws", strings.NewReader("hello"))
			}
			for _, kv := range row.headers {
				r.Header.Add(kv[0], kv[1])
			}
			w := httptest.NewRecorder()
			h.Forward(w, r, &Target{ConsoleID: "alpha", Addr: "127.0.0.1:9", Path: "/ws", Login: "alice@example.com",
				Token: "t", ClientIP: "100.64.0.7", Host: "x", Proto: "https"})
			if w.Code != http.StatusBadRequest || w.Header().Get("X-Fleet-Reason") != "bad-upgrade" {
				t.Errorf("got %d %q, want 400 bad-upgrade", w.Code, w.Header().Get("X-Fleet-Reason"))
			}
		})
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("the hop dialled %d times for upgrades it refuses", n)
	}
}
