package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// notAFolder is a --state-dir that can never be used (a regular file), so that a command that
// wrongly went on past its flags fails at once (exit 1) instead of binding a port.
func notAFolder(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state-is-a-file")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostFlagRefused_S1: `fleet serve` refuses a --host flag in any spelling, with any value:
// exit 2, one stderr line naming the rule, nothing on stdout, nothing started.
func TestHostFlagRefused_S1(t *testing.T) {
	rows := []struct {
		name string
		args []string
	}{
		{"S1 --host 0.0.0.0", []string{"--host", "0.0.0.0"}},
		{"S1 --host=::", []string{"--host=::"}},
		{"S1 -host x", []string{"-host", "x"}},
		{"S1 --HOST=a", []string{"--HOST=a"}},
		{"S1 --Host", []string{"--Host"}},
		{"S1 -HOST=1", []string{"-HOST=1"}},
		{"S1 --host=127.0.0.1 (even loopback)", []string{"--host=127.0.0.1"}},
		{"S1 --host= empty", []string{"--host="}},
		{"S1 ---host", []string{"---host", "0.0.0.0"}},
		{"S1 after other flags", []string{"--port", "7421", "--host", "0.0.0.0"}},
		{"S1 before other flags", []string{"-host=0.0.0.0", "--port=7421"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			dir := notAFolder(t)
			var out, errb bytes.Buffer
			args := append([]string{"serve", "--state-dir", dir}, row.args...)
			code := run(args, &out, &errb)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "S1") {
				t.Errorf("stderr %q, want one line naming S1", errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q", out.String())
			}
		})
	}
}

// TestOtherListenFlagsRefused_S1: there is no other way to widen the listener: flags that would
// name an address are unknown (exit 2), and an argument after "--" is refused too.
func TestOtherListenFlagsRefused_S1(t *testing.T) {
	for _, row := range []struct {
		name string
		args []string
	}{
		{"S1 --listen", []string{"--listen", "0.0.0.0:7420"}},
		{"S1 --addr", []string{"--addr=0.0.0.0:7420"}},
		{"S1 --bind", []string{"--bind", "0.0.0.0"}},
		{"S1 --host after --", []string{"--", "--host", "0.0.0.0"}},
		{"S1 positional address", []string{"0.0.0.0:7420"}},
	} {
		t.Run(row.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"serve", "--state-dir", notAFolder(t)}, row.args...)
			if code := run(args, &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, errb.String())
			}
		})
	}
}

// TestPortOutOfRange_S1: --port must be 1-65535: else exit 2 with one line naming --port.
func TestPortOutOfRange_S1(t *testing.T) {
	for _, row := range []struct {
		name string
		args []string
	}{
		{"S1 --port 0", []string{"--port", "0"}},
		{"S1 --port=65536", []string{"--port=65536"}},
		{"S1 --port -1", []string{"--port", "-1"}},
		{"S1 --port 99999", []string{"--port", "99999"}},
	} {
		t.Run(row.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"serve", "--state-dir", notAFolder(t)}, row.args...)
			if code := run(args, &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "--port") {
				t.Errorf("stderr %q, want one line naming --port", errb.String())
			}
		})
	}
	t.Run("S1 --port not a number", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := run([]string{"serve", "--state-dir", notAFolder(t), "--port", "http"}, &out, &errb); code != 2 {
			t.Errorf("exit %d, want 2", code)
		}
	})
}

// TestUnusableStateDirStopsServe_F1: a state folder that cannot be used stops `fleet serve`
// before it listens: exit 1, the error names the path.
func TestUnusableStateDirStopsServe_F1(t *testing.T) {
	dir := notAFolder(t)
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--state-dir", dir, "--port", "7421"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1 (stderr %q)", code, errb.String())
	}
	if !strings.Contains(errb.String(), dir) {
		t.Errorf("stderr %q does not name %s", errb.String(), dir)
	}
}
