package proxy

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/otheruser"
)

// TestDefaultDialerRefusesOtherUser_S6: a Hop made without a dialer (the test door's) checks the
// owner of a console's socket before it sends a byte: a console port held by a process of another
// user (a dead console's port taken over) is 502 console-other-user and gets nothing — not the
// fleet token, not the login — and the console is not marked down.
func TestDefaultDialerRefusesOtherUser_S6(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the squatter as another user")
	}
	d := startTestDoor(t)
	h := otheruser.Start(t, "^TestDoorHelperProcess$", "FLEET_PROXY_HELPER", "squat", nil)
	port := strings.TrimSpace(strings.TrimPrefix(h.Expect(t, "PORT "), "PORT "))
	d.setConsole("squat", "127.0.0.1:"+port)
	d.WantRejected(t, doortest.ServeReq("GET", "/c/squat/"), http.StatusBadGateway, "console-other-user")
	d.own.mu.Lock()
	defer d.own.mu.Unlock()
	if len(d.own.down) != 0 {
		t.Errorf("marked down: %q", d.own.down)
	}
}

// TestDoorHelperProcess is the other-uid process of the tests above; otherwise it does nothing.
//
//	squat: listen on 127.0.0.1:0, print "PORT <port>", then hold every connection, reading
//	       nothing, until killed.
func TestDoorHelperProcess(t *testing.T) {
	if os.Getenv("FLEET_PROXY_HELPER") != "squat" {
		return
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(0)
		}
		squatted = append(squatted, c)
	}
}

// squatted keeps the squatter's accepted connections reachable: a collected net.Conn is closed.
var squatted []net.Conn
