package state

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/fulldisk"
)

// tokenCorruptions are a good token file cut short at every length and spoiled in the ways a
// crash, a bad disk or a careless edit spoil a file.
func tokenCorruptions(t *testing.T, good []byte) map[string][]byte {
	t.Helper()
	rows := map[string][]byte{
		"a block of NULs":         bytes.Repeat([]byte{0}, len(good)),
		"NULs after the token":    append(bytes.TrimSuffix(good, []byte("\n")), 0, 0, 0, 0),
		"a byte outside base64":   append([]byte("!"), good[1:]...),
		"the token twice":         append(append([]byte{}, good...), good...),
		"an editor's BOM":         append([]byte("\xef\xbb\xbf"), good...),
		"a space inside":          append(append(append([]byte{}, good[:10]...), ' '), good[10:]...),
		"quoted":                  []byte(`"` + strings.TrimSpace(string(good)) + `"` + "\n"),
		"a line end first":        append([]byte("\n"), good...),
		"half of it, then NULs":   append(append([]byte{}, good[:len(good)/2]...), bytes.Repeat([]byte{0}, len(good)/2)...),
		"a multi-byte rune in it": append(append(append([]byte{}, good[:20]...), "é"...), good[22:]...),
	}
	// Every cut that leaves less than TokenBytes of token (the whole token, without its line
	// end, is a good file: nothing is lost).
	for n := 0; n < len(good)-1; n++ {
		rows[fmt.Sprintf("cut at %02d", n)] = append([]byte{}, good[:n]...)
	}
	return rows
}

// TestTruncatedToken_F2: a token file cut short or spoiled is refused with an error that names
// the file, by LoadOrCreateToken (serve's start) and by a follower (which then believes no token
// at all); the file is kept byte for byte, never replaced by a fresh token.
func TestTruncatedToken_F2(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, TokenFile)
	tok, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range tokenCorruptions(t, good) {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if got, err := LoadOrCreateToken(dir); err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("LoadOrCreateToken = %q, %v; want an error naming %s", got, err, path)
			} else if strings.Contains(err.Error(), tok[:16]) {
				t.Fatalf("the error carries the token: %v", err)
			}
			follower := NewTokenFollower(path, nil)
			if _, err := follower.Current(); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("follower Current: %v; want an error naming %s", err, path)
			}
			if follower.Match(tok) || follower.Match(strings.TrimSpace(string(bad))) {
				t.Error("a follower of a spoiled file believed a token")
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, bad) {
				t.Fatalf("the file was changed: %q, want %q", b, bad)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("files in %s: %v, want only %s", dir, entries, TokenFile)
			}
		})
	}
}

// TestFullDiskToken_F2: with the disk full, a rotation fails with an error and the old token
// file stays byte for byte (no half-written, no empty token), and a first start creates no
// token file at all; once there is room again both work. The disk is a 64 KiB tmpfs filled up.
func TestFullDiskToken_F2(t *testing.T) {
	mnt := fulldisk.Mount(t, 64<<10)

	t.Run("rotate", func(t *testing.T) {
		dir := filepath.Join(mnt, "rotate")
		tok, err := LoadOrCreateToken(dir)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, TokenFile)
		old, _ := os.ReadFile(path)
		filler := fulldisk.Fill(t, mnt, 0)
		defer os.Remove(filler)
		err = RotateToken(dir)
		t.Logf("RotateToken on a full disk: %v", err)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("RotateToken on a full disk: %v; want an error naming %s", err, path)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, old) {
			t.Fatalf("the token file is %q after a failed rotation, want %q", b, old)
		}
		if got, err := ReadToken(path); err != nil || got != tok {
			t.Fatalf("after the failed rotation the token reads %v", err)
		}
		wantOnly(t, dir, TokenFile)
		os.Remove(filler)
		if err := RotateToken(dir); err != nil {
			t.Fatalf("RotateToken with room again: %v", err)
		}
		if got, _ := ReadToken(path); got == tok {
			t.Fatal("the rotation with room again did not rotate")
		}
	})

	t.Run("first start", func(t *testing.T) {
		dir := filepath.Join(mnt, "first")
		if err := EnsureDir(dir); err != nil {
			t.Fatal(err)
		}
		filler := fulldisk.Fill(t, mnt, 0)
		defer os.Remove(filler)
		if tok, err := LoadOrCreateToken(dir); err == nil {
			t.Fatalf("LoadOrCreateToken on a full disk gave a token (%d bytes) it could not have stored", len(tok))
		}
		wantOnly(t, dir)
		os.Remove(filler)
		if _, err := LoadOrCreateToken(dir); err != nil {
			t.Fatalf("LoadOrCreateToken with room again: %v", err)
		}
	})
}

// wantOnly fails unless dir holds exactly the files named (no temporary file left behind).
func wantOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}
