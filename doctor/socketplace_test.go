package doctor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeDir is a folder of a made-up file system: its mode and owner.
type fakeDir struct {
	mode fs.FileMode
	uid  uint32
}

func (d fakeDir) Name() string       { return "" }
func (d fakeDir) Size() int64        { return 0 }
func (d fakeDir) Mode() fs.FileMode  { return fs.ModeDir | d.mode }
func (d fakeDir) ModTime() time.Time { return time.Time{} }
func (d fakeDir) IsDir() bool        { return true }
func (d fakeDir) Sys() any           { return &syscall.Stat_t{Uid: d.uid} }

const owner = 1000

// fakePlace is a machine whose folders are root's and 0755 unless dirs says otherwise, with
// /tmp (1777) and the given accounts; links maps a path to what it resolves to.
func fakePlace(accounts []account) placeFacts {
	return fakePlaceWith(accounts, nil, nil)
}

func fakePlaceWith(accounts []account, dirs map[string]fakeDir, links map[string]string) placeFacts {
	all := map[string]fakeDir{
		"/tmp":                   {0o777 | fs.ModeSticky, 0},
		"/private/tmp":           {0o777 | fs.ModeSticky, 0},
		"/var/tmp":               {0o777 | fs.ModeSticky, 0},
		"/run/user/1000":         {0o700, owner},
		"/run/user/1000/fleet":   {0o700, owner},
		"/home/alice":            {0o750, owner},
		"/Users/alice":           {0o750, owner},
		"/Users/alice/Library":   {0o700, owner},
		"/home/bob":              {0o750, 1001},
		"/var/lib/svc/fleet":     {0o700, owner},
		"/run/user/1001":         {0o700, 1001},
		"/run/user/1001/x":       {0o700, owner},
		"/Users/alice/Library/x": {0o700, owner},
	}
	for k, v := range dirs {
		all[k] = v
	}
	return placeFacts{
		uid:      owner,
		accounts: func() ([]account, error) { return accounts, nil },
		stat: func(p string) (fs.FileInfo, error) {
			if d, ok := all[p]; ok {
				return d, nil
			}
			return fakeDir{0o755, 0}, nil
		},
		resolve: func(p string) string {
			for from, to := range links {
				if p == from || strings.HasPrefix(p, from+"/") {
					return to + strings.TrimPrefix(p, from)
				}
			}
			return filepath.Clean(p)
		},
		tmp: []string{"/tmp"},
	}
}

// testFoldersFine is a machine on which the test's own folders are a fine place for the socket:
// every folder above them root's and 0755, no shared /tmp, no other account.
func testFoldersFine() placeFacts {
	return placeFacts{
		uid:      os.Geteuid(),
		accounts: func() ([]account, error) { return nil, nil },
		stat:     func(string) (fs.FileInfo, error) { return fakeDir{0o755, 0}, nil },
		resolve:  filepath.Clean,
	}
}

var people = []account{
	{"root", 0, "/root"},
	{"alice", owner, "/home/alice"},
	{"bob", 1001, "/home/bob"},
	{"nobody", 65534, "/nonexistent"},
	{"sshd", 105, "/run/sshd"},
	{"weird", 1002, ""},
}

// S5e: the unix socket must sit where no SSH forward of another account reaches it, below no
// folder that others can write, and never below /tmp.
func TestSocketPlace_S5e(t *testing.T) {
	tests := []struct {
		name  string
		sock  string
		facts placeFacts
		want  []string // one substring per problem, in order; none: OK
		ssh   []bool   // per problem: reachable only through SSH
	}{
		{name: "S5e runtime folder", sock: "/run/user/1000/fleet/serve.sock", facts: fakePlace(people)},
		{name: "S5e own home (macOS)", sock: "/Users/alice/Library/x/serve.sock",
			facts: fakePlace(append(people, account{"alice2", owner, "/Users/alice"}))},
		{name: "S5e own home by name", sock: "/home/alice/.fleet/serve.sock", facts: fakePlace(people)},
		{name: "S5e below /tmp", sock: "/tmp/fleet/serve.sock", facts: fakePlace(people),
			want: []string{"is below /tmp, where tailscaled lets every SSH login forward"}, ssh: []bool{false}},
		{name: "S5e below /tmp through a symlink", sock: "/home/alice/tmplink/serve.sock",
			facts: fakePlaceWith(people, nil, map[string]string{"/home/alice/tmplink": "/tmp/x"}),
			want:  []string{"is below /tmp"}, ssh: []bool{false}},
		{name: "S5e below macOS /tmp", sock: "/private/tmp/fleet/serve.sock",
			facts: fakePlaceWith(people, nil, map[string]string{"/tmp": "/private/tmp"}),
			want:  []string{"is below /tmp"}, ssh: []bool{false}},
		{name: "S5e below a sticky folder others can write", sock: "/var/tmp/fleet/serve.sock", facts: fakePlace(people),
			want: []string{"is below /var/tmp, which others can write (mode 1777)"}, ssh: []bool{false}},
		{name: "S5e below a group-writable folder", sock: "/srv/g/fleet/serve.sock",
			facts: fakePlaceWith(people, map[string]fakeDir{"/srv/g": {0o775, 0}}, nil),
			want:  []string{"is below /srv/g, which others can write (mode 0775)"}, ssh: []bool{false}},
		{name: "S5e below another user's folder", sock: "/srv/o/fleet/serve.sock",
			facts: fakePlaceWith(people, map[string]fakeDir{"/srv/o": {0o755, 1001}}, nil),
			want:  []string{"is below /srv/o, which is owned by uid 1001"}, ssh: []bool{false}},
		{name: "S5e through another user's symlink", sock: "/home/bob/link/serve.sock",
			facts: fakePlaceWith(people, nil, map[string]string{"/home/bob/link": "/run/user/1000/fleet"}),
			want:  []string{"is below /home/bob, which is owned by uid 1001", "bob (uid 1001, /home/bob)"}, ssh: []bool{false, true}},
		{name: "S5e in another account's home", sock: "/var/lib/svc/fleet/serve.sock",
			facts: fakePlace(append(people, account{"svc", 999, "/var/lib/svc"})),
			want:  []string{"in the home or runtime folder of svc (uid 999, /var/lib/svc): a Tailscale SSH login as that account could forward to it"}, ssh: []bool{true}},
		{name: "S5e in another account's home through a symlink", sock: "/home/alice/svclink/serve.sock",
			facts: fakePlaceWith(append(people, account{"svc", 999, "/var/lib/svc"}), nil, map[string]string{"/home/alice/svclink": "/var/lib/svc/fleet"}),
			want:  []string{"svc (uid 999, /var/lib/svc)"}, ssh: []bool{true}},
		{name: "S5e a home that is /", sock: "/run/user/1000/fleet/serve.sock",
			facts: fakePlace(append(people, account{"systemd-network", 998, "/"}, account{"systemd-timesync", 997, "/"})),
			want:  []string{"systemd-network (uid 998, /), systemd-timesync (uid 997, /)"}, ssh: []bool{true}},
		{name: "S5e another account's runtime folder", sock: "/run/user/1001/x/serve.sock", facts: fakePlace(people),
			want: []string{"is below /run/user/1001, which is owned by uid 1001", "bob (uid 1001, /run/user/1001)"}, ssh: []bool{false, true}},
		{name: "S5e accounts unreadable", sock: "/run/user/1000/fleet/serve.sock", facts: func() placeFacts {
			f := fakePlace(nil)
			f.accounts = func() ([]account, error) { return nil, errors.New("permission denied") }
			return f
		}(), want: []string{"cannot read the local accounts"}, ssh: []bool{true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judgePlace(tt.sock, tt.facts)
			if len(got) != len(tt.want) {
				t.Fatalf("%d problems, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, p := range got {
				if !strings.Contains(p.what, tt.want[i]) || p.ssh != tt.ssh[i] {
					t.Errorf("problem %d: %+v, want %q (ssh %v)", i, p, tt.want[i], tt.ssh[i])
				}
				if p.fix == "" {
					t.Errorf("problem %d has no fix", i)
				}
			}
		})
	}
}

// A home of / holds every path: moving the socket cannot help, so the fix names the account only.
func TestSocketPlaceFixes_S5e(t *testing.T) {
	root := judgePlace("/run/user/1000/fleet/serve.sock", fakePlace(append(people, account{"systemd-network", 998, "/"})))
	if len(root) != 1 || strings.Contains(root[0].fix, "move") || !strings.Contains(root[0].fix, "sudo usermod -d /nonexistent NAME") ||
		!strings.Contains(root[0].fix, "systemd-network") {
		t.Errorf("home /: %+v", root)
	}
	svc := judgePlace("/var/lib/svc/fleet/serve.sock", fakePlace(append(people, account{"svc", 999, "/var/lib/svc"})))
	if len(svc) != 1 || !strings.Contains(svc[0].fix, "move the socket out of it: fleet serve --socket /run/user/") {
		t.Errorf("home /var/lib/svc: %+v", svc)
	}
	tmp := judgePlace("/tmp/fleet/serve.sock", fakePlace(people))
	if len(tmp) != 1 || !strings.Contains(tmp[0].fix, "sudo tailscale serve --bg unix:/run/user/") {
		t.Errorf("/tmp: %+v", tmp)
	}
}

// A problem only an SSH login reaches is a FAIL while SSH is on or unknown, a WARN while it is
// off; the others FAIL whatever SSH does.
func TestSocketPlaceSeverity_S5e(t *testing.T) {
	facts := fakePlace(append(people, account{"svc", 999, "/var/lib/svc"}))
	for _, tt := range []struct {
		ssh  sshState
		sock string
		want Status
	}{
		{sshOn, "/var/lib/svc/fleet/serve.sock", Fail},
		{sshUnknown, "/var/lib/svc/fleet/serve.sock", Fail},
		{sshOff, "/var/lib/svc/fleet/serve.sock", Warn},
		{sshOff, "/tmp/fleet/serve.sock", Fail},
		{sshOn, "/run/user/1000/fleet/serve.sock", OK},
	} {
		r := &run{cfg: Config{Socket: tt.sock}, ssh: tt.ssh}
		r.checkSocketPlace(facts)
		if len(r.checks) != 1 || r.checks[0].Status != tt.want || r.checks[0].Name != "unix socket place" {
			t.Errorf("ssh %v, %s: %v, want one %v", tt.ssh, tt.sock, r.checks, tt.want)
		}
	}
}

func TestReadAccounts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "passwd")
	os.WriteFile(p, []byte("# comment\nroot:x:0:0:root:/root:/bin/bash\n\nsystemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin\nbroken:x:nan:0::/x:/bin/sh\nshort:x:1\nalice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n"), 0o600)
	got, err := readAccounts(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []account{{"root", 0, "/root"}, {"systemd-network", 998, "/"}, {"alice", 1000, "/home/alice"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("account %d: %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := readAccounts(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Errorf("a missing file reads as no accounts")
	}
}

// On this machine: a socket in a test folder (below /tmp) is a FAIL, whatever else holds.
func TestSocketPlaceReal_S5e(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "serve.sock")
	got := judgePlace(sock, realPlace())
	if len(got) == 0 || !strings.Contains(got[0].what, "is below /tmp") {
		t.Skipf("the test folder %s is not below /tmp here: %+v", sock, got)
	}
}
