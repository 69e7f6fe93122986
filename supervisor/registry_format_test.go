package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

// installRegistry copies testdata/formats/<fixture> into a fresh private folder as consoles.json,
// 0600, and returns its path and the fixture's bytes.
func installRegistry(t *testing.T, fixture string) (path string, data []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "formats", fixture))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := state.EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, state.RegistryFile)
	if err := state.WriteFileAtomic(path, data); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// TestRegistryFormat1Upgraded_O5: a consoles.json of format 1 (today's file: no "format", byte
// for byte what a format-1 fleet wrote) loads with every console, and loading changes nothing;
// the first change keeps the old file as consoles.json.v1.bak (0600) and writes format 2, which
// loads as the same registry; a later change keeps that first backup.
func TestRegistryFormat1Upgraded_O5(t *testing.T) {
	path, old := installRegistry(t, "consoles-format1.json")
	var legacy struct {
		Consoles []Console `json:"consoles"`
	}
	if err := json.Unmarshal(old, &legacy); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.MarshalIndent(legacy, "", "  "); !bytes.Equal(append(again, '\n'), old) {
		t.Fatalf("the fixture is not as format 1 wrote it:\n%s", again)
	}
	now := func() time.Time { return time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC) }
	r, err := LoadRegistry(path, now)
	if err != nil {
		t.Fatal(err)
	}
	r.dial = func(context.Context, string) error { return errors.New("no console in this test") }
	if c, ok := r.Get("alpha"); !ok || c.Addr != "127.0.0.1:9001" || c.Name != "Alpha" {
		t.Fatalf("alpha from the format-1 file: %+v %v", c, ok)
	}
	if _, ok := r.Get("build-7"); !ok {
		t.Fatal("build-7 from the format-1 file is missing")
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, old) {
		t.Fatalf("loading changed the file:\n%s", b)
	}
	if _, err := os.Lstat(state.BackupName(path, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a backup after loading only: %v", err)
	}
	if _, err := r.Put(Console{ID: "beta", Addr: "127.0.0.1:9002", Name: "Beta"}); err != nil {
		t.Fatal(err)
	}
	r.probes.Wait()
	wantRegistryUpgraded(t, path, old)
	r2, err := LoadRegistry(path, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(r2.snapshot()) != 3 || r2.fileFormat != RegistryFormat {
		t.Fatalf("the upgraded file loads as %v (format %d)", r2.snapshot(), r2.fileFormat)
	}
	if _, err := r.Delete("alpha"); err != nil {
		t.Fatal(err)
	}
	wantRegistryUpgraded(t, path, old)
}

func wantRegistryUpgraded(t *testing.T, path string, old []byte) {
	t.Helper()
	now, _ := os.ReadFile(path)
	if !bytes.HasPrefix(now, []byte("{\n  \"format\": 2,\n  \"consoles\": [")) {
		t.Errorf("%s after the change:\n%s\nwant format 2 first", path, now)
	}
	bak := state.BackupName(path, 1)
	got, err := os.ReadFile(bak)
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("%s: %v, holds\n%s\nwant the format-1 file", bak, err, got)
	}
	if st, _ := os.Stat(bak); st.Mode().Perm() != 0o600 {
		t.Errorf("%s is %04o, want 0600", bak, st.Mode().Perm())
	}
}

// TestRegistryNewerFormatRefused_O5: a consoles.json of a newer format is refused by
// LoadRegistry and CheckRegistryFormat with one line naming
// the file and both formats; the file is left byte for byte and nothing else is written beside it.
func TestRegistryNewerFormatRefused_O5(t *testing.T) {
	path, data := installRegistry(t, "consoles-format3.json")
	check := func(what string, err error) {
		t.Helper()
		var newer *state.NewerFormatError
		if !errors.As(err, &newer) || newer.Format != 3 || newer.Newest != RegistryFormat {
			t.Fatalf("%s: %v, want a NewerFormatError", what, err)
		}
		msg := err.Error()
		for _, part := range []string{path, "format 3", "format 2"} {
			if !strings.Contains(msg, part) {
				t.Errorf("%s: %q does not name %q", what, msg, part)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: %q is more than one line", what, msg)
		}
	}
	check("CheckRegistryFormat", CheckRegistryFormat(path))
	_, err := LoadRegistry(path, nil)
	check("LoadRegistry", err)
	if b, _ := os.ReadFile(path); !bytes.Equal(b, data) {
		t.Fatalf("the file changed:\n%s", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the folder holds %v, want only consoles.json", entries)
	}
	if err := CheckRegistryFormat(filepath.Join(t.TempDir(), "none.json")); err != nil {
		t.Errorf("CheckRegistryFormat of no file: %v", err)
	}
}
