package state_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/supervisor"
)

// killUpgradeEnv tells the test binary, run again as a child, which real upgrade to run and where
// to SIGKILL itself: "<kind> <moment> <path>".
const killUpgradeEnv = "FLEET_STATE_TEST_KILL_UPGRADE"

// upgradeKinds are the real files and the real first write that upgrades each: a console
// registered into a format-1 consoles.json, a device paired into a format-1 devices.json.
var upgradeKinds = map[string]struct {
	fixture, name string
	write         func(dir string) error
	read          func(dir string) (int, error) // how many entries the real reader finds
}{
	"registry": {"../../supervisor/testdata/formats/consoles-format1.json", state.RegistryFile,
		func(dir string) error {
			r, err := supervisor.LoadRegistry(filepath.Join(dir, state.RegistryFile), nil)
			if err == nil {
				_, err = r.Put(supervisor.Console{ID: "gamma", Addr: "127.0.0.1:1"})
			}
			return err
		},
		func(dir string) (int, error) {
			r, err := supervisor.LoadRegistry(filepath.Join(dir, state.RegistryFile), nil)
			if err != nil {
				return 0, err
			}
			return len(r.List()), nil
		}},
	"devices": {"../../pairing/testdata/formats/devices-format1.json", pairing.DevicesFile,
		func(dir string) error {
			_, _, err := pairing.RegisterDeviceFor(dir, "Cy's laptop", access.Everything, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
			return err
		},
		func(dir string) (int, error) {
			list, err := pairing.ListDevices(dir)
			return len(list), err
		}},
}

// TestKillDuringRealUpgrade_O5: the real first writes of a format-1 consoles.json and
// devices.json (today's files, from testdata) are killed with SIGKILL at every moment of the
// upgrade; after each kill the real reader (LoadRegistry, ListDevices) reads the file with every
// entry it had, any backup is the old file whole, and the write done again completes the upgrade
// (format 2, the backup the old file) with nothing left but the write's leftovers, which
// RemoveWriteLeftovers clears.
func TestKillDuringRealUpgrade_O5(t *testing.T) {
	if at := os.Getenv(killUpgradeEnv); at != "" {
		parts := strings.SplitN(at, " ", 3)
		kind, moment, path := parts[0], parts[1], parts[2]
		state.SetTestHook(func(m, p string) {
			if m == moment && p == path {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		})
		if err := upgradeKinds[kind].write(filepath.Dir(path)); err != nil {
			t.Fatal(err)
		}
		t.Fatal("not killed")
	}
	for kind, k := range upgradeKinds {
		old, err := os.ReadFile(k.fixture)
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range []struct{ moment, file string }{
			{"temp-written", k.name + ".v1.bak"},
			{"renamed", k.name + ".v1.bak"},
			{"backup-kept", k.name + ".v1.bak"},
			{"temp-written", k.name},
			{"renamed", k.name},
		} {
			t.Run(kind+" "+at.moment+" "+at.file, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "fleet")
				if err := state.EnsureDir(dir); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, k.name)
				if err := state.WriteFileAtomic(path, old); err != nil {
					t.Fatal(err)
				}
				want, err := k.read(dir)
				if err != nil || want == 0 {
					t.Fatalf("the fixture reads as %d entries: %v", want, err)
				}
				cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringRealUpgrade_O5$", "-test.count=1")
				cmd.Env = append(os.Environ(), killUpgradeEnv+"="+kind+" "+at.moment+" "+filepath.Join(dir, at.file))
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the child was not killed: %v\n%s", err, out)
				}
				n, err := k.read(dir)
				if err != nil || n < want {
					t.Fatalf("after the kill %s reads as %d entries (want %d or more): %v", path, n, want, err)
				}
				if b, err := os.ReadFile(state.BackupName(path, 1)); err == nil && !bytes.Equal(b, old) {
					t.Fatalf("after the kill the backup holds\n%s\nwant the old file", b)
				}
				if err := k.write(dir); err != nil {
					t.Fatalf("the write again after the kill: %v", err)
				}
				now, _ := os.ReadFile(path)
				if f, err := state.FormatOf(path, now, 2); err != nil || f != 2 {
					t.Fatalf("after the write again %s is format %d: %v", path, f, err)
				}
				if b, err := os.ReadFile(state.BackupName(path, 1)); err != nil || !bytes.Equal(b, old) {
					t.Fatalf("after the write again the backup holds\n%s\n(%v); want the old file", b, err)
				}
				if _, err := state.RemoveWriteLeftovers(dir, time.Now().Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
				entries, _ := os.ReadDir(dir)
				for _, e := range entries {
					switch e.Name() {
					case k.name, k.name + ".v1.bak", pairing.LockFile:
					default:
						t.Errorf("%s is left in the folder", e.Name())
					}
				}
			})
		}
	}
}
