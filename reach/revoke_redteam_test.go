package reach

// Red-team tests of revocation on the door: the register's file going bad, then good again.

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/phase-console/fleet/pairing"
)

// TestRegisterBadThenGoodBelievesDeviceAgain_R8: while devices.json does not parse, no device is
// believed and their live connections end (fail closed); once the file is good again, its
// devices are believed again (pairing.Register's promise). The door remembered every id6 it was
// told of as revoked for as long as it stayed open, so a moment's bad file — an operator's edit,
// a restore — locked every phone out until the door was closed and opened again: each of its
// requests was sent to /pair although the register believed it.
func TestRegisterBadThenGoodBelievesDeviceAgain_R8(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("phone")
	if res := d.raw(d.req("GET", "/c/alpha/", cookie)); res.status != http.StatusOK {
		t.Fatalf("before: status %d %s, want 200", res.status, res.reason)
	}
	path := filepath.Join(d.reachDir, pairing.DevicesFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := d.raw(d.req("GET", "/c/alpha/", cookie)); res.status != http.StatusSeeOther {
		t.Fatalf("file bad: status %d %s, want 303 to /pair (no device believed)", res.status, res.reason)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.register.Refresh(); err != nil {
		t.Fatal(err)
	}
	if res := d.raw(d.req("GET", "/c/alpha/", cookie)); res.status != http.StatusOK {
		t.Errorf("file good again: status %d %s, want 200: the register believes the device, the door does not", res.status, res.reason)
	}
}
