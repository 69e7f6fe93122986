// Package testdirs gives tests a folder where the unix-socket door may put its socket.
//
// The door refuses a socket below /tmp or below any folder that others can write (SPEC S5e,
// state.CheckSocketPlace), which is where t.TempDir() is on Linux. Private makes a folder in
// the first of a few places the rule admits instead, so that the tests do not depend on where
// the runner's HOME is, and removes it when the test ends. It never weakens the rule: a place
// is used only if state.CheckSocketPlace accepts it.
package testdirs

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/phase-console/fleet/internal/state"
)

// maxSocketPath is the longest unix socket path the kernel takes (sun_path is 108 bytes on
// Linux, one of them the terminating NUL; macOS has 104).
const maxSocketPath = 103

// roomBelow is how long a path tests may add below a Private folder ("/anc/run/serve.sock" is
// the longest today), so that the socket's path still fits maxSocketPath.
const roomBelow = 32

// tempPattern names Private's folders; .gitignore lists it, since one may be in the checkout.
const tempPattern = ".fleet-test-"

// bases are the folders Private tries, in order: the user's runtime folder ($XDG_RUNTIME_DIR,
// /run/user/<uid>), home, cache folder, the root of the module under test (in the checkout,
// which is not below /tmp on the usual runners), and /run, where only root can make a folder.
// Places the rule refuses are kept in the list; Private judges each.
func bases() []string {
	var list []string
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		list = append(list, dir)
	}
	list = append(list, "/run/user/"+strconv.Itoa(os.Geteuid()))
	if home, err := os.UserHomeDir(); err == nil {
		list = append(list, home)
	}
	if cache, err := os.UserCacheDir(); err == nil {
		list = append(list, cache)
	}
	if root, ok := moduleRoot(); ok {
		list = append(list, root)
	}
	return append(list, "/run")
}

// Private returns a new, empty folder (0700) that state.CheckSocketPlace accepts for a socket
// inside it, removed with everything in it when t ends. Its path is short enough that a path of
// up to 32 more bytes below it fits the kernel's limit for a socket. Where there is no such
// place (every base below /tmp or a folder others can write, or too long), the test is skipped
// with the reason; under CI=true it fails instead, since CI must run it.
func Private(t testing.TB) string {
	t.Helper()
	var tried []string
	for _, base := range bases() {
		dir, why := makeIn(base)
		if why == "" {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
		tried = append(tried, base+": "+why)
	}
	msg := "no folder here where the unix-socket door may put its socket (SPEC S5e: not below /tmp, " +
		"not below a folder others can write); set XDG_RUNTIME_DIR or HOME to such a folder. Tried:"
	for _, s := range tried {
		msg += "\n\t" + s
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// makeIn makes a Private folder in base, or says why base will not do.
func makeIn(base string) (dir, why string) {
	if !filepath.IsAbs(base) {
		return "", "not an absolute path"
	}
	// MkdirTemp adds at most 10 digits to the pattern.
	if n := len(filepath.Join(base, tempPattern)) + 10 + roomBelow; n > maxSocketPath {
		return "", "too long for a socket path below it"
	}
	if err := state.CheckSocketPlace(filepath.Join(base, "x", "s.sock")); err != nil {
		return "", err.Error()
	}
	dir, err := os.MkdirTemp(base, tempPattern)
	if err != nil {
		return "", err.Error()
	}
	if err := state.CheckSocketPlace(filepath.Join(dir, "s.sock")); err != nil {
		os.RemoveAll(dir)
		return "", err.Error()
	}
	return dir, ""
}

// moduleRoot is the folder of the go.mod above the working directory, which go test sets to the
// package's folder.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
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
