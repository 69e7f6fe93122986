package doctor

// Where the unix-socket door's socket sits (SPEC S5e).
//
// Tailscale SSH runs a login's unix-socket forwards (ssh -L 9000:/path/to.sock) inside tailscaled,
// as root, so no file mode stops them; the socket's peer is then tailscaled's uid, as for Serve's
// own requests. What stops them is the list of folders tailscaled lets a login forward into: the
// login's home folder, /tmp and /run/user/<the login's uid> (gliderssh's UserSocketDirectories;
// symlinks resolved). So the socket must sit outside every such folder of every account but its
// owner's — an SSH login as the owner is the owner, who can read fleet.token anyway — and below no
// folder that others can write, where they could put their own folder or socket in its place.

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// An account is one line of the account database: a possible Tailscale SSH login.
type account struct {
	name string
	uid  int
	home string
}

// placeFacts are what judging the socket's place reads. realPlace reads this machine; tests give
// fakes, since a test's own folders are all below /tmp.
type placeFacts struct {
	uid      int                               // the socket's owner: this user
	accounts func() ([]account, error)         // every local account
	stat     func(string) (fs.FileInfo, error) // a folder's mode and owner
	resolve  func(string) string               // a path with its symlinks resolved
	tmp      []string                          // the folder every SSH login may forward into
}

func realPlace() placeFacts {
	return placeFacts{
		uid:      os.Geteuid(),
		accounts: func() ([]account, error) { return readAccounts("/etc/passwd") },
		stat:     os.Stat,
		resolve:  resolvePath,
		tmp:      []string{"/tmp"},
	}
}

// readAccounts reads the accounts of an /etc/passwd file. (Accounts that only a directory
// service such as LDAP or sssd knows are not there; macOS keeps its people in Directory
// Services, but their homes are below /Users, each owned by its account.)
func readAccounts(path string) ([]account, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var accounts []account
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) < 7 {
			continue
		}
		uid, err := strconv.Atoi(fields[2])
		if err != nil {
			continue
		}
		accounts = append(accounts, account{name: fields[0], uid: uid, home: fields[5]})
	}
	return accounts, sc.Err()
}

// A placeProblem is one way someone other than the socket's owner can reach it.
type placeProblem struct {
	what, fix string
	ssh       bool // only through a Tailscale SSH login: a FAIL while SSH is (or may be) on, else a WARN
}

// judgePlace finds every way someone other than its owner reaches the socket at sock.
func judgePlace(sock string, f placeFacts) []placeProblem {
	sock = filepath.Clean(sock)
	real := f.resolve(sock)
	move := "move it to a folder only you can reach: " + unixDoorCommands()
	var out []placeProblem

	for _, tmp := range f.tmp {
		if below(sock, tmp) || below(real, tmp) || below(real, f.resolve(tmp)) {
			out = append(out, placeProblem{what: fmt.Sprintf("%s is below %s, where tailscaled lets every SSH login forward to unix sockets", sock, tmp), fix: move})
			break
		}
	}

	// The folders above the path as given (tailscaled dials that path, following its symlinks
	// at every dial) and above the path it resolves to; tmp was reported above.
	seen := map[string]bool{}
	for _, start := range []string{real, sock} {
		for dir := filepath.Dir(start); !seen[dir]; dir = filepath.Dir(dir) {
			seen[dir] = true
			if st, err := f.stat(dir); err == nil && !isTmp(dir, f) {
				if p := judgeFolder(dir, st, f.uid); p != "" {
					out = append(out, placeProblem{what: fmt.Sprintf("%s is below %s, which %s: they could put their own socket in its place", sock, dir, p), fix: move})
				}
			}
		}
	}

	if p, ok := judgeHomes(sock, real, f); ok {
		out = append(out, p)
	}
	return out
}

// isTmp reports whether dir is one of the folders every SSH login may forward into (reported
// on its own).
func isTmp(dir string, f placeFacts) bool {
	for _, tmp := range f.tmp {
		if dir == tmp || dir == f.resolve(tmp) {
			return true
		}
	}
	return false
}

// judgeFolder says why others could change what is in dir ("" when they cannot): it is writable
// by group or world — with or without the sticky bit, which keeps them from renaming this user's
// entries but not from making their own first —, or owned by another user than this one and root.
func judgeFolder(dir string, st fs.FileInfo, uid int) string {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != uid {
		return fmt.Sprintf("is owned by uid %d", sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		mode := uint32(st.Mode().Perm())
		if st.Mode()&fs.ModeSticky != 0 {
			mode |= 0o1000
		}
		return fmt.Sprintf("others can write (mode %04o)", mode)
	}
	return ""
}

// judgeHomes finds the other accounts whose home folder or /run/user/<uid> contains the socket:
// a Tailscale SSH login as any of them may forward to it.
func judgeHomes(sock, real string, f placeFacts) (placeProblem, bool) {
	accounts, err := f.accounts()
	if err != nil {
		return placeProblem{what: fmt.Sprintf("cannot read the local accounts to tell whose SSH login could reach %s (%v)", sock, err),
			fix: "make /etc/passwd readable", ssh: true}, true
	}
	var who, names []string
	atRoot := false
	seen := map[string]bool{}
	for _, a := range accounts {
		if a.uid == f.uid || seen[a.name] {
			continue // an SSH login as the owner is the owner
		}
		for _, dir := range []string{a.home, "/run/user/" + strconv.Itoa(a.uid)} {
			if dir == "" || !filepath.IsAbs(dir) {
				continue
			}
			if below(real, filepath.Clean(dir)) || below(real, f.resolve(dir)) || below(sock, filepath.Clean(dir)) {
				who = append(who, fmt.Sprintf("%s (uid %d, %s)", a.name, a.uid, dir))
				names = append(names, a.name)
				seen[a.name] = true
				atRoot = atRoot || filepath.Clean(dir) == "/"
				break
			}
		}
	}
	if len(who) == 0 {
		return placeProblem{}, false
	}
	sort.Strings(who)
	sort.Strings(names)
	// A home of / holds every path: only a new home for that account helps.
	fix := "give " + strings.Join(names, ", ") + " a home that holds nothing of yours: sudo usermod -d /nonexistent NAME"
	if !atRoot {
		fix = "move the socket out of it: " + unixDoorCommands() + "; or " + fix
	}
	return placeProblem{
		what: fmt.Sprintf("%s is in the home or runtime folder of %s: a Tailscale SSH login as that account could forward to it", sock, strings.Join(who, ", ")),
		fix:  fix,
		ssh:  true,
	}, true
}

// checkSocketPlace reports judgePlace's findings. A problem reachable only through Tailscale SSH
// is a FAIL while SSH is on or unknown, and a WARN while it is off: turning SSH on opens it.
func (r *run) checkSocketPlace(f placeFacts) {
	problems := judgePlace(r.cfg.Socket, f)
	if len(problems) == 0 {
		r.add(OK, "unix socket place", r.cfg.Socket+" is out of reach of every other account's SSH forwards", "")
		return
	}
	for _, p := range problems {
		st := Fail
		if p.ssh && r.ssh == sshOff {
			st = Warn
			p.what += " (Tailscale SSH is off now)"
		}
		r.add(st, "unix socket place", p.what, p.fix)
	}
}

// below reports whether p is strictly inside the folder dir (both clean and absolute).
func below(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}

// DefaultSocketPath is where deploy/ puts the unix-socket door: the user's runtime folder on
// Linux (/run/user/<uid>, 0700, that only an SSH login as this same user may forward into), and
// a folder in ~/Library on macOS (in the owner's own home, which only the owner's own login
// reaches).
func DefaultSocketPath() string {
	if runtime.GOOS == "darwin" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "~"
		}
		return filepath.Join(home, "Library", "Application Support", "fleet", "serve.sock")
	}
	return "/run/user/" + strconv.Itoa(os.Geteuid()) + "/fleet/serve.sock"
}
