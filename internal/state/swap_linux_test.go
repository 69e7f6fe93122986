//go:build linux

package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadPrivateFileNeverThroughASwappedSymlink_C1_F1: whoever can write the folder swaps the
// private file with a symlink to a file of their choosing, back and forth (renameat2
// RENAME_EXCHANGE), while it is read. A check of the path followed by a read of the path (Lstat,
// then a read that follows symlinks) reads the planted file whenever the swap lands between the
// two; reading judges the file it opened instead, so every read gives the real file or a refusal
// ("is not a regular file"), never the planted one. The planted file here is even one that the
// rule itself would accept (ours, 0600): only the symlink stands between it and the read.
func TestReadPrivateFileNeverThroughASwappedSymlink_C1_F1(t *testing.T) {
	dir := privateDir(t)
	real, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	planted, _ := NewToken()
	path := filepath.Join(dir, TokenFile)
	plantedPath, sym := filepath.Join(dir, ".planted"), filepath.Join(dir, ".sym")
	if err := os.WriteFile(plantedPath, []byte(planted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(plantedPath, sym); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	swapErr := make(chan error, 1)
	go func() {
		var err error
		for !stop.Load() && err == nil {
			err = unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, sym, unix.RENAME_EXCHANGE)
		}
		if st, lerr := os.Lstat(path); err == nil && lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			err = unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, sym, unix.RENAME_EXCHANGE)
		}
		swapErr <- err
	}()

	good, refused := 0, 0
	deadline := time.Now().Add(5 * time.Second)
	for (good < 200 || refused < 200) && time.Now().Before(deadline) {
		tok, err := ReadToken(path)
		var me *ModeError
		switch {
		case err == nil && tok == real:
			good++
		case err == nil:
			stop.Store(true)
			t.Fatalf("read the planted file through the symlink swapped in at %s", path)
		case errors.As(err, &me) && me.Path == path && strings.Contains(err.Error(), "is not a regular file") && strings.Contains(err.Error(), "move it out of the way"):
			refused++
		default:
			stop.Store(true)
			t.Fatalf("read during the swaps: %v; want the real token or a ModeError naming %s", err, path)
		}
	}
	stop.Store(true)
	if err := <-swapErr; err != nil {
		t.Fatalf("renameat2: %v", err)
	}
	if refused == 0 || good == 0 {
		t.Fatalf("the swaps never raced the reads (%d good reads, %d refused): nothing was shown", good, refused)
	}
	if tok, err := ReadToken(path); err != nil || tok != real {
		t.Fatalf("the real file back in place: %v", err)
	}
}
