package state

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// TestRemoveWriteLeftovers_F2: the temporary files of interrupted atomic writes are removed, in
// the folder and below it, once they are old enough; the files they would have replaced, a write
// still in progress, files of other names and symbolic links are left alone.
func TestRemoveWriteLeftovers_F2(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	write := func(rel string, stale bool) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if stale {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	gone := []string{
		write(".devices.json.tmp-123456", true),
		write(".codes.json.tmp-9", true),
		write("tls/certificates/.leaf.pem.tmp-42", true),
	}
	kept := []string{
		write("devices.json", true),
		write(".devices.json.tmp-777", false), // a write in progress
		write(".devices.json.tmp-", true),
		write(".devices.json.tmp-12x", true),
		write("devices.json.tmp-12", true), // not a hidden temporary
		write(".tmp-12", true),
	}
	outside := write("../outside/.x.tmp-1", true)
	link := filepath.Join(dir, ".link.tmp-5")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, link, outside)

	removed, err := RemoveWriteLeftovers(dir, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(removed)
	sort.Strings(gone)
	if len(removed) != len(gone) {
		t.Errorf("removed %q, want %q", removed, gone)
	}
	for _, p := range gone {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	// Later, the write in progress is a leftover too; a link of a leftover's name never is.
	if removed, err := RemoveWriteLeftovers(dir, time.Now().Add(time.Hour)); err != nil || len(removed) != 1 || removed[0] != kept[1] {
		t.Errorf("an hour later: removed %q %v, want only %s", removed, err, kept[1])
	}
	for _, p := range []string{link, outside} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if removed, err := RemoveWriteLeftovers(filepath.Join(dir, "none"), time.Now()); err != nil || len(removed) != 0 {
		t.Errorf("a folder that does not exist: %q %v", removed, err)
	}
}
