// Package testdirs gives tests a folder where the unix-socket door may put its socket.
//
// The door refuses a socket below /tmp or below any folder that others can write (SPEC S5e,
// state.CheckSocketPlace), which is where t.TempDir() is on Linux. Private makes a folder
// below the user's home instead (or /run/user/<uid>), and removes it when the test ends.
package testdirs

import (
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
