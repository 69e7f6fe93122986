package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEnsureDirCreatesPrivate_F1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "fleet")
	if err := EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("mode %o, want 700", st.Mode().Perm())
	}
}

func TestTooOpenIsRefusedWithFix_F1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o755)
	err := EnsureDir(dir)
	var me *ModeError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "chmod 700 "+dir) {
		t.Fatalf("err = %v, want a ModeError naming chmod 700 %s", err, dir)
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o755 {
		t.Fatal("EnsureDir re-permissioned the folder")
	}
	os.Chmod(dir, 0o700)
	f := filepath.Join(dir, TokenFile)
	os.WriteFile(f, []byte("x\n"), 0o644)
	os.Chmod(f, 0o644)
	if _, err := LoadOrCreateToken(dir); err == nil || !strings.Contains(err.Error(), "chmod 600 "+f) {
		t.Fatalf("err = %v, want chmod 600 fix", err)
	}
	if b, _ := os.ReadFile(f); string(b) != "x\n" {
		t.Fatal("token file was overwritten")
	}
}

func TestMalformedTokenIsErrorNotReplaced_F2(t *testing.T) {
	dir := privateDir(t)
	f := filepath.Join(dir, TokenFile)
	os.WriteFile(f, []byte("short\n"), 0o600)
	if _, err := LoadOrCreateToken(dir); err == nil || !strings.Contains(err.Error(), f) {
		t.Fatalf("err = %v, want error naming %s", err, f)
	}
	if b, _ := os.ReadFile(f); string(b) != "short\n" {
		t.Fatal("malformed token file was replaced")
	}
}

func TestLoadOrCreateToken_F1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	tok, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseToken([]byte(tok)); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, TokenFile))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("token mode %o", st.Mode().Perm())
	}
	again, err := LoadOrCreateToken(dir)
	if err != nil || again != tok {
		t.Fatalf("second load = %q, %v; want the same token", again, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left-over files: %v", entries)
	}
}

// TestMetricsTokenIsItsOwn_G4: metrics.token is made as the fleet token is (0600, in a 0700
// folder, kept across loads, a too-open one refused and left alone), and is never the fleet token.
func TestMetricsTokenIsItsOwn_G4(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	fleet, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := LoadOrCreateTokenFile(dir, MetricsTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseToken([]byte(tok)); err != nil || tok == fleet {
		t.Fatalf("metrics token well-formed: %v; equal to the fleet token: %v", err, tok == fleet)
	}
	path := filepath.Join(dir, MetricsTokenFile)
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("metrics.token mode %o", st.Mode().Perm())
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("folder mode %o", st.Mode().Perm())
	}
	if again, err := LoadOrCreateTokenFile(dir, MetricsTokenFile); err != nil || again != tok {
		t.Fatalf("second load = %v; want the same token", err)
	}
	os.Chmod(path, 0o640)
	if _, err := LoadOrCreateTokenFile(dir, MetricsTokenFile); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("err = %v, want the chmod 600 fix", err)
	}
	if got, _ := os.ReadFile(path); strings.TrimSpace(string(got)) != tok {
		t.Fatal("a too-open metrics.token was replaced")
	}
}

func TestWriteFileAtomicKeepsOldOnFailure_F2(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "x.json")
	if err := WriteFileAtomic(f, []byte("old")); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o500) // no new files: the temp file cannot be made
	defer os.Chmod(dir, 0o700)
	if os.Geteuid() == 0 {
		t.Skip("root ignores folder permissions")
	}
	if err := WriteFileAtomic(f, []byte("new")); err == nil {
		t.Fatal("want error")
	}
	if b, _ := os.ReadFile(f); string(b) != "old" {
		t.Fatal("old contents lost")
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestTokenRotationGrace_C1(t *testing.T) {
	dir := privateDir(t)
	old, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tok := NewTokenFollower(filepath.Join(dir, TokenFile), clock.Now)
	if !tok.Match(old) {
		t.Fatal("current token not matched")
	}
	last := byte('A')
	if old[len(old)-1] == last {
		last = 'B'
	}
	if tok.Match(old[:len(old)-1] + string(last)) {
		t.Fatal("token wrong by one byte matched")
	}
	if err := RotateToken(dir); err != nil {
		t.Fatal(err)
	}
	if changed, err := tok.Refresh(); !changed || err != nil {
		t.Fatalf("Refresh = %v, %v", changed, err)
	}
	cur, _ := tok.Current()
	if cur == old || !tok.Match(cur) {
		t.Fatal("new token not current")
	}
	clock.Add(RotationGrace - time.Second)
	if !tok.Match(old) {
		t.Fatal("old token refused within grace")
	}
	clock.Add(time.Second)
	if tok.Match(old) {
		t.Fatal("old token believed after grace")
	}
}

func TestTokenFailsClosed_C1(t *testing.T) {
	dir := privateDir(t)
	good, _ := LoadOrCreateToken(dir)
	f := filepath.Join(dir, TokenFile)
	tok := NewTokenFollower(f, nil)
	os.Chmod(f, 0o644)
	if _, err := tok.Refresh(); err == nil {
		t.Fatal("too-open token file accepted")
	}
	if tok.Match(good) {
		t.Fatal("token believed while the file is too open")
	}
	if _, err := tok.Current(); err == nil {
		t.Fatal("Current gave a token while the file is too open")
	}
	os.Chmod(f, 0o600)
	if _, err := tok.Refresh(); err != nil || !tok.Match(good) {
		t.Fatalf("token not believed again after fix: %v", err)
	}
	os.WriteFile(f, []byte("garbage\n"), 0o600)
	tok.Refresh()
	if tok.Match(good) || tok.Match("garbage") {
		t.Fatal("malformed file believed")
	}
}

// TestHome: <stateHome> is --state-dir, else $PHASE_CONSOLE_STATE_HOME, else
// $XDG_STATE_HOME/phase-console when that is absolute (the XDG Base Directory Specification says a
// relative value must be ignored), else ~/.local/state/phase-console.
func TestHome(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		flag, env, xdg string
		want           string
	}{
		{"XDG absolute", "", "", "/x", "/x/phase-console"},
		{"XDG absolute, unclean", "", "", "/x//y/", "/x/y/phase-console"},
		{"XDG relative is ignored", "", "", "x/state", "/home/u/.local/state/phase-console"},
		{"XDG dot-relative is ignored", "", "", "./state", "/home/u/.local/state/phase-console"},
		{"XDG empty", "", "", "", "/home/u/.local/state/phase-console"},
		{"PHASE_CONSOLE_STATE_HOME before XDG", "", "/p", "/x", "/p"},
		{"PHASE_CONSOLE_STATE_HOME relative is made absolute", "", "p", "/x", filepath.Join(cwd, "p")},
		{"--state-dir before all", "/f", "/p", "/x", "/f"},
		{"--state-dir relative is made absolute", "f", "", "x", filepath.Join(cwd, "f")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOME", "/home/u")
			t.Setenv("PHASE_CONSOLE_STATE_HOME", tc.env)
			t.Setenv("XDG_STATE_HOME", tc.xdg)
			if h, err := Home(tc.flag); err != nil || h != tc.want {
				t.Fatalf("Home(%q) = %q, %v; want %q", tc.flag, h, err, tc.want)
			}
		})
	}
}

func privateDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestEnsureHome_F1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := EnsureHome(home); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(home); st.Mode().Perm() != 0o700 {
		t.Fatalf("new home mode %o", st.Mode().Perm())
	}
	os.Chmod(home, 0o755)
	if err := EnsureHome(home); err != nil {
		t.Fatalf("a 0755 home shared with other tools is fine: %v", err)
	}
	os.Chmod(home, 0o775)
	if err := EnsureHome(home); err == nil || !strings.Contains(err.Error(), "chmod go-w "+home) {
		t.Fatalf("group-writable home: %v", err)
	}
}
