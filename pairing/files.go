package pairing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/phase-console/fleet/internal/state"
)

// Names of the files in the pairing folder.
const (
	PasswordFile = "password"
	CodesFile    = "codes.json"
	DevicesFile  = "devices.json"
	LockFile     = "lock"
)

// fileVersion is the "version" of codes.json and devices.json. A file of another version is
// refused (an older fleet must not rewrite a newer one's file).
const fileVersion = 1

// openLock opens dir/lock, creating it 0600; like every file here it must be private (F1).
func openLock(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := state.CheckFile(path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// withLock runs fn holding the folder's exclusive lock, waiting for it. flock(2) locks belong to
// an open file description, so two goroutines of one process exclude each other as two processes
// do; the kernel drops the lock when a process dies, however it dies.
func withLock(dir string, fn func() error) error {
	if err := state.EnsureDir(dir); err != nil {
		return err
	}
	f, err := openLock(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return fn()
}

// tryLock is withLock without waiting: ran is false when another holder has the lock.
func tryLock(dir string, fn func() error) (ran bool, err error) {
	f, err := openLock(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return true, fn()
}

// maxFileSize bounds what is read from the folder: the files are small, a huge one is an error.
const maxFileSize = 4 << 20

// A ParseError says that a file of the folder does not parse. The file is left as it is.
type ParseError struct {
	Path string
	Err  error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s does not parse: %v (it is left as it is: fix or move it away)", e.Path, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// readJSON reads the private file at path into v, strictly: unknown fields, trailing data and a
// version other than fileVersion are errors. A missing file leaves v alone and returns an error
// matching fs.ErrNotExist.
func readJSON(path string, v interface{ version() int }) error {
	data, err := state.ReadPrivateFile(path)
	if err != nil {
		return err
	}
	if len(data) > maxFileSize {
		return &ParseError{Path: path, Err: fmt.Errorf("larger than %d bytes", maxFileSize)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &ParseError{Path: path, Err: err}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ParseError{Path: path, Err: errors.New("trailing data after the JSON value")}
	}
	if got := v.version(); got != fileVersion {
		return &ParseError{Path: path, Err: fmt.Errorf("version %d, want %d", got, fileVersion)}
	}
	return nil
}

// writeJSON writes v to path atomically, 0600, refusing an existing file that is too open (F1).
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return state.WritePrivateFile(path, append(data, '\n'))
}

// notExist reports whether err says a file is missing.
func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
