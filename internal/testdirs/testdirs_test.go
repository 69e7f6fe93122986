package testdirs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/state"
)

// TestMakeIn_S5e: a Private folder is made only where the socket rule admits it, and only where
// a socket path below it still fits the kernel's limit.
func TestMakeIn_S5e(t *testing.T) {
	tmp, err := os.MkdirTemp("/tmp", "fleet-testdirs-")
	if err != nil {
		t.Skipf("no /tmp here: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	for _, row := range []struct{ name, base, want string }{
		{"S5e below /tmp", tmp, "below /tmp"},
		{"relative", "rel", "absolute"},
		{"too long", "/" + strings.Repeat("d", maxSocketPath), "too long"},
	} {
		if dir, why := makeIn(row.base); dir != "" || !strings.Contains(why, row.want) {
			t.Errorf("%s: makeIn(%s) = %q, %q; want a refusal saying %q", row.name, row.base, dir, why, row.want)
		}
	}
}

// TestPrivate_S5e: the folder Private gives is one the rule admits, with room for a socket.
func TestPrivate_S5e(t *testing.T) {
	dir := Private(t)
	t.Logf("Private gave %s", dir)
	sock := filepath.Join(dir, "anc", "run", "serve.sock")
	if err := state.CheckSocketPlace(sock); err != nil {
		t.Errorf("Private gave %s, which the rule refuses: %v", dir, err)
	}
	if len(filepath.Join(dir, strings.Repeat("s", roomBelow-1))) > maxSocketPath {
		t.Errorf("Private gave %s, too long for %d more bytes", dir, roomBelow)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("Private gave %s: %v, %v; want a 0700 folder", dir, st, err)
	}
}
