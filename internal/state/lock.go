package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// LockFile is the file in FleetDir that `fleet serve` holds locked while it runs: one supervisor
// per state folder, so that a second one cannot take over supervisor.addr and the routes.
const LockFile = "serve.lock"

// A Holder says which process holds a state folder's lock, as it wrote it into the lock file.
type Holder struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr,omitempty"` // "127.0.0.1:7420", once it listens
}

func (h Holder) String() string {
	s := fmt.Sprintf("pid %d", h.PID)
	if h.Addr != "" {
		s += ", listening on " + h.Addr
	}
	return s
}

// A LockedError says that another process holds the lock.
type LockedError struct {
	Path   string
	Holder Holder // zero when the holder has not written it yet
}

func (e *LockedError) Error() string {
	if e.Holder.PID == 0 {
		return fmt.Sprintf("%s is held by another fleet serve", e.Path)
	}
	return fmt.Sprintf("%s is held by another fleet serve (%s)", e.Path, e.Holder)
}

// A Lock is an exclusive flock(2) on <fleetDir>/serve.lock. The kernel drops it when the process
// ends, however it ends, so a crash never leaves a stale lock behind; the file itself stays.
type Lock struct {
	f *os.File
}

// AcquireLock takes the lock of fleetDir (a folder that must exist), without waiting. When another
// process holds it, the error is a *LockedError naming that process. The lock file is a private
// file like the others (F1): too open, or a symlink, is refused.
func AcquireLock(fleetDir string) (*Lock, error) {
	path := filepath.Join(fleetDir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := CheckFile(path); err != nil {
		f.Close()
		return nil, err
	}
	if err := flockSoon(f, lockPatience); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			h, _ := ReadHolder(fleetDir)
			return nil, &LockedError{Path: path, Holder: h}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &Lock{f: f}
	if err := l.SetHolder(Holder{PID: os.Getpid()}); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// SetHolder writes h into the lock file, for a second `fleet serve` to name. It rewrites the file in
// place: renaming another file over it would leave the lock on a file nobody opens.
func (l *Lock) SetHolder(h Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	return nil
}

// Release drops the lock. The file stays: removing it would let a third process lock a new file
// while a second one still waits on the old.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}

// ReadHolder reports who holds fleetDir's lock: held is true only while some process holds it
// (a lock file left by a process that ended names nobody).
func ReadHolder(fleetDir string) (h Holder, held bool) {
	path := filepath.Join(fleetDir, LockFile)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return Holder{}, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return Holder{}, false
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		return Holder{}, false
	}
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	json.Unmarshal(b, &h) // a holder that has not written yet is the zero Holder
	return h, true
}

// lockPatience is how long AcquireLock waits for a holder that is letting go: a supervisor being
// restarted may still be closing when its successor starts. A holder that stays is refused after it.
const lockPatience = time.Second

// flockSoon takes an exclusive flock on f, retrying for up to patience while another holds it.
func flockSoon(f *os.File, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// File is the lock's open file. Its flock belongs to the open file, not to the process: a process
// that inherits a descriptor of it (a handoff, SPEC O3) holds the same lock, and the lock stays
// held until every process that holds a descriptor of it has closed it.
func (l *Lock) File() *os.File { return l.f }

// AdoptLock takes over the lock of fleetDir from f, a descriptor of it handed over by the process
// that held it (SPEC O3): f must be that folder's lock file itself (the same file as
// <fleetDir>/serve.lock, a regular private file, not a symlink), and the lock must be f's to
// take — held by f's open file already, or by nobody. Anything else is an error, and f is
// closed: a process that cannot prove it holds the lock does not serve the folder.
func AdoptLock(fleetDir string, f *os.File) (*Lock, error) {
	path := filepath.Join(fleetDir, LockFile)
	fail := func(err error) (*Lock, error) {
		f.Close()
		return nil, fmt.Errorf("lock %s handed over: %w", path, err)
	}
	if err := CheckFile(path); err != nil {
		return fail(err)
	}
	onDisk, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	given, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !onDisk.Mode().IsRegular() || !os.SameFile(onDisk, given) {
		return fail(errors.New("the descriptor handed over is not this folder's lock file"))
	}
	// flock on an open file that holds the lock already succeeds (it is the same lock); on one
	// that does not, it fails while anyone else holds it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(err)
	}
	l := &Lock{f: f}
	if err := l.SetHolder(Holder{PID: os.Getpid()}); err != nil {
		return fail(err)
	}
	return l, nil
}
