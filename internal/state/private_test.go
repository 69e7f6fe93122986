package state

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

// TestWritePrivateFile_F1: a missing file is created 0600 and a private one replaced; an existing
// one that is too open is refused with an error naming it and the chmod, and left as it was.
func TestWritePrivateFile_F1(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, AddrFile)
	t.Run("F1 new file is 0600", func(t *testing.T) {
		if err := WritePrivateFile(path, []byte("127.0.0.1:7420\n")); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %o", st.Mode().Perm())
		}
	})
	t.Run("F1 private file is replaced", func(t *testing.T) {
		if err := WritePrivateFile(path, []byte("127.0.0.1:7421\n")); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != "127.0.0.1:7421\n" {
			t.Fatalf("contents %q", b)
		}
	})
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		t.Run("F1 existing "+mode.String(), func(t *testing.T) {
			os.Chmod(path, mode)
			defer os.Chmod(path, 0o600)
			before, _ := os.ReadFile(path)
			err := WritePrivateFile(path, []byte("127.0.0.1:9999\n"))
			var me *ModeError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600 "+path) {
				t.Fatalf("err = %v; want a ModeError naming %s and chmod 600", err, path)
			}
			after, _ := os.ReadFile(path)
			if st, _ := os.Stat(path); string(before) != string(after) || st.Mode().Perm() != mode {
				t.Errorf("the refused file changed: mode %o, %q -> %q", st.Mode().Perm(), before, after)
			}
		})
	}
	t.Run("F1 a folder in its place", func(t *testing.T) {
		p := filepath.Join(dir, "x")
		os.Mkdir(p, 0o700)
		if err := WritePrivateFile(p, []byte("x")); err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestCheckHome_F1 is the one rule for <stateHome>, used by serve (EnsureHome) and doctor alike:
// ours, a folder, not writable by group or world; readable by others is fine (it may be shared
// with other tools). It never creates or changes anything.
func TestCheckHome_F1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if err := CheckHome(home); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing home: %v; want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(home); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("CheckHome created the folder")
	}
	os.Mkdir(home, 0o700)
	for _, row := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o700, true}, {0o750, true}, {0o755, true}, {0o711, true}, {0o775, false}, {0o757, false}, {0o777, false}, {0o720, false}} {
		os.Chmod(home, row.mode)
		err := CheckHome(home)
		if row.ok && err != nil {
			t.Errorf("F1 home %o refused: %v", row.mode, err)
		}
		if !row.ok && (err == nil || !strings.Contains(err.Error(), "chmod go-w "+home)) {
			t.Errorf("F1 home %o: %v; want chmod go-w %s", row.mode, err, home)
		}
		if st, _ := os.Stat(home); st.Mode().Perm() != row.mode {
			t.Errorf("CheckHome changed the mode to %o", st.Mode().Perm())
		}
		if ensure := EnsureHome(home); (ensure == nil) != (err == nil) {
			t.Errorf("F1 home %o: EnsureHome says %v, CheckHome %v: two rules", row.mode, ensure, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if err := CheckHome(file); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("a file as home: %v", err)
	}
}

// TestCheckDir_F1: the rule for <stateHome>/fleet (and every private folder): ours, 0700.
func TestCheckDir_F1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := CheckDir(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v; want fs.ErrNotExist", err)
	}
	os.Mkdir(dir, 0o700)
	os.Chmod(dir, 0o700)
	if err := CheckDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o755, 0o750, 0o701, 0o710} {
		os.Chmod(dir, mode)
		if err := CheckDir(dir); err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
			t.Errorf("F1 fleet folder %o: %v; want chmod 700 %s", mode, err, dir)
		}
	}
}

// TestReadPrivateFile_F1: ReadPrivateFile reads a regular private file of ours and refuses
// everything else with an error that names the path and the fix, judging the file it opened: a
// symlink at the path is not followed, even to a private file of ours; a FIFO does not block the
// open; a file owned by someone else (root only) is refused whoever can open it.
func TestReadPrivateFile_F1(t *testing.T) {
	dir := privateDir(t)
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadPrivateFile(good); err != nil || string(b) != "ok\n" {
		t.Fatalf("a private file: %q, %v", b, err)
	}
	if _, err := ReadPrivateFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v; want fs.ErrNotExist", err)
	}
	refused := func(name, path, why, fix string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := ReadPrivateFile(path); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("F1 %s: ReadPrivateFile blocked", name)
		}
		var me *ModeError
		if !errors.As(err, &me) || me.Path != path || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), fix) {
			t.Errorf("F1 %s: %v; want a ModeError naming %s, %q and %q", name, err, path, why, fix)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	refused("a symlink to a private file", link, "is not a regular file", "move it out of the way")
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	refused("a dangling symlink", dangling, "is not a regular file", "move it out of the way")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	refused("a FIFO", fifo, "is not a regular file", "move it out of the way")
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	refused("a folder", sub, "is not a regular file", "move it out of the way")
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("x"), 0o600)
	os.Chmod(open, 0o640)
	refused("a file 0640", open, "is group- or world-accessible", "chmod 600 "+open)
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs")
		os.WriteFile(theirs, []byte("x"), 0o600)
		if err := os.Chown(theirs, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		refused("a file of uid 4242", theirs, "is owned by uid 4242", "chown 0 "+theirs)
	}
}
