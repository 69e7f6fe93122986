package reach

// Fault tests (SPEC F2) for the machine profile: a profile cut short or spoiled — an editor that
// crashed while saving, a bad sector — is refused with an error naming the file, leaves the door
// closed, and is never changed. fleet only reads this file (the operator writes it), so there is
// no full-disk case for it.

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A machine profile as an operator keeps it: other tools' sections around ours.
const (
	profilePublic  = "# machine profile\neditor:\n  theme: dark\nreach:\n  mode: direct\n  listen: 203.0.113.7:7443\n  acknowledged: 203.0.113.7\nbackup:\n  keep: 7\n"
	profilePrivate = "# machine profile\neditor:\n  theme: dark\nreach:\n  mode: direct\n  listen: 192.168.1.20:7443\nbackup:\n  keep: 7\n"
)

// profileSpoilings are the ways a file gets spoiled besides being cut short.
func profileSpoilings(good []byte) map[string][]byte {
	flipped := bytes.Clone(good)
	flipped[bytes.Index(flipped, []byte("mode"))] ^= 0x80
	half := bytes.Clone(good)
	clear(half[len(half)/2:])
	tabbed := bytes.Replace(good, []byte("  mode"), []byte("\tmode"), 1)
	return map[string][]byte{
		"all NULs":              make([]byte, len(good)),
		"NULs after the middle": half,
		"a byte of a key with its top bit flipped": flipped,
		"garbage after it":                         append(bytes.Clone(good), "\x00\x01garbage"...),
		"two copies":                               append(bytes.Clone(good), good...),
		"a tab for indent":                         tabbed,
	}
}

// loadWritten writes b as home's machine profile and loads it; it fails the test unless the load
// leaves the file as it was and, on error, names the file and returns the closed profile.
func loadWritten(t *testing.T, home string, b []byte) (Profile, error) {
	t.Helper()
	path := filepath.Join(home, ProfileFile)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProfile(home)
	if err != nil && (p != closed || !strings.Contains(err.Error(), path)) {
		t.Fatalf("LoadProfile(%q) = %+v, %v; want the closed profile and an error naming %s", b, p, err, path)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
		t.Fatalf("the profile was changed to %q, want it kept as %q", got, b)
	}
	return p, err
}

// TestTruncatedProfile_F2: the profile cut short at every byte, or spoiled. With a public listen
// address (which needs its acknowledgement after it) every cut either is the whole profile or
// leaves the door closed — refused, naming the file, or with no mode: direct left. With a private
// address a cut inside the port's digits is a shorter port that parses (a YAML file has no end
// mark): such a cut may open the door, but only on the same host, never elsewhere. Every
// spoiling is refused.
func TestTruncatedProfile_F2(t *testing.T) {
	for name, whole := range map[string]string{"public": profilePublic, "private": profilePrivate} {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			full, err := loadWritten(t, home, []byte(whole))
			if err != nil || !full.Open() {
				t.Fatalf("the whole profile: %+v, %v", full, err)
			}
			for n := 0; n < len(whole); n++ {
				p, err := loadWritten(t, home, []byte(whole[:n]))
				if err != nil || !p.Open() || p == full {
					continue
				}
				if name == "public" {
					t.Fatalf("cut after %d bytes (%q): opens %+v; want closed or the whole profile", n, whole[:n], p)
				}
				if p.Listen.Addr() != full.Listen.Addr() || !strings.HasPrefix(strconv.Itoa(int(full.Listen.Port())), strconv.Itoa(int(p.Listen.Port()))) {
					t.Fatalf("cut after %d bytes (%q): opens on %v, which the whole file (%v) does not name", n, whole[:n], p.Listen, full.Listen)
				}
			}
			for sname, bad := range profileSpoilings([]byte(whole)) {
				if p, err := loadWritten(t, home, bad); err == nil {
					t.Errorf("%s: accepted as %+v", sname, p)
				}
			}
		})
	}
}
