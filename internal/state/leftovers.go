package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RemoveWriteLeftovers removes, in dir and every folder below it, the temporary files that an
// interrupted WriteFileAtomic left behind (".<name>.tmp-<digits>": a crash or a kill between
// the temporary file's creation and its rename) whose last change is before olderThan. The file
// each would have replaced is untouched: it is the old one, whole. olderThan keeps a write in
// progress in another process (a CLI command beside a starting supervisor) from losing its file;
// a write takes milliseconds. Nothing else is removed, symbolic links are not followed, and a
// folder that does not exist is no error. removed names the files removed.
func RemoveWriteLeftovers(dir string, olderThan time.Time) (removed []string, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if !d.Type().IsRegular() || !IsWriteLeftover(d.Name()) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone already
		}
		if !info.ModTime().Before(olderThan) {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed = append(removed, path)
		return nil
	})
	return removed, err
}

// IsWriteLeftover reports whether name is a temporary file's of WriteFileAtomic:
// "." + the file's name + ".tmp-" + the digits os.CreateTemp chose.
func IsWriteLeftover(name string) bool {
	i := strings.LastIndex(name, ".tmp-")
	if !strings.HasPrefix(name, ".") || i < 2 {
		return false
	}
	digits := name[i+len(".tmp-"):]
	if digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
