package pairing

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/state"
)

// installFixture copies testdata/formats/<fixture> into a fresh pairing folder as name, 0600,
// and returns the folder and the fixture's bytes.
func installFixture(t *testing.T, fixture, name string) (dir string, data []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "formats", fixture))
	if err != nil {
		t.Fatal(err)
	}
	dir = reachDir(t)
	if err := state.EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := state.WriteFileAtomic(filepath.Join(dir, name), data); err != nil {
		t.Fatal(err)
	}
	return dir, data
}

// wantUpgraded fails unless dir/name is now of format fileVersion (and says so first) and
// dir/name.v1.bak holds old, 0600.
func wantUpgraded(t *testing.T, dir, name string, old []byte) {
	t.Helper()
	path := filepath.Join(dir, name)
	now, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(now, []byte("{\n  \"format\": 2,\n")) || bytes.Contains(now, []byte(`"version"`)) {
		t.Errorf("%s after the write:\n%s\nwant format 2 first, and no version", path, now)
	}
	bak := path + ".v1.bak"
	got, err := os.ReadFile(bak)
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("%s: %v, holds\n%s\nwant the format-1 file as it was:\n%s", bak, err, got, old)
	}
	if st, _ := os.Stat(bak); st.Mode().Perm() != 0o600 {
		t.Errorf("%s is %04o, want 0600", bak, st.Mode().Perm())
	}
}

// TestFixturesAreFormat1 checks the fixtures: each is, byte for byte, what a fleet of format 1
// wrote (its struct, indented as writeJSON indents), so the tests below read real old files.
func TestFixturesAreFormat1_O5(t *testing.T) {
	for fixture, v := range map[string]any{"devices-format1.json": &devicesFileV1{}, "codes-format1.json": &codesFileV1{}} {
		data, err := os.ReadFile(filepath.Join("testdata", "formats", fixture))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatal(err)
		}
		again, _ := json.MarshalIndent(v, "", "  ")
		if !bytes.Equal(append(again, '\n'), data) {
			t.Errorf("%s is not as format 1 wrote it:\n%s", fixture, again)
		}
	}
}

// TestDevicesFormat1Upgraded_O5: a register of format 1 (today's file: "version": 1, no
// "format") is read as it is — every device, its consoles, the revoked id6 — and listing it or
// opening it changes nothing on disk; the first write (a device's last seen) keeps the old file
// as devices.json.v1.bak and writes format 2, which reads as the same register; later writes (a
// new device, a revocation) keep that first backup.
func TestDevicesFormat1Upgraded_O5(t *testing.T) {
	dir, old := installFixture(t, "devices-format1.json", DevicesFile)
	path := filepath.Join(dir, DevicesFile)
	same := fileUnchanged(t, path)
	list, err := ListDevices(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID6 != "abcdef" || list[0].Name != "Ann's phone" || list[1].ID6 != "bcdefg" {
		t.Fatalf("ListDevices = %+v", list)
	}
	if got := list[0].Consoles.Patterns(); !slices.Equal(got, []string{"alpha", "build-*"}) {
		t.Errorf("Ann's consoles: %v", got)
	}
	if list[1].Consoles != access.Everything && !list[1].Consoles.Allows("anything") {
		t.Errorf("Bob's consoles (none stored: every console): %v", list[1].Consoles.Patterns())
	}
	r, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.WaitWrites)
	same()
	wantNoBackup(t, path)
	// Ann's credential is believed from the format-1 register; its last seen is the first write.
	if d, ok := r.Authenticate(strings.Repeat("A", 43), time.Date(2026, 12, 1, 8, 31, 0, 0, time.UTC), "192.168.1.20:1"); !ok || d.ID6 != "abcdef" {
		t.Fatalf("Ann's credential from the format-1 register: %+v %v", d, ok)
	}
	r.WaitWrites()
	wantUpgraded(t, dir, DevicesFile, old)

	d, _, err := RegisterDeviceFor(dir, "Cy's laptop", access.Everything, t0.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.ID6 == "zzzzzz" {
		t.Fatal("a revoked id6 of the format-1 file was given again")
	}
	wantUpgraded(t, dir, DevicesFile, old)
	f, err := readDevices(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Devices) != 3 || !slices.Equal(f.Revoked, []string{"zzzzzz"}) || f.read != fileVersion {
		t.Fatalf("the upgraded register: %+v", f)
	}
	if err := RevokeDevice(dir, "bcdefg"); err != nil {
		t.Fatal(err)
	}
	wantUpgraded(t, dir, DevicesFile, old)
	if _, ok := r.Authenticate(strings.Repeat("A", 43), time.Date(2026, 12, 1, 8, 32, 0, 0, time.UTC), "x"); !ok {
		t.Fatal("Ann is not believed from the upgraded register")
	}
	if _, ok := r.Authenticate(strings.Repeat("B", 43), time.Date(2026, 12, 1, 8, 32, 0, 0, time.UTC), "x"); ok {
		t.Fatal("Bob is believed after his revocation")
	}
}

// TestCodesFormat1Upgraded_O5: outstanding codes of format 1 are read as they are (a live code
// with its name, consoles and wrong passwords; a used one); the redemption's write keeps the old
// file as codes.json.v1.bak and writes format 2.
func TestCodesFormat1Upgraded_O5(t *testing.T) {
	dir, old := installFixture(t, "codes-format1.json", CodesFile)
	path := filepath.Join(dir, CodesFile)
	f, err := readCodes(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Codes) != 2 || f.Codes[0].WrongPasswords != 1 || !f.Codes[1].Used || f.read != 1 || f.Version != fileVersion {
		t.Fatalf("readCodes of format 1: %+v", f)
	}
	wantNoBackup(t, path)
	if _, err := RedeemCode(dir, "CDFG-HJKL", func() time.Time { return t0.Add(time.Minute) }, nil); !errors.Is(err, ErrCodeUsed) {
		t.Fatalf("the used code of format 1: %v", err)
	}
	wantNoBackup(t, path) // a refusal writes nothing
	got, err := RedeemCode(dir, "bcdf-ghjk", func() time.Time { return t0.Add(time.Minute) }, func() (bool, error) { return true, nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "tablet" || !slices.Equal(got.Consoles.Patterns(), []string{"alpha"}) {
		t.Fatalf("RedeemCode of a format-1 code: %+v", got)
	}
	wantUpgraded(t, dir, CodesFile, old)
	if _, err := RedeemCode(dir, "bcdf-ghjk", func() time.Time { return t0.Add(2 * time.Minute) }, nil); !errors.Is(err, ErrCodeUsed) {
		t.Fatalf("the code again, from the upgraded file: %v", err)
	}
}

// TestNewerFormatRefused_O5: a devices.json or codes.json of a newer format is refused by every
// reader and writer, and by CheckFormats, with one line naming the file and both formats; the
// file is left byte for byte, and nothing else appears in the folder.
func TestNewerFormatRefused_O5(t *testing.T) {
	for _, row := range []struct{ fixture, name string }{
		{"devices-format3.json", DevicesFile},
		{"codes-format3.json", CodesFile},
	} {
		t.Run(row.name, func(t *testing.T) {
			dir, _ := installFixture(t, row.fixture, row.name)
			path := filepath.Join(dir, row.name)
			same := fileUnchanged(t, path)
			wantNewer := func(what string, err error) {
				t.Helper()
				var newer *state.NewerFormatError
				if !errors.As(err, &newer) || newer.Format != 3 || newer.Newest != 2 {
					t.Fatalf("%s: %v, want a NewerFormatError", what, err)
				}
				msg := err.Error()
				for _, part := range []string{path, "format 3", "format 2"} {
					if !strings.Contains(msg, part) {
						t.Errorf("%s: %q does not name %q", what, msg, part)
					}
				}
				if strings.Contains(msg, "\n") || strings.Contains(msg, "does not parse") {
					t.Errorf("%s: %q", what, msg)
				}
			}
			wantNewer("CheckFormats", CheckFormats(dir))
			if row.name == DevicesFile {
				_, err := ListDevices(dir)
				wantNewer("ListDevices", err)
				_, err = OpenRegister(dir)
				wantNewer("OpenRegister", err)
				_, _, err = RegisterDeviceFor(dir, "x", access.Everything, t0)
				wantNewer("RegisterDeviceFor", err)
				wantNewer("RevokeDevice", RevokeDevice(dir, "abcdef"))
			} else {
				_, err := IssueCode(dir, "x", t0)
				wantNewer("IssueCode", err)
				_, err = RedeemCode(dir, "BCDF-GHJK", nil, func() (bool, error) { return true, nil })
				wantNewer("RedeemCode", err)
			}
			same()
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() != row.name && e.Name() != LockFile {
					t.Errorf("%s appeared in the folder", e.Name())
				}
			}
		})
	}
}

func wantNoBackup(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path + ".v1.bak"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s.v1.bak after reading only: %v", path, err)
	}
}
