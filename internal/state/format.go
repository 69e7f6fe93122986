package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Versioned state files (SPEC O5). Every JSON state file fleet writes — consoles.json, the
// pairing folder's devices.json and codes.json — is an object whose top-level integer "format"
// says how the rest is laid out. The rules, the same for every such file, live here:
//
//   - A file without "format" is LegacyFormat: every file written before files carried one.
//   - A file of a newer format than this fleet writes is refused with a *NewerFormatError, which
//     names the file and both formats; nothing is written, so the newer fleet finds its file
//     as it left it.
//   - A file of an older format is read as it is: reading never writes (fleet doctor and the
//     listing commands only read, and a newer CLI beside an older running supervisor must not
//     change the supervisor's files under it). The first time fleet writes it, WriteUpgraded
//     keeps the old file, once, as <name>.v<N>.bak (0600), then replaces it atomically in the
//     current format.
//
// How one format's fields become the next's is each file's owner's business (supervisor,
// pairing); what a format number is, and what happens to a file of each, is this package's.

// LegacyFormat is the format of a file that carries no "format".
const LegacyFormat = 1

// A NewerFormatError says that a state file was written by a newer fleet, in a format this one
// does not read.
type NewerFormatError struct {
	Path   string
	Format int // the file's
	Newest int // the newest this fleet reads (the one it writes)
}

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("%s is format %d, newer than this fleet reads (format %d): run the newer fleet that wrote it, or move the file away; it was left as it is",
		e.Path, e.Format, e.Newest)
}

// FormatOf returns the format of the JSON state file at path whose bytes are data: the integer
// at its top-level "format", LegacyFormat when there is none. newest is the format this fleet
// writes: a file of a newer one is a *NewerFormatError. The key is matched as encoding/json
// matches a field's name (case-insensitively), so that the format judged is the one the file's
// decoder would see; a second such key, a value that is not a whole number from 1 up, or data
// that is not one JSON object is an error (the caller's decoder would name it better: callers
// report it as the file not parsing).
func FormatOf(path string, data []byte, newest int) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, errors.New("not a JSON object")
	}
	format, seen := LegacyFormat, false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, err
		}
		key, _ := tok.(string)
		if !strings.EqualFold(key, "format") {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return 0, err
			}
			continue
		}
		if seen {
			return 0, errors.New(`"format" is there twice`)
		}
		seen = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return 0, err
		}
		v, err := strconv.Atoi(string(raw))
		if err != nil || v < 1 || v > 1<<30 || string(raw) != strconv.Itoa(v) {
			return 0, fmt.Errorf(`"format" %.20s: want a whole number from 1`, raw)
		}
		format = v
	}
	if format > newest {
		return format, &NewerFormatError{Path: path, Format: format, Newest: newest}
	}
	return format, nil
}

// CheckFormat refuses the JSON state file at path when it is of a format newer than newest (a
// *NewerFormatError). It only reads, and only judges the format: a missing file, or one that
// cannot be read or does not parse, is no error here — its owner reports that when it loads it.
// `fleet serve` runs it on every versioned file before it changes anything.
func CheckFormat(path string, newest int) error {
	data, err := ReadPrivateFile(path)
	if err != nil {
		return nil
	}
	var newer *NewerFormatError
	if _, err := FormatOf(path, data, newest); errors.As(err, &newer) {
		return err
	}
	return nil
}

// BackupName is where WriteUpgraded keeps a file of format from: <path>.v<from>.bak.
func BackupName(path string, from int) string { return fmt.Sprintf("%s.v%d.bak", path, from) }

// WriteUpgraded writes data, a file in the current format, over path, a file of the older format
// from: first it keeps the file as it is now as BackupName(path, from), 0600, written atomically —
// unless a backup of that name is there already, which is kept: the old file is kept once —, then
// it replaces path as WritePrivateFile does. A kill at any moment leaves path whole, old or new
// (and at most a temporary file, which RemoveWriteLeftovers clears); a failure to keep the backup
// leaves path untouched. A missing path is simply written.
func WriteUpgraded(path string, from int, data []byte) error {
	old, err := ReadPrivateFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return WritePrivateFile(path, data)
	case err != nil:
		return err
	}
	bak := BackupName(path, from)
	if _, err := os.Lstat(bak); errors.Is(err, fs.ErrNotExist) {
		if err := WriteFileAtomic(bak, old); err != nil {
			return fmt.Errorf("keep %s before upgrading it: %w", path, err)
		}
		hook("backup-kept", bak)
	} else if err != nil {
		return fmt.Errorf("keep %s before upgrading it: %w", path, err)
	}
	return WritePrivateFile(path, data)
}

// testHook, when set by a test, is called at the named moments of a write (see hook).
var testHook func(moment, path string)

// hook calls testHook: the kill -9 tests stop the process at these moments.
func hook(moment, path string) {
	if testHook != nil {
		testHook(moment, path)
	}
}
