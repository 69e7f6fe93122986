package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockOneServePerFolder: a second AcquireLock on the same folder fails at once with a
// LockedError naming the holder's pid and address; after Release the folder can be locked again,
// and ReadHolder names nobody.
func TestLockOneServePerFolder(t *testing.T) {
	dir := privateDir(t)
	first, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.SetHolder(Holder{PID: os.Getpid(), Addr: "127.0.0.1:7420"}); err != nil {
		t.Fatal(err)
	}
	_, err = AcquireLock(dir)
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second lock: %v, want a LockedError", err)
	}
	if le.Holder.PID != os.Getpid() || le.Holder.Addr != "127.0.0.1:7420" {
		t.Fatalf("holder %+v", le.Holder)
	}
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:7420") || !strings.Contains(msg, "pid ") {
		t.Fatalf("error %q does not name the holder", msg)
	}
	if h, held := ReadHolder(dir); !held || h.Addr != "127.0.0.1:7420" {
		t.Fatalf("ReadHolder = %+v, %v", h, held)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if _, held := ReadHolder(dir); held {
		t.Fatal("ReadHolder: held after Release")
	}
	again, err := AcquireLock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Release()
}

// TestLockFileIsPrivate_F1: the lock file is 0600; a too-open one is refused with its chmod, a
// symlink is not followed.
func TestLockFileIsPrivate_F1(t *testing.T) {
	dir := privateDir(t)
	l, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	path := filepath.Join(dir, LockFile)
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
	os.Chmod(path, 0o644)
	if _, err := AcquireLock(dir); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("too-open lock file: %v", err)
	}
	os.Remove(path)
	target := filepath.Join(t.TempDir(), "elsewhere")
	os.WriteFile(target, nil, 0o600)
	os.Symlink(target, path)
	if _, err := AcquireLock(dir); err == nil {
		t.Fatal("a symlinked lock file was followed")
	}
}
