package reach

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestClosedDoorStopsListening_O3_R1: a door that is shut (the profile moved it or turned it off)
// stops its socket listening even while another descriptor of it is held — the copy a process
// keeps to hand the door on — so its old address refuses connections instead of queueing them.
func TestClosedDoorStopsListening_O3_R1(t *testing.T) {
	var kept *os.File
	d := startTestDoor(t, func(c *Config) {
		c.Listen = func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err == nil {
				kept, err = ln.(*net.TCPListener).File() // another descriptor of the socket
			}
			return ln, err
		}
	})
	defer kept.Close()
	addr := d.door.Addr().String()
	d.door.Shut()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("the closed door's address %s still accepts connections", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial: %v, want connection refused", err)
	}
}
