package state_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testdirs"
)

// TestCheckSocketPlace_S5e: the unix door's socket may sit only where its owner alone reaches
// it: not below /tmp (every Tailscale SSH login may forward there), not below a folder that
// others can write, sticky bit or not, whether the path is given or reached through a symlink;
// folders still to be made are fine.
func TestCheckSocketPlace_S5e(t *testing.T) {
	private := testdirs.Private(t)
	tmp, err := os.MkdirTemp("/tmp", "fleet-place-")
	if err != nil {
		t.Skipf("no /tmp here: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	open := filepath.Join(private, "open")
	sticky := filepath.Join(private, "sticky")
	for _, d := range []string{open, sticky} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(open, 0o777)
	os.Chmod(sticky, 0o1777)
	toTmp := filepath.Join(private, "to-tmp")
	if err := os.Symlink(tmp, toTmp); err != nil {
		t.Fatal(err)
	}
	for _, row := range []struct{ name, path, want string }{
		{"S5e private, folders to make", filepath.Join(private, "a", "b", "s.sock"), ""},
		{"S5e below /tmp", filepath.Join(tmp, "s.sock"), "below /tmp"},
		{"S5e /tmp itself", "/tmp/s.sock", "below /tmp"},
		{"S5e below /tmp through a symlink", filepath.Join(toTmp, "run", "s.sock"), "below /tmp"},
		{"S5e below a world-writable folder", filepath.Join(open, "run", "s.sock"), "written by others"},
		{"S5e below a sticky world-writable folder", filepath.Join(sticky, "s.sock"), "written by others"},
		{"S5e relative", "run/s.sock", "absolute"},
	} {
		err := state.CheckSocketPlace(row.path)
		switch {
		case row.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", row.name, err)
		case row.want != "" && (err == nil || !strings.Contains(err.Error(), row.want)):
			t.Errorf("%s: %v, want an error saying %q", row.name, err, row.want)
		}
	}
}
