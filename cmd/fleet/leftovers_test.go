package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

// TestServeRemovesWriteLeftovers_F2: the temporary files that interrupted atomic writes left in
// the door's folder (a kill between a temporary file's creation and its rename) are gone once
// fleet serve has started, each named in one log line; the files they would have replaced are
// as they were.
func TestServeRemovesWriteLeftovers_F2(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	dir := pairingFolder(home)
	if err := state.EnsureHome(home); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{state.FleetDir(home), dir, filepath.Join(dir, "tls")} {
		if err := state.EnsureDir(d); err != nil {
			t.Fatal(err)
		}
	}
	devices := filepath.Join(dir, "devices.json")
	if err := state.WritePrivateFile(devices, []byte(`{"version":1,"devices":[]}`+"\n")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	var leftovers []string
	for _, p := range []string{filepath.Join(dir, ".devices.json.tmp-3141592"), filepath.Join(dir, "tls", ".root.pem.tmp-27")} {
		if err := os.WriteFile(p, []byte("half a fi"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		leftovers = append(leftovers, p)
	}
	rs := startServe(t, home, "json")
	for _, p := range leftovers {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there after fleet serve started: %v", p, err)
		}
		if !strings.Contains(rs.stderr.String(), `"msg":"fleet.write-leftover-removed","path":"`+p+`"`) {
			t.Errorf("no log line names %s:\n%s", p, rs.stderr)
		}
	}
	if b, err := os.ReadFile(devices); err != nil || string(b) != `{"version":1,"devices":[]}`+"\n" {
		t.Errorf("devices.json: %q %v, want it as it was", b, err)
	}
}
