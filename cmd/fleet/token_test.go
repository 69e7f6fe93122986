package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/internal/state"
)

// fleetCmd runs `fleet args...` in process.
func fleetCmd(args ...string) (status int, stdout, stderr string) {
	var out, errb bytes.Buffer
	st := run(args, &out, &errb)
	return st, out.String(), errb.String()
}

// newTokenHome makes a <stateHome> with a fleet token and returns it with the token.
func newTokenHome(t *testing.T) (home, tok string) {
	t.Helper()
	home = filepath.Join(t.TempDir(), "state")
	tok, err := state.LoadOrCreateToken(state.FleetDir(home))
	if err != nil {
		t.Fatal(err)
	}
	return home, tok
}

// TestTokenRotate_C1: `fleet token rotate` writes a new token; a console using package console
// picks it up without a restart, and the old token is believed all along (the clock is frozen,
// so the 10 s grace cannot run out under a slow machine; the grace itself is tested in package
// console on a fake clock).
func TestTokenRotate_C1(t *testing.T) {
	home, old := newTokenHome(t)
	frozen := time.Now()
	v, err := console.New(console.Config{StateDir: home, Now: func() time.Time { return frozen },
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	believed := func(tok string) bool {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host, r.RemoteAddr = "127.0.0.1:9001", "127.0.0.1:5000"
		r.Header.Set("X-Phase-Console-Fleet", tok)
		r.Header.Set("X-Phase-Console-Fleet-Login", "alice")
		_, ref := v.Judge(r)
		return ref == nil
	}
	if !believed(old) {
		t.Fatal("the token is not believed before the rotation")
	}

	st, out, errOut := fleetCmd("token", "rotate", "--state-dir", home)
	if st != 0 {
		t.Fatalf("fleet token rotate: %d %s", st, errOut)
	}
	path := filepath.Join(state.FleetDir(home), state.TokenFile)
	tok, err := state.ReadToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if tok == old {
		t.Fatal("the token did not change")
	}
	if strings.Contains(out+errOut, tok) || strings.Contains(out+errOut, old) {
		t.Fatal("a token was printed")
	}
	if !strings.Contains(out, path) {
		t.Fatalf("output does not name the file: %q", out)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	for !believed(tok) {
		if !believed(old) {
			t.Fatal("C1 a request with the old token failed during the rotation")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !believed(old) {
		t.Fatal("C1 the old token was refused within its grace")
	}
}

func TestTokenUsage(t *testing.T) {
	home, _ := newTokenHome(t)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"token"}, 2},
		{[]string{"token", "show"}, 2},
		{[]string{"token", "rotate", "extra", "--state-dir", home}, 2},
		{[]string{"token", "rotate", "--bogus"}, 2},
		{[]string{"token", "--help"}, 0},
		{[]string{"token", "rotate", "--help"}, 0},
	} {
		if st, _, _ := fleetCmd(tc.args...); st != tc.want {
			t.Errorf("fleet %v: exit %d, want %d", tc.args, st, tc.want)
		}
	}
}

// TestTokenRotate_F1: a folder that is too open is refused with the chmod that fixes it, and the
// token is not touched.
func TestTokenRotate_F1(t *testing.T) {
	home, old := newTokenHome(t)
	dir := state.FleetDir(home)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st, _, errOut := fleetCmd("token", "rotate", "--state-dir", home)
	if st != 1 || !strings.Contains(errOut, "chmod 700 "+dir) {
		t.Fatalf("exit %d, stderr %q", st, errOut)
	}
	os.Chmod(dir, 0o700)
	if tok, _ := state.ReadToken(filepath.Join(dir, state.TokenFile)); tok != old {
		t.Fatal("the token changed")
	}
}

// TestTokenRotateNeedsAToken_F2: rotating in a folder without a token (a forgotten --state-dir) is
// refused, exit 1, naming the path and --state-dir; no token is created.
func TestTokenRotateNeedsAToken_F2(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	st, out, errOut := fleetCmd("token", "rotate", "--state-dir", home)
	tokPath := filepath.Join(state.FleetDir(home), state.TokenFile)
	if st != 1 || out != "" || !strings.Contains(errOut, "nothing to rotate") || !strings.Contains(errOut, tokPath) || !strings.Contains(errOut, "--state-dir") {
		t.Fatalf("exit %d, stdout %q, stderr %q", st, out, errOut)
	}
	if _, err := os.Stat(tokPath); !os.IsNotExist(err) {
		t.Errorf("a token was created: %v", err)
	}
}
