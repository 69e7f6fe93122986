package reach

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/rawhttp"
)

// TestHandedListener_O3_R6c: the door serves on a socket given by Config.Listen (one handed over
// by the process that served the door before) with its connection bounds in front of TLS, as on
// one it opened itself; Socket returns that socket, to hand on.
func TestHandedListener_O3_R6c(t *testing.T) {
	var handed net.Listener
	d := startTestDoor(t, func(c *Config) {
		c.Listen = func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			handed = ln
			return ln, err
		}
	})
	if d.door.Socket() != handed || handed == nil {
		t.Fatalf("Socket() = %v, want the handed listener %v", d.door.Socket(), handed)
	}
	if _, ok := d.door.ln.(*boundedListener); !ok {
		t.Fatalf("the door serves on %T, not its connection bounds (R6c)", d.door.ln)
	}
	c := d.dial("") // a TLS handshake through the handed socket
	c.Close()
}

// TestHandedListenerRefused_R2: a socket given for the profile's address that listens elsewhere
// is closed and the door does not open (R2: exactly the profile's address).
func TestHandedListenerRefused_R2(t *testing.T) {
	h := startTestDoor(t) // a door and its config to borrow
	cfg := h.door.cfg
	cfg.Profile.Listen = rawhttp.FreeLoopbackAddr(t)
	var wrong net.Listener
	cfg.Listen = func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		wrong = ln
		return ln, err
	}
	d, err := Open(context.Background(), cfg)
	if err == nil {
		d.Close()
		t.Fatal("the door opened on a socket for another address")
	}
	if !strings.Contains(err.Error(), "R2") {
		t.Errorf("the refusal does not name R2: %v", err)
	}
	if _, aerr := wrong.Accept(); aerr == nil {
		t.Error("the wrong socket was left open")
	}
}
