package ca

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/phase-console/fleet/internal/state"
)

// TestPermissionsAfterOpen_F1: with a umask that would let everything be world-readable, the
// folder, every folder below it and every file — roots, leaf, key, metadata, lock files — are
// 0700/0600.
func TestPermissionsAfterOpen_F1(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := newDir(t)
	a := mustOpen(t, dir, "127.0.0.20", nil)
	a.Close()
	m := assertPrivateTree(t, dir)
	for _, pattern := range []string{
		"roots/*.crt", "roots/*.key",
		"leaf/locks/*.lock",
		"leaf/certificates/*/127.0.0.20/127.0.0.20.crt",
		"leaf/certificates/*/127.0.0.20/127.0.0.20.key",
		"leaf/certificates/*/127.0.0.20/127.0.0.20.json",
	} {
		if got, _ := filepath.Glob(filepath.Join(dir, pattern)); len(got) != 1 {
			t.Errorf("%s: %v (tree %v)", pattern, got, m)
		}
	}
}

// TestRefusesTooOpen_F1: a file or folder under the CA's folder that is too open, someone
// else's, or a symlink is refused at Open with an error naming the path and the fix; Open
// changes nothing.
func TestRefusesTooOpen_F1(t *testing.T) {
	dir := newDir(t)
	a := mustOpen(t, dir, "127.0.0.21", nil)
	a.Close()
	one := func(pattern string) string { return firstGlob(t, dir, pattern) }
	crt, key := one("roots/*.crt"), one("roots/*.key")
	lock := one("leaf/locks/*.lock")
	meta := one("leaf/certificates/*/*/*.json")
	leafKey := one("leaf/certificates/*/*/*.key")
	siteDir := filepath.Dir(meta)

	cases := []struct {
		name string
		path string
		mode fs.FileMode
		fix  string
	}{
		{"root certificate 0644", crt, 0o644, "chmod 600 " + crt},
		{"root key 0640", key, 0o640, "chmod 600 " + key},
		{"lock file 0644", lock, 0o644, "chmod 600 " + lock},
		{"leaf metadata 0604", meta, 0o604, "chmod 600 " + meta},
		{"leaf key 0660", leafKey, 0o660, "chmod 600 " + leafKey},
		{"certificate folder 0755", siteDir, 0o755, "chmod 700 " + siteDir},
		{"locks folder 0750", filepath.Dir(lock), 0o750, "chmod 700 " + filepath.Dir(lock)},
		{"roots folder 0701", filepath.Dir(crt), 0o701, "chmod 700 " + filepath.Dir(crt)},
		{"the folder itself 0755", dir, 0o755, "chmod 700 " + dir},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := os.Stat(tc.path)
			defer os.Chmod(tc.path, st.Mode().Perm())
			if err := os.Chmod(tc.path, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := openCA(t, dir, "127.0.0.21", nil)
			assertModeError(t, err, tc.path, tc.fix)
			if st, _ := os.Stat(tc.path); st.Mode().Perm() != tc.mode {
				t.Errorf("Open re-permissioned %s to %04o", tc.path, st.Mode().Perm())
			}
		})
	}

	t.Run("someone else's file", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to chown")
		}
		if err := os.Chown(meta, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		defer os.Chown(meta, 0, 0)
		_, err := openCA(t, dir, "127.0.0.21", nil)
		assertModeError(t, err, meta, "chown")
	})

	t.Run("symlink", func(t *testing.T) {
		link := filepath.Join(dir, leafDir, "certificates", "evil.crt")
		if err := os.Symlink("/etc/passwd", link); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(link)
		_, err := openCA(t, dir, "127.0.0.21", nil)
		assertModeError(t, err, link, "")
	})

	// Everything restored: it opens again, with the same root.
	b := mustOpen(t, dir, "127.0.0.21", nil)
	if b.Fingerprint() != a.Fingerprint() {
		t.Error("root changed")
	}
}

func assertModeError(t *testing.T, err error, path, fix string) {
	t.Helper()
	var me *state.ModeError
	if !errors.As(err, &me) || me.Path != path {
		t.Fatalf("Open = %v, want a ModeError for %s", err, path)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fix) {
		t.Errorf("error %q does not name %s and %q", err, path, fix)
	}
}

// TestUnparsableRootNamed_F2: a stored root file that does not parse stops Open with an error
// naming it; it is never replaced, and nothing is set aside: the root is what phones trust. (A
// leaf file that does not parse is set aside instead: TestUnusableLeafSetAsideRootKept_F2.)
func TestUnparsableRootNamed_F2(t *testing.T) {
	dir := newDir(t)
	a := mustOpen(t, dir, "127.0.0.42", nil)
	a.Close()
	for _, pattern := range []string{"roots/*.crt", "roots/*.key"} {
		t.Run(pattern, func(t *testing.T) {
			p := firstGlob(t, dir, pattern)
			orig, _ := os.ReadFile(p)
			defer os.WriteFile(p, orig, 0o600)
			if err := os.WriteFile(p, []byte("garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := walkModes(t, dir)
			_, err := openCA(t, dir, "127.0.0.42", nil)
			if err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("Open = %v, want an error naming %s", err, p)
			}
			if got, _ := os.ReadFile(p); string(got) != "garbage" {
				t.Errorf("%s was replaced", p)
			}
			if after := walkModes(t, dir); !maps.Equal(after, before) {
				t.Errorf("Open changed the folder: %v -> %v", before, after)
			}
		})
	}
	b := mustOpen(t, dir, "127.0.0.42", nil)
	if b.Fingerprint() != a.Fingerprint() || !b.leaf(t).Equal(a.leaf(t)) {
		t.Error("restored: want the same root and leaf")
	}
}

func firstGlob(t *testing.T, dir, pattern string) string {
	t.Helper()
	got, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(got) != 1 {
		t.Fatalf("%s: %v", pattern, got)
	}
	return got[0]
}
