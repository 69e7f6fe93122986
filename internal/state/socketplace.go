package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// sharedSocketFolders are the folders into which tailscaled lets every Tailscale SSH login
// forward to unix sockets, whatever its local account (gliderssh's UserSocketDirectories: the
// login's home, /run/user/<its uid> and /tmp). It dials them itself, as root, so no file mode
// keeps such a forward out; the login's own home and runtime folder are judged per account by
// fleet doctor, /tmp is every login's.
var sharedSocketFolders = []string{"/tmp"}

// CheckSocketPlace is the rule for where the unix-socket door's socket may sit (SPEC S5e): in a
// folder only its owner can reach — never below /tmp (where tailscaled lets any Tailscale SSH
// login forward to a unix socket), and below no folder that another user owns (root aside) or
// that group or world can write, with or without the sticky bit (others could put a folder or
// socket of their own in its place first). The path as given and the path its existing folders
// resolve to are both judged: tailscaled dials the given one, following its symlinks. Folders of
// path that do not exist yet are left to the caller to create (0700). It changes nothing.
func CheckSocketPlace(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s: the socket's path must be absolute", path)
	}
	path = filepath.Clean(path)
	real, err := resolveExisting(path)
	if err != nil {
		return err
	}
	for _, shared := range sharedSocketFolders {
		realShared, err := filepath.EvalSymlinks(shared)
		if err != nil {
			realShared = shared
		}
		for _, p := range []string{path, real} {
			if isBelow(p, shared) || isBelow(p, realShared) {
				return fmt.Errorf("%s is below %s, where tailscaled lets every Tailscale SSH login forward to a unix socket (SPEC S5e); put the socket in a folder only you can reach, such as /run/user/%d/fleet/serve.sock",
					path, shared, os.Geteuid())
			}
		}
	}
	seen := map[string]bool{}
	for _, start := range []string{path, real} {
		for dir := filepath.Dir(start); !seen[dir]; dir = filepath.Dir(dir) {
			seen[dir] = true
			st, err := os.Stat(dir)
			if errors.Is(err, fs.ErrNotExist) {
				continue // made by the caller, 0700
			}
			if err != nil {
				return err
			}
			if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
				return &ModeError{Path: dir, Mode: st.Mode(), Why: fmt.Sprintf("is owned by uid %d, who could put their own socket in the place of %s", sys.Uid, path),
					Fix: "put the socket below folders owned by root or by you"}
			}
			if st.Mode().Perm()&0o022 != 0 {
				return &ModeError{Path: dir, Mode: st.Mode(), Why: fmt.Sprintf("can be written by others (sticky bit or not), who could put their own folder or socket in the place of %s", path),
					Fix: "chmod go-w " + dir + ", or put the socket in a folder only you can reach"}
			}
		}
	}
	return nil
}

// resolveExisting is path with the symlinks of its deepest existing folder resolved; the part
// below it, which does not exist yet, is kept as it is.
func resolveExisting(path string) (string, error) {
	rest := ""
	for dir := path; ; dir = filepath.Dir(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if dir == filepath.Dir(dir) {
			return "", err
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// isBelow reports whether p is strictly inside the folder dir (both clean and absolute).
func isBelow(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}
