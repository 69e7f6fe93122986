package state

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// dupFile is another descriptor of f's open file, as a process handed f over holds it.
func dupFile(t *testing.T, f *os.File) *os.File {
	t.Helper()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// TestAdoptLockHandedOver_O3: a descriptor of the lock's own open file, handed over, holds the
// same lock: AdoptLock takes it while the first holder still runs, the folder stays locked to
// everyone else (AcquireLock fails), and it stays locked once the first holder lets go.
func TestAdoptLockHandedOver_O3(t *testing.T) {
	dir := privateDir(t)
	first, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := AdoptLock(dir, dupFile(t, first.File()))
	if err != nil {
		t.Fatalf("adopting the handed-over lock: %v", err)
	}
	defer second.Release()
	if _, err := AcquireLock(dir); err == nil {
		t.Fatal("an independent fleet serve took the lock during the handoff")
	}
	first.Release()
	if _, err := AcquireLock(dir); err == nil {
		t.Fatal("an independent fleet serve took the lock once the old process let go")
	}
	if h, held := ReadHolder(dir); !held || h.PID != os.Getpid() {
		t.Errorf("ReadHolder = %+v, %v", h, held)
	}
}

// TestAdoptLockRefused_O3_F1: fail closed — a descriptor that is not this folder's lock file (a
// copy, another folder's lock, the lock file opened anew while someone else holds the lock) is
// refused, and the folder stays its holder's.
func TestAdoptLockRefused_O3_F1(t *testing.T) {
	dir := privateDir(t)
	holder, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	other := privateDir(t)
	otherLock, err := AcquireLock(other)
	if err != nil {
		t.Fatal(err)
	}
	defer otherLock.Release()
	notLock := filepath.Join(dir, "not-the-lock")
	if err := os.WriteFile(notLock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rows := []struct {
		name string
		file func() *os.File
	}{
		{"O3 another file of the folder", func() *os.File { f, _ := os.Open(notLock); return f }},
		{"O3 another folder's lock", func() *os.File { return dupFile(t, otherLock.File()) }},
		{"O3 the lock file opened anew, held by another", func() *os.File {
			f, _ := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR, 0)
			return f
		}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if l, err := AdoptLock(dir, r.file()); err == nil {
				l.Release()
				t.Fatal("adopted")
			}
		})
	}
	// A lock file made too open is refused too (F1), even on the holder's own descriptor.
	os.Chmod(filepath.Join(dir, LockFile), 0o644)
	if l, err := AdoptLock(dir, dupFile(t, holder.File())); err == nil {
		l.Release()
		t.Error("adopted a group-readable lock file")
	}
}
