package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/peercred"
)

// otherUserHelperEnv tells TestOtherUserHelperProcess what to do when the test binary runs as
// otheruser.UID.
const otherUserHelperEnv = "FLEET_CMD_OTHERUSER_HELPER"

// otherUserHeldConns keeps the helper's accepted connections reachable, and so open: a net.Conn
// that is garbage collected is closed. Only the helper's accept loop touches it.
var otherUserHeldConns []net.Conn

// TestOtherUserHelperProcess is not a test: run as another local user by otheruser.Start with
// $FLEET_CMD_OTHERUSER_HELPER=listen:PORT, it listens on 127.0.0.1:PORT, says "LISTENING" and
// holds the port (accepting and keeping connections) until its stdin closes.
func TestOtherUserHelperProcess(t *testing.T) {
	mode := os.Getenv(otherUserHelperEnv)
	if mode == "" {
		return
	}
	port, ok := strings.CutPrefix(mode, "listen:")
	if !ok {
		fmt.Println("ERR unknown mode", mode)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:"+port)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			otherUserHeldConns = append(otherUserHeldConns, c)
		}
	}()
	fmt.Println("LISTENING")
	bufio.NewReader(os.Stdin).ReadString('\n') // until the test closes stdin
	os.Exit(0)
}

// holdAsOtherUser has another local user (otheruser.UID) listen on addr until the test ends: what
// a squatter does who binds a door's address first. It skips the test when it cannot run a
// process as that user (not root).
func holdAsOtherUser(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	h := otheruser.Start(t, "^TestOtherUserHelperProcess$", otherUserHelperEnv, "listen:"+strconv.Itoa(int(addr.Port())), nil)
	h.Expect(t, "LISTENING")
	// Control: addr is now the other user's.
	if c, err := peercred.DialOwn(context.Background(), "tcp", addr.String()); !errors.Is(err, peercred.ErrOtherUser) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("control: DialOwn %s: %v, want ErrOtherUser", addr, err)
	}
}
