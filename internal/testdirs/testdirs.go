// Package testdirs gives tests a folder where the unix-socket door may put its socket.
//
// The door refuses a socket below /tmp or below any folder that others can write (SPEC S5e,
// state.CheckSocketPlace), which is where t.TempDir() is on Linux. Private makes a folder
// below the user's home instead (or /run/user/<uid>), and removes it when the test ends.
package testdirs

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/phase-console/fleet/internal/state"
)

// Private returns a new, empty folder (0700) that state.CheckSocketPlace accepts for a socket
// inside it, removed with everything in it when t ends. The path is short, so that a socket
// path below it fits the kernel's 107 bytes.
func Private(t testing.TB) string {
	t.Helper()
	var bases []string
	if home, err := os.UserHomeDir(); err == nil {
		bases = append(bases, home)
	}
	bases = append(bases, "/run/user/"+strconv.Itoa(os.Geteuid()))
	var last error
	for _, base := range bases {
		if err := state.CheckSocketPlace(filepath.Join(base, "x", "s.sock")); err != nil {
			last = err
			continue
		}
		dir, err := os.MkdirTemp(base, ".fleet-test-")
		if err != nil {
			last = err
			continue
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	t.Fatalf("no folder here where the unix-socket door may put its socket (tried %v): %v", bases, last)
	return ""
}

// ServedSocket returns the path of a unix socket, in a new folder of Private's, on which this
// process listens, accepting each connection and closing it at once: a stand-in for a daemon
// whose listening process is what a test looks at (peercred.SocketServerArgs). stop ends the
// listening; t's end does too.
func ServedSocket(t testing.TB) (path string, stop func()) {
	t.Helper()
	path = filepath.Join(Private(t), "served.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	stop = func() { ln.Close() }
	t.Cleanup(stop)
	return path, stop
}
