package pairing

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/phase-console/fleet/access"
)

// TestPairedConsoles_G1: the consoles a code is issued for are the paired device's, kept in the
// register across reloads and listed with it; a code issued without a list (the default) gives
// every console.
func TestPairedConsoles_G1(t *testing.T) {
	e := newPageEnv(t)
	limited, err := access.ParseList("alpha,Build-*")
	if err != nil {
		t.Fatal(err)
	}
	code, err := IssueCodeFor(e.dir, "Ann's phone", limited, e.clock())
	if err != nil {
		t.Fatal(err)
	}
	e.secret(code)
	if r := e.post(code, testPassword, "", nil); r.status != http.StatusSeeOther {
		t.Fatalf("pairing: %d %s", r.status, r.body)
	}
	e.advance(1)
	if r := e.post(e.issue("Kitchen tablet"), testPassword, "", nil); r.status != http.StatusSeeOther {
		t.Fatalf("pairing: %d", r.status)
	}
	check := func(devs []Device) {
		t.Helper()
		if len(devs) != 2 {
			t.Fatalf("devices %+v", devs)
		}
		if got := devs[0].Consoles.String(); got != "alpha,build-*" {
			t.Errorf("the limited device may open %q", got)
		}
		if !devs[0].Consoles.Allows("build-7") || devs[0].Consoles.Allows("beta") {
			t.Errorf("the limited device's grant %v", devs[0].Consoles)
		}
		if got := devs[1].Consoles.String(); got != "*" {
			t.Errorf("the default device may open %q", got)
		}
	}
	check(e.reg.Devices())
	listed, err := ListDevices(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	check(listed)
	b, _ := os.ReadFile(filepath.Join(e.dir, DevicesFile))
	if !regexp.MustCompile(`"consoles": \[\s*"alpha",\s*"build-\*"\s*\]`).Match(b) {
		t.Errorf("register file %s", b)
	}
}

// TestStoredConsoles_G1: a device stored without a list (paired before lists) may open every
// console; one whose list holds something that is not a pattern makes the file one that does not
// parse (F2), believed for no device; an empty list opens nothing.
func TestStoredConsoles_G1(t *testing.T) {
	dir := reachDir(t)
	d, _, err := RegisterDeviceFor(dir, "none", access.Nothing, t0)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := ListDevices(dir)
	if err != nil || len(devs) != 1 || !devs[0].Consoles.Empty() || devs[0].Consoles.Allows("alpha") {
		t.Fatalf("a device paired for nothing: %+v, %v", devs, err)
	}
	path := filepath.Join(dir, DevicesFile)
	b, _ := os.ReadFile(path)
	old := regexp.MustCompile(`,\s*"consoles": \[\]`).ReplaceAllString(string(b), "")
	if old == string(b) {
		t.Fatalf("no consoles in %s", b)
	}
	os.WriteFile(path, []byte(old), 0o600)
	if devs, err := ListDevices(dir); err != nil || devs[0].ID6 != d.ID6 || devs[0].Consoles.String() != "*" {
		t.Errorf("a device stored without a list: %+v, %v", devs, err)
	}
	bad := strings.Replace(string(b), `"consoles": []`, `"consoles": ["al*pha"]`, 1)
	os.WriteFile(path, []byte(bad), 0o600)
	if _, err := ListDevices(dir); err == nil || !strings.Contains(err.Error(), "consoles") {
		t.Errorf("a bad pattern in the register: %v", err)
	}
	if _, err := OpenRegister(dir); err == nil {
		t.Error("a register with a bad pattern opened")
	}
}
