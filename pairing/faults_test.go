package pairing

// Fault tests (SPEC F2) for the pairing folder's files: a file cut short or spoiled is refused
// with an error that names it and is kept byte for byte; a full disk while writing leaves the old
// file and returns an error. The full disk is a real one: a small tmpfs, filled up
// (internal/fulldisk; skipped where mounting is not permitted).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/fulldisk"
)

// spoilings are the ways a file gets spoiled besides being cut short: what a crash can leave on
// some filesystems (a block of NULs where the data was not written), a bad sector or a careless
// edit.
func spoilings(good []byte) map[string][]byte {
	// A flipped bit inside a JSON string would only change a name (the decoder takes invalid
	// UTF-8 as U+FFFD): flip one that JSON's structure needs, the first quote mark.
	flipped := bytes.Clone(good)
	at := bytes.IndexByte(flipped, '"')
	if at < 0 {
		at = len(flipped) / 2
	}
	flipped[at] ^= 0x80
	half := bytes.Clone(good)
	clear(half[len(half)/2:])
	return map[string][]byte{
		"all NULs":              make([]byte, len(good)),
		"NULs after the middle": half,
		"a structural byte with its top bit flipped": flipped,
		"garbage after it":                           append(bytes.Clone(good), "\x00\x01garbage"...),
		"two copies":                                 append(bytes.Clone(good), good...),
	}
}

// cutsAndSpoilings calls try for every strict cut of good that ends before its last closing
// brace (every such cut of a JSON object is incomplete) and for every spoiling.
func cutsAndSpoilings(t *testing.T, good []byte, try func(t *testing.T, bad []byte)) {
	t.Helper()
	end := bytes.LastIndexByte(good, '}')
	for n := 0; n < end; n++ {
		try(t, good[:n])
		if t.Failed() {
			t.Fatalf("at the cut after %d of %d bytes", n, len(good))
		}
	}
	for name, bad := range spoilings(good) {
		t.Run(name, func(t *testing.T) { try(t, bad) })
	}
}

// TestTruncatedRegister_F2: devices.json cut short at every byte, or spoiled, is refused with a
// ParseError naming it by every way in (OpenRegister, RegisterDeviceFor, RevokeDevice,
// ListDevices), a running Register believes no device meanwhile, and the file is kept byte for
// byte with nothing left beside it.
func TestTruncatedRegister_F2(t *testing.T) {
	dir := reachDir(t)
	r, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.WaitWrites)
	d, cred, err := r.AddFor("Ann's phone", access.Everything, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.AddFor("tablet", access.Everything, t0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, DevicesFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cutsAndSpoilings(t, good, func(t *testing.T, bad []byte) {
		t.Helper()
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenRegister(dir)
		wantParseError(t, err, path)
		_, _, err = RegisterDeviceFor(dir, "another", access.Everything, t0)
		wantParseError(t, err, path)
		wantParseError(t, RevokeDevice(dir, d.ID6), path)
		_, err = ListDevices(dir)
		wantParseError(t, err, path)
		if _, ok := r.Authenticate(cred, t0, "192.0.2.1:1"); ok {
			t.Fatal("a device was believed from a register that does not parse")
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, bad) {
			t.Fatalf("the register was changed to %q, want it kept as %q", b, bad)
		}
		wantFiles(t, dir, DevicesFile, LockFile)
	})
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Authenticate(cred, t0, "192.0.2.1:1"); !ok {
		t.Fatalf("not believed once the file is good again: %v", r.Err())
	}
	r.WaitWrites() // its last seen, written in the background
}

// TestTruncatedCodes_F2: codes.json cut short at every byte, or spoiled, is refused with a
// ParseError naming it by IssueCode and by Redeem — which never checks the password then — and
// the file is kept byte for byte.
func TestTruncatedCodes_F2(t *testing.T) {
	dir := reachDir(t)
	code := issue(t, dir, "Ann's phone", t0)
	issue(t, dir, "", t0)
	path := filepath.Join(dir, CodesFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{right: true}
	cutsAndSpoilings(t, good, func(t *testing.T, bad []byte) {
		t.Helper()
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := IssueCode(dir, "", t0)
		wantParseError(t, err, path)
		_, err = redeem(dir, code, at(t0), c.check)
		wantParseError(t, err, path)
		if n := c.calls.Load(); n != 0 {
			t.Fatalf("the password was checked %d times against a codes file that does not parse", n)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, bad) {
			t.Fatalf("codes.json was changed to %q, want it kept as %q", b, bad)
		}
		wantFiles(t, dir, CodesFile, LockFile)
	})
}

// TestTruncatedPassword_F2: the password file cut short at every byte, or spoiled, is refused by
// LoadPassword with an error naming it, and kept.
func TestTruncatedPassword_F2(t *testing.T) {
	cheapScrypt(t)
	dir := reachDir(t)
	if err := SetPassword(dir, []byte("pass word 1")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, PasswordFile)
	good, _ := os.ReadFile(path)
	bads := spoilings(good)
	for n := 0; n < len(good)-1; n++ {
		bads[fmt.Sprintf("cut at %d", n)] = good[:n]
	}
	for name, bad := range bads {
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPassword(dir)
		if err == nil || !strings.Contains(err.Error(), path) || errors.Is(err, ErrNoPassword) {
			t.Errorf("%s: LoadPassword = %v, want an error naming %s", name, err, path)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, bad) {
			t.Errorf("%s: the password file was changed", name)
		}
	}
}

// fullDiskFolder mounts a small tmpfs and returns a pairing folder on it.
func fullDiskFolder(t *testing.T) (mnt, dir string) {
	mnt = fulldisk.Mount(t, 64<<10)
	return mnt, filepath.Join(mnt, "fleet", "reach")
}

// TestFullDiskRegister_F2: with the disk full, pairing a device and revoking one fail with an
// error, devices.json stays byte for byte with no temporary file beside it, and the running
// Register keeps believing the devices of the intact file (its best-effort last-seen write fails
// quietly). Run with no room at all and with one page of room for a register bigger than that,
// so the write fails part-way. With room again, both work.
func TestFullDiskRegister_F2(t *testing.T) {
	for _, leave := range []int{0, 4096} {
		t.Run(fmt.Sprintf("%d bytes free", leave), func(t *testing.T) {
			mnt, dir := fullDiskFolder(t)
			r, err := OpenRegister(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.WaitWrites)
			var first Device
			var cred string
			for i := range 24 { // about 6 KiB: more than the page left free
				d, c, err := r.AddFor(fmt.Sprintf("device %d", i), access.Everything, t0)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					first, cred = d, c
				}
			}
			path := filepath.Join(dir, DevicesFile)
			if st, _ := os.Stat(path); st.Size() <= int64(leave) {
				t.Fatalf("the register is %d bytes: too small to fail part-way", st.Size())
			}
			same := fileUnchanged(t, path)
			filler := fulldisk.Fill(t, mnt, leave)

			_, _, err = r.AddFor("one too many", access.Everything, t0)
			wantNoSpace(t, err, "pairing a device")
			wantNoSpace(t, r.Revoke(first.ID6), "revoking a device")
			if got, ok := r.Authenticate(cred, t0.Add(LastSeenInterval), "192.0.2.1:1"); !ok || got.ID6 != first.ID6 {
				t.Fatalf("with the register intact, the device is not believed: %v", r.Err())
			}
			r.WaitWrites() // its last seen, written in the background, failed: no room
			same()
			wantFiles(t, dir, DevicesFile, LockFile)

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if err := r.Revoke(first.ID6); err != nil {
				t.Fatalf("revoking with room again: %v", err)
			}
			if _, ok := r.Authenticate(cred, t0, "192.0.2.1:1"); ok {
				t.Fatal("revoked, but still believed")
			}
		})
	}
}

// TestFullDiskCodes_F2: with the disk full, issuing a code fails with an error, and a right
// password does not pair (the code could not be marked used, so it stays live for a later try);
// codes.json stays byte for byte with no temporary file beside it. With room again, the code
// pairs.
func TestFullDiskCodes_F2(t *testing.T) {
	mnt, dir := fullDiskFolder(t)
	code := issue(t, dir, "Ann's phone", t0)
	path := filepath.Join(dir, CodesFile)
	same := fileUnchanged(t, path)
	filler := fulldisk.Fill(t, mnt, 0)

	_, err := IssueCode(dir, "", t0)
	wantNoSpace(t, err, "issuing a code")
	right := &checker{right: true}
	if name, err := redeem(dir, code, at(t0), right.check); err == nil {
		t.Fatalf("paired %q with a code that could not be marked used", name)
	} else {
		wantNoSpace(t, err, "redeeming a code")
	}
	same()
	wantFiles(t, dir, CodesFile, LockFile)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if name, err := redeem(dir, code, at(t0), right.check); err != nil || name != "Ann's phone" {
		t.Fatalf("with room again: Redeem = %q, %v", name, err)
	}
}

// TestFullDiskWrongPasswordsCounted_F2: on a full disk an attempt cannot be counted, so it is not
// made: Redeem refuses without checking the password, however many times it is tried (before the
// fix, each wrong password was checked and its count lost, so MaxWrongPasswords never burned the
// code). With room again, the fifth wrong password burns the code as usual.
func TestFullDiskWrongPasswordsCounted_F2(t *testing.T) {
	mnt, dir := fullDiskFolder(t)
	code := issue(t, dir, "Ann's phone", t0)
	same := fileUnchanged(t, filepath.Join(dir, CodesFile))
	filler := fulldisk.Fill(t, mnt, 0)
	wrong := &checker{}
	for range 2 * MaxWrongPasswords {
		_, err := redeem(dir, code, at(t0), wrong.check)
		wantNoSpace(t, err, "a pairing attempt")
	}
	if n := wrong.calls.Load(); n != 0 {
		t.Fatalf("the password was checked %d times on a disk where no attempt could be counted", n)
	}
	same()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := range MaxWrongPasswords {
		if _, err := redeem(dir, code, at(t0), wrong.check); !errors.Is(err, ErrWrongPassword) {
			t.Fatalf("wrong password %d with room again: %v", i+1, err)
		}
	}
	if _, err := redeem(dir, code, at(t0), (&checker{right: true}).check); !errors.Is(err, ErrCodeBurned) {
		t.Fatalf("after %d wrong passwords: %v, want the code burned", MaxWrongPasswords, err)
	}
}

// TestFullDiskPassword_F2: with the disk full, setting a new pairing password fails with an
// error and the old hash stays byte for byte (the old password still works).
func TestFullDiskPassword_F2(t *testing.T) {
	cheapScrypt(t)
	mnt, dir := fullDiskFolder(t)
	if err := SetPassword(dir, []byte("pass word 1")); err != nil {
		t.Fatal(err)
	}
	same := fileUnchanged(t, filepath.Join(dir, PasswordFile))
	filler := fulldisk.Fill(t, mnt, 0)
	defer os.Remove(filler)
	wantNoSpace(t, SetPassword(dir, []byte("pass word 2")), "setting the password")
	same()
	wantFiles(t, dir, PasswordFile)
	stored, err := LoadPassword(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := CheckPasswordContext(context.Background(), stored, []byte("pass word 1")); !ok {
		t.Fatal("the old password no longer works")
	}
}

// wantNoSpace fails unless err says the disk is full.
func wantNoSpace(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("%s on a full disk: %v; want the no-space error", what, err)
	}
}

// wantFiles fails unless dir holds exactly names (sorted): no temporary file left behind.
func wantFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Fatalf("%s holds %q, want %q", dir, got, names)
	}
}
