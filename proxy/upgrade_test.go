package proxy

import (
	"io"
	"net"
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
	go t.pipe(console, caller)
	go t.pipe(caller, console)
	return true
}
