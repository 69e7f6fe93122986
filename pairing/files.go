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

// fileVersion is the format of codes.json and devices.json that this fleet writes: their
// top-level "format" (SPEC O5; what a format is, and what happens to a file of each, is package
// state's):
//
//   - 1: the files before "format" (state.LegacyFormat). They carried "version": 1 in its place,
//     and nothing else differs.
//   - 2: "format": 2, and no "version".
//
// Both are read; the first write of a format-1 file keeps it as <name>.v1.bak. A file of a newer
// format is refused and left as it is: an older fleet must not rewrite a newer one's file.
const fileVersion = 2

// A pairingFile is codes.json or devices.json in memory, always at fileVersion, with the format
// of the file it was read from.
type pairingFile interface {
	version() int
	// legacy is an empty format-1 file to decode into; fromLegacy fills this one from it.
	legacy() legacyFile
	fromLegacy(legacyFile)
	// readFormat is the format of the file it was read from, 0 when there was none.
	readFormat() *int
}

// A legacyFile is a format-1 file, with its "version".
type legacyFile interface{ version() int }

// CheckFormats refuses a codes.json or devices.json in dir of a newer format than this fleet reads
// (a *state.NewerFormatError: one line naming the file and both formats). It only reads: any other
// problem with a file is reported where the file is used.
func CheckFormats(dir string) error {
	for _, name := range []string{DevicesFile, CodesFile} {
		if err := state.CheckFormat(filepath.Join(dir, name), fileVersion); err != nil {
			return err
		}
	}
	return nil
}

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
	var newer *state.NewerFormatError
	if errors.As(e.Err, &newer) {
		return newer.Error() // it parses, in a format this fleet does not know: say that alone
	}
	return fmt.Sprintf("%s does not parse: %v (it is left as it is: fix or move it away)", e.Path, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// readJSON reads the private file at path into v, strictly: unknown fields, trailing data, a
// format newer than fileVersion and, in a format-1 file, a version other than 1 are errors. A
// format-1 file is decoded as strictly into v.legacy() and brought to fileVersion; either way v
// records the format read. A missing file leaves v alone and returns an error matching
// fs.ErrNotExist.
func readJSON(path string, v pairingFile) error {
	data, err := state.ReadPrivateFile(path)
	if err != nil {
		return err
	}
	return decodeJSON(path, data, v)
}

// decodeJSON is readJSON's judgement of data, the bytes of the file at path.
func decodeJSON(path string, data []byte, v pairingFile) error {
	if len(data) > maxFileSize {
		return &ParseError{Path: path, Err: fmt.Errorf("larger than %d bytes", maxFileSize)}
	}
	from, formatErr := state.FormatOf(path, data, fileVersion)
	var newer *state.NewerFormatError
	if errors.As(formatErr, &newer) {
		return &ParseError{Path: path, Err: formatErr}
	}
	var into any = v
	var old legacyFile
	if formatErr == nil && from == state.LegacyFormat {
		old = v.legacy()
		into = old
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return &ParseError{Path: path, Err: err}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ParseError{Path: path, Err: errors.New("trailing data after the JSON value")}
	}
	if formatErr != nil {
		return &ParseError{Path: path, Err: formatErr}
	}
	if old != nil {
		if got := old.version(); got != 1 {
			return &ParseError{Path: path, Err: fmt.Errorf("version %d, want 1", got)}
		}
		v.fromLegacy(old)
	}
	if got := v.version(); got != fileVersion {
		return &ParseError{Path: path, Err: fmt.Errorf("format %d, want %d", got, fileVersion)}
	}
	*v.readFormat() = from
	return nil
}

// writeJSON writes v to path atomically, 0600, refusing an existing file that is too open (F1).
// When v was read from a file of an older format, that file is first kept once as
// <name>.v<N>.bak (state.WriteUpgraded).
func writeJSON(path string, v pairingFile) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if from := *v.readFormat(); from != 0 && from < fileVersion {
		err = state.WriteUpgraded(path, from, data)
	} else {
		err = state.WritePrivateFile(path, data)
	}
	if err == nil {
		*v.readFormat() = fileVersion
	}
	return err
}

// notExist reports whether err says a file is missing.
func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
