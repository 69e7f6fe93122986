package supervisor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzLoadRegistry: whatever consoles.json holds, LoadRegistry never panics; a file it refuses
// is an error that names it; in a registry it accepts every console passes ValidateConsole (S8)
// under its own id — so no route leads off the machine — and written back as the supervisor writes
// it, the file loads again as the same registry. The seed corpus is in
// testdata/fuzz/FuzzLoadRegistry.
func FuzzLoadRegistry(f *testing.F) {
	f.Add([]byte(`{"consoles":[{"id":"alpha","addr":"127.0.0.1:9001","name":"Alpha","registered":"2026-11-30T12:00:00Z"}]}`))
	dir := f.TempDir() // one per process: the fuzz function runs one input at a time in it
	now := func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "consoles.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := LoadRegistry(path, now)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("refused with %q, which does not name %s", err, path)
			}
			return
		}
		for id, c := range r.snapshot() {
			if err := ValidateConsole(c); err != nil || c.ID != id {
				t.Fatalf("accepted console %q under id %q: %v", c.ID, id, err)
			}
		}
		// Written back as Put writes it, it loads as the same registry.
		var written []byte
		r.write = func(_ string, b []byte) error { written = bytes.Clone(b); return nil }
		if err := r.save(r.snapshot()); err != nil {
			t.Fatalf("an accepted registry cannot be written back: %v", err)
		}
		again := filepath.Join(dir, "again.json")
		if err := os.WriteFile(again, written, 0o600); err != nil {
			t.Fatal(err)
		}
		r2, err := LoadRegistry(again, now)
		if err != nil {
			t.Fatalf("written back, it does not load: %v\n%s", err, written)
		}
		if a, b := registryJSON(t, r), registryJSON(t, r2); !bytes.Equal(a, b) {
			t.Fatalf("written back, it loads as\n%s\nwant\n%s", b, a)
		}
	})
}

// registryJSON is r's consoles as JSON, in id order (json sorts map keys).
func registryJSON(t *testing.T, r *Registry) []byte {
	t.Helper()
	b, err := json.Marshal(r.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
