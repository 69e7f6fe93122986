// Package state owns fleet's files on disk: where <stateHome> is, the modes its files must have
// (SPEC F1) and how they are written (F2).
//
// Guarantees: a folder is created 0700 and a file 0600; an existing one that is group- or
// world-accessible, or owned by another user, is refused with an error that names the path and the
// chmod that fixes it — never silently re-permissioned. Every write goes to a temporary file in the
// same folder, is fsynced, then renamed over the old one, so a crash or a full disk leaves either the
// old file or the new one. A file that does not parse is the caller's error to report; this package
// never replaces one with an empty file.
//
// It also owns what a JSON state file's "format" means (SPEC O5, format.go): which format a file
// is, the refusal of a newer one, and the upgrade of an older one with its one backup. How one
// format's fields become the next's is the file's owner's (supervisor, pairing).
package state

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Home resolves <stateHome>: flagValue (--state-dir), else $PHASE_CONSOLE_STATE_HOME, else
// $XDG_STATE_HOME/phase-console, else ~/.local/state/phase-console. The first two are made
// absolute against the working folder. $XDG_STATE_HOME counts only when it is an absolute path:
// the XDG Base Directory Specification says a relative one is invalid and must be ignored, so a
// relative value falls through to ~/.local/state, as an empty one does.
func Home(flagValue string) (string, error) {
	if flagValue != "" {
		return filepath.Abs(flagValue)
	}
	if v := os.Getenv("PHASE_CONSOLE_STATE_HOME"); v != "" {
		return filepath.Abs(v)
	}
	if v := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(v) {
		return filepath.Join(v, "phase-console"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find the state folder: %w (set --state-dir or $PHASE_CONSOLE_STATE_HOME)", err)
	}
	return filepath.Join(home, ".local", "state", "phase-console"), nil
}

// FleetDir is the supervisor's folder, <stateHome>/fleet.
func FleetDir(home string) string { return filepath.Join(home, "fleet") }

// File names inside FleetDir.
const (
	TokenFile        = "fleet.token"
	MetricsTokenFile = "metrics.token" // the bearer of /fleet/v1/metrics alone (SPEC G4)
	RegistryFile     = "consoles.json"
	AddrFile         = "supervisor.addr"
)

// A ModeError says that path is too open or owned by someone else, and how to fix it.
type ModeError struct {
	Path string
	Mode fs.FileMode
	Why  string // "is group- or world-accessible", "is owned by uid 1001", "is not a regular file"
	Fix  string // the command that fixes it
}

func (e *ModeError) Error() string {
	s := fmt.Sprintf("%s %s (mode %04o)", e.Path, e.Why, e.Mode.Perm())
	if e.Fix != "" {
		s += "; fix: " + e.Fix
	}
	return s
}

// EnsureDir makes sure path is a private folder: created 0700 (parents too) when missing; when it
// exists, CheckDir must accept it.
func EnsureDir(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(path, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		// MkdirAll honours the umask; make the mode exact on what we just made.
		if err := os.Chmod(path, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	return CheckDir(path)
}

// CheckDir is the rule for a private folder such as <stateHome>/fleet: an existing folder of ours
// with no group or world bits (0700). It changes nothing; a missing folder is an error that
// matches fs.ErrNotExist.
func CheckDir(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return &ModeError{Path: path, Mode: st.Mode(), Why: "is not a folder", Fix: "move it out of the way"}
	}
	return checkOwnerAndMode(path, st, "chmod 700 "+path)
}

// EnsureHome makes sure <stateHome> exists: created 0700 (parents too) when missing; when it
// exists, CheckHome must accept it.
func EnsureHome(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return EnsureDir(path)
	}
	return CheckHome(path)
}

// CheckHome is the one rule for <stateHome>, for whoever starts from it (fleet serve) and whoever
// judges it (fleet doctor): an existing folder of ours that neither group nor world can write. It
// may be shared with other tools, so reading and searching by others is fine (0755): the secrets
// live in <stateHome>/fleet, which CheckDir holds to 0700. Writing is not: whoever can write it
// can swap that private folder. It changes nothing; a missing folder is an error that matches
// fs.ErrNotExist.
func CheckHome(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return &ModeError{Path: path, Mode: st.Mode(), Why: "is not a folder", Fix: "move it out of the way"}
	}
	if err := checkOwner(path, st); err != nil {
		return err
	}
	if st.Mode().Perm()&0o022 != 0 {
		return &ModeError{Path: path, Mode: st.Mode(), Why: "is group- or world-writable", Fix: "chmod go-w " + path}
	}
	return nil
}

// CheckFile makes sure an existing path is a regular file of ours with no group or world bits.
// It judges the path as it is now (Lstat): to read such a file, use ReadPrivateFile, which judges
// the file it opened instead.
func CheckFile(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return checkPrivateFile(path, st)
}

// checkPrivateFile is the rule of CheckFile, on st (an Lstat of path, or the fstat of it opened).
func checkPrivateFile(path string, st fs.FileInfo) error {
	if !st.Mode().IsRegular() {
		return &ModeError{Path: path, Mode: st.Mode(), Why: "is not a regular file", Fix: "move it out of the way"}
	}
	return checkOwnerAndMode(path, st, "chmod 600 "+path)
}

func checkOwner(path string, st fs.FileInfo) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return &ModeError{Path: path, Mode: st.Mode(), Why: fmt.Sprintf("is owned by uid %d, not by this user (uid %d)", sys.Uid, os.Geteuid()),
			Fix: fmt.Sprintf("chown %d %s", os.Geteuid(), path)}
	}
	return nil
}

func checkOwnerAndMode(path string, st fs.FileInfo, fix string) error {
	if err := checkOwner(path, st); err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return &ModeError{Path: path, Mode: st.Mode(), Why: "is group- or world-accessible", Fix: fix}
	}
	return nil
}

// ReadPrivateFile reads path, a regular file of ours with no group or world bits (the rule of
// CheckFile). The rule is applied to the file actually read, not to the path before it is opened:
// the file is opened without following a symlink (O_NOFOLLOW) and without blocking on a FIFO
// (O_NONBLOCK), and judged by the fstat of that descriptor, which it is then read from. So a
// symlink or another file swapped in at the path between a check and the read is never read. A
// symlink at the path is the same ModeError "is not a regular file" as CheckFile's; a missing file
// is an error that matches fs.ErrNotExist.
func ReadPrivateFile(path string) ([]byte, error) {
	data, _, err := readPrivate(path)
	return data, err
}

// readPrivate is ReadPrivateFile, and the stat of the file it read, taken before its bytes were
// read (so a write in place after that changes the file's stamp again).
func readPrivate(path string) ([]byte, fs.FileInfo, error) {
	f, st, err := OpenPrivateFile(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	return data, st, nil
}

// OpenPrivateFile opens path as ReadPrivateFile reads it, judged by the same rule, and returns
// the open file, positioned at its start, with its fstat taken before anything is read. A reader
// that keeps it open can ask it later, with one fstat and no lookup of the path, whether path was
// written again: every write of a state file renames a new file over it (WriteFileAtomic), which
// unlinks this one (its link count falls, its change time moves).
func OpenPrivateFile(path string) (*os.File, fs.FileInfo, error) {
	f, err := openPrivate(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil {
		err = checkPrivateFile(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// openPrivate opens path for reading without following a symlink at path and without blocking
// (a FIFO opens at once, and is then refused by its fstat). When the open itself fails, path is
// judged by its Lstat for a clearer error (a symlink, a socket, someone else's file): that answer
// only names what is wrong, it never lets anything be read.
func openPrivate(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err == nil {
		return f, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if cerr := CheckFile(path); cerr != nil && !errors.Is(cerr, fs.ErrNotExist) {
		return nil, cerr
	}
	if errors.Is(err, syscall.ELOOP) {
		// O_NOFOLLOW met a symlink that is gone again by the Lstat: still not a regular file.
		return nil, &ModeError{Path: path, Mode: fs.ModeSymlink, Why: "is not a regular file", Fix: "move it out of the way"}
	}
	return nil, err
}

// WritePrivateFile writes data to path like WriteFileAtomic, after checking an existing path with
// CheckFile: a file that is too open or someone else's is refused (F1), never silently replaced by
// a private one. Every file fleet replaces in its state folder is written through it.
func WritePrivateFile(path string, data []byte) error {
	if err := CheckFile(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return WriteFileAtomic(path, data)
}

// WriteFileAtomic writes data to path with mode 0600: temporary file in the same folder, fsync,
// rename, fsync of the folder. On any error the old file (if any) is untouched.
func WriteFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	hook("temp-written", path)
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	ok = true
	hook("renamed", path)
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
