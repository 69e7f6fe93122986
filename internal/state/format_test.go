package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFormatOf_O5: a file's format is its top-level "format", LegacyFormat without one; a newer
// one than this fleet writes is a NewerFormatError naming the file and both formats; anything
// that is not a whole number from 1, or is there twice, is an error.
func TestFormatOf_O5(t *testing.T) {
	const path = "/state/fleet/consoles.json"
	for _, row := range []struct {
		name, data string
		want       int
		newer      bool
		bad        bool
	}{
		{"O5 no format is legacy", `{"consoles":[]}`, LegacyFormat, false, false},
		{"O5 empty object is legacy", `{}`, LegacyFormat, false, false},
		{"O5 current", `{"format":2,"consoles":[]}`, 2, false, false},
		{"O5 format after the rest", `{"consoles":[{"format":9}],"format":2}`, 2, false, false},
		{"O5 older", `{"format":1}`, 1, false, false},
		{"O5 newer", `{"format":3,"consoles":[]}`, 3, true, false},
		{"O5 much newer", `{"format":1000000}`, 1000000, true, false},
		{"O5 key case folded", `{"Format":3}`, 3, true, false},
		{"O5 twice", `{"format":2,"format":2}`, 0, false, true},
		{"O5 twice folded", `{"format":2,"FORMAT":2}`, 0, false, true},
		{"O5 zero", `{"format":0}`, 0, false, true},
		{"O5 negative", `{"format":-1}`, 0, false, true},
		{"O5 fraction", `{"format":2.0}`, 0, false, true},
		{"O5 exponent", `{"format":2e0}`, 0, false, true},
		{"O5 string", `{"format":"2"}`, 0, false, true},
		{"O5 null", `{"format":null}`, 0, false, true},
		{"O5 huge", `{"format":99999999999999999999}`, 0, false, true},
		{"O5 array", `[]`, 0, false, true},
		{"O5 not JSON", `{garbage`, 0, false, true},
		{"O5 empty", ``, 0, false, true},
	} {
		t.Run(row.name, func(t *testing.T) {
			got, err := FormatOf(path, []byte(row.data), 2)
			var newer *NewerFormatError
			switch {
			case row.bad:
				if err == nil || errors.As(err, &newer) {
					t.Fatalf("FormatOf = %d, %v; want an error", got, err)
				}
			case row.newer:
				if !errors.As(err, &newer) || newer.Path != path || newer.Format != row.want || newer.Newest != 2 || got != row.want {
					t.Fatalf("FormatOf = %d, %v; want a NewerFormatError for format %d", got, err, row.want)
				}
				msg := err.Error()
				for _, want := range []string{path, "format " + itoa(row.want), "format 2"} {
					if !strings.Contains(msg, want) {
						t.Errorf("%q does not name %q", msg, want)
					}
				}
				if strings.Contains(msg, "\n") {
					t.Errorf("%q is more than one line", msg)
				}
			default:
				if err != nil || got != row.want {
					t.Fatalf("FormatOf = %d, %v; want %d", got, err, row.want)
				}
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestWriteUpgraded_O5: the first write in the current format keeps the old file as
// <name>.v<N>.bak, 0600; a later upgrade (the file brought back to the old format) keeps the first
// backup, never overwrites it; a file that is not there is written with no backup.
func TestWriteUpgraded_O5(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, "consoles.json")
	old, next := []byte(`{"consoles":[]}`+"\n"), []byte(`{"format":2,"consoles":[]}`+"\n")
	if err := WriteFileAtomic(path, old); err != nil {
		t.Fatal(err)
	}
	if err := WriteUpgraded(path, 1, next); err != nil {
		t.Fatal(err)
	}
	bak := filepath.Join(dir, "consoles.json.v1.bak")
	wantFile(t, path, next)
	wantFile(t, bak, old)
	if st, _ := os.Stat(bak); st.Mode().Perm() != 0o600 {
		t.Errorf("%s is %04o, want 0600", bak, st.Mode().Perm())
	}
	// Brought back to format 1 (an older fleet rewrote it): upgraded again, the first backup kept.
	again := []byte(`{"consoles":[{"id":"a"}]}` + "\n")
	if err := WriteFileAtomic(path, again); err != nil {
		t.Fatal(err)
	}
	if err := WriteUpgraded(path, 1, next); err != nil {
		t.Fatal(err)
	}
	wantFile(t, path, next)
	wantFile(t, bak, old)
	wantOnly(t, dir, "consoles.json", "consoles.json.v1.bak")

	fresh := filepath.Join(dir, "codes.json")
	if err := WriteUpgraded(fresh, 1, next); err != nil {
		t.Fatal(err)
	}
	wantFile(t, fresh, next)
	if _, err := os.Lstat(BackupName(fresh, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a backup of a file that was not there: %v", err)
	}
}

// TestWriteUpgradedRefusesOpenFile_F1: a file too open to read is not upgraded, nor backed up.
func TestWriteUpgradedRefusesOpenFile_F1(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, "devices.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"devices":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	if err := WriteUpgraded(path, 1, []byte(`{"format":2}`)); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("WriteUpgraded of a 0644 file: %v", err)
	}
	wantFile(t, path, []byte(`{"version":1,"devices":[]}`))
	wantOnly(t, dir, "devices.json")
}

// killAtEnv tells the test binary, run again as a child, to upgrade a file and SIGKILL itself at
// one moment of the write: "<moment> <path>".
const killAtEnv = "FLEET_STATE_TEST_KILL_AT"

// TestKillDuringUpgrade_O5: a process killed with SIGKILL at each moment of an upgrade — its
// backup written but not yet in place, the backup in place, the new file written but not yet
// renamed, renamed but its folder not yet synced — leaves the file whole, either the old bytes or
// the new ones (so it reads), and any backup whole; the next upgrade completes, keeps the old file
// as the backup, and what the kill left is a write leftover that RemoveWriteLeftovers clears.
func TestKillDuringUpgrade_O5(t *testing.T) {
	old, next := []byte(`{"consoles":[{"id":"alpha","addr":"127.0.0.1:9001"}]}`+"\n"), []byte(`{"format":2,"consoles":[{"id":"alpha","addr":"127.0.0.1:9001"}]}`+"\n")
	if at := os.Getenv(killAtEnv); at != "" {
		moment, path, _ := strings.Cut(at, " ")
		testHook = func(m, p string) {
			if m == moment && p == path {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
		if err := WriteUpgraded(filepath.Join(filepath.Dir(path), "consoles.json"), 1, next); err != nil {
			t.Fatal(err)
		}
		t.Fatal("not killed")
	}
	for _, row := range []struct{ moment, file string }{
		{"temp-written", "consoles.json.v1.bak"},
		{"renamed", "consoles.json.v1.bak"},
		{"backup-kept", "consoles.json.v1.bak"},
		{"temp-written", "consoles.json"},
		{"renamed", "consoles.json"},
	} {
		t.Run(row.moment+" "+row.file, func(t *testing.T) {
			dir := privateDir(t)
			path := filepath.Join(dir, "consoles.json")
			if err := WriteFileAtomic(path, old); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringUpgrade_O5$", "-test.count=1")
			cmd.Env = append(os.Environ(), killAtEnv+"="+row.moment+" "+filepath.Join(dir, row.file))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was not killed: %v\n%s", err, out)
			}
			got, err := ReadPrivateFile(path)
			if err != nil || !(bytes.Equal(got, old) || bytes.Equal(got, next)) {
				t.Fatalf("after the kill %s holds %q (%v); want the old file or the new one, whole", path, got, err)
			}
			if f, err := FormatOf(path, got, 2); err != nil || !json.Valid(got) {
				t.Fatalf("after the kill %s does not read: format %d, %v", path, f, err)
			}
			if b, err := os.ReadFile(BackupName(path, 1)); err == nil && !bytes.Equal(b, old) {
				t.Fatalf("after the kill the backup holds %q, want the old file", b)
			}
			from, _ := FormatOf(path, got, 2)
			if from < 2 {
				if err := WriteUpgraded(path, from, next); err != nil {
					t.Fatal(err)
				}
			}
			wantFile(t, path, next)
			wantFile(t, BackupName(path, 1), old)
			if _, err := RemoveWriteLeftovers(dir, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			wantOnly(t, dir, "consoles.json", "consoles.json.v1.bak")
		})
	}
}

func wantFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s holds %q (%v), want %q", path, got, err, want)
	}
}
