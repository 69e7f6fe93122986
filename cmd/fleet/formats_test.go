package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/state"
)

// folderSnapshot is every file below root with its bytes and mode.
func folderSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		info, _ := d.Info()
		b, _ := os.ReadFile(p)
		out[p] = info.Mode().String() + " " + string(b)
		return nil
	})
	return out
}

// TestServeRefusesNewerFormat_O5: fleet serve meeting a consoles.json, devices.json or codes.json
// of a newer format refuses to start with one line that names the file and both formats, and
// changes nothing in the state folder: no lock, no token, no address, the file as it was.
func TestServeRefusesNewerFormat_O5(t *testing.T) {
	for _, row := range []struct{ name, file, body string }{
		{"O5 consoles.json", "consoles.json", `{"format":3,"consoles":[]}`},
		{"O5 devices.json", "reach/devices.json", `{"format":7,"devices":[],"keys":{}}`},
		{"O5 codes.json", "reach/codes.json", `{"format":3,"codes":[]}`},
	} {
		t.Run(row.name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "state")
			path := filepath.Join(state.FleetDir(home), row.file)
			if err := state.EnsureHome(home); err != nil {
				t.Fatal(err)
			}
			if err := state.EnsureDir(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
			if err := state.WriteFileAtomic(path, []byte(row.body+"\n")); err != nil {
				t.Fatal(err)
			}
			before := folderSnapshot(t, home)
			st, out, errs := runFleet("serve", "--state-dir", home, "--port", "1", "--tailscaled-uid", "0",
				"--tailscale-socket", filepath.Join(t.TempDir(), "none.sock"))
			if st != 1 || out != "" {
				t.Fatalf("fleet serve: status %d, stdout %q, stderr %q; want 1 and nothing on stdout", st, out, errs)
			}
			lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
			want := strings.TrimPrefix(strings.SplitN(row.body, ",", 2)[0], `{"format":`)
			if len(lines) != 1 || !strings.Contains(errs, path) || !strings.Contains(errs, "format "+want) || !strings.Contains(errs, "format 2") {
				t.Fatalf("fleet serve said %q; want one line naming %s, format %s and format 2", errs, path, want)
			}
			after := folderSnapshot(t, home)
			if len(after) != len(before) {
				t.Errorf("the state folder changed: %d entries before, %d after", len(before), len(after))
			}
			for p, v := range before {
				if after[p] != v {
					t.Errorf("%s changed", p)
				}
			}
		})
	}
}
