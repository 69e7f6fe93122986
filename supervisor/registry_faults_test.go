package supervisor

// Fault tests (SPEC F2) for the console registry: consoles.json cut short or spoiled is refused
// with an error that names it and is kept byte for byte; a full disk while writing it leaves the
// old file and refuses the change. The full disk is a real one: a small tmpfs, filled up
// (internal/fulldisk; skipped where mounting is not permitted).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/fulldisk"
	"github.com/phase-console/fleet/internal/state"
)

// registrySpoilings are the ways a file gets spoiled besides being cut short: what a crash can
// leave on some filesystems (a block of NULs where the data was not written), a bad sector, a
// careless edit.
func registrySpoilings(good []byte) map[string][]byte {
	quote := bytes.Clone(good)
	quote[bytes.IndexByte(quote, '"')] ^= 0x80
	half := bytes.Clone(good)
	clear(half[len(half)/2:])
	return map[string][]byte{
		"all NULs":                          make([]byte, len(good)),
		"NULs after the middle":             half,
		"a quote mark with top bit flipped": quote,
		"garbage after it":                  append(bytes.Clone(good), "\x00\x01garbage"...),
		"two copies":                        append(bytes.Clone(good), good...),
	}
}

// goodRegistry writes a registry of three consoles at path and returns its bytes.
func goodRegistry(t *testing.T, path string) []byte {
	t.Helper()
	r, err := LoadRegistry(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.dial = func(ctx context.Context, addr string) error { return errors.New("not probed") }
	for i, id := range []string{"alpha", "beta", "gamma"} {
		if _, err := r.Put(Console{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", 9001+i), Name: strings.ToUpper(id)}); err != nil {
			t.Fatal(err)
		}
	}
	r.probes.Wait()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTruncatedRegistry_F2: consoles.json cut short at every byte before its last brace, or
// spoiled, is refused by LoadRegistry with an error that names it, and the file is kept byte for
// byte with nothing left beside it. For the spoilings and some cuts the whole supervisor is
// started too: New refuses to start, naming the file, and rewrites nothing.
func TestTruncatedRegistry_F2(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	if _, err := newServer(t, home, nil); err != nil {
		t.Fatal(err)
	}
	dir := state.FleetDir(home)
	path := filepath.Join(dir, state.RegistryFile)
	good := goodRegistry(t, path)
	try := func(t *testing.T, bad []byte, whole bool) {
		t.Helper()
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := LoadRegistry(path, nil); err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("LoadRegistry = %v (%d consoles), %v; want an error naming %s", r != nil, len(r.snapshot()), err, path)
		}
		if whole {
			if _, err := newServer(t, home, nil); err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("New: %v; want an error naming %s", err, path)
			}
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, bad) {
			t.Fatalf("consoles.json was changed to %q, want it kept as %q", b, bad)
		}
		for _, e := range mustReadDir(t, dir) {
			if strings.Contains(e, ".tmp") {
				t.Fatalf("left behind in %s: %s", dir, e)
			}
		}
	}
	end := bytes.LastIndexByte(good, '}')
	for n := 0; n < end; n++ {
		try(t, good[:n], n%50 == 0)
		if t.Failed() {
			t.Fatalf("at the cut after %d of %d bytes", n, len(good))
		}
	}
	for name, bad := range registrySpoilings(good) {
		t.Run(name, func(t *testing.T) { try(t, bad, true) })
	}
}

// TestFullDiskRegistry_F2: with the disk full, registering, changing and removing a console each
// fail with an error, consoles.json stays byte for byte with no temporary file beside it, and the
// routes in memory are those of the file. Run with no room at all and with one page of room for a
// registry bigger than that, so that the write fails part-way. With room again, it works.
func TestFullDiskRegistry_F2(t *testing.T) {
	for _, leave := range []int{0, 4096} {
		t.Run(fmt.Sprintf("%d bytes free", leave), func(t *testing.T) {
			mnt := fulldisk.Mount(t, 64<<10)
			path := filepath.Join(mnt, state.RegistryFile)
			r, err := LoadRegistry(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.dial = func(ctx context.Context, addr string) error { return errors.New("not probed") }
			for i := range 48 { // about 6 KiB: more than the page left free
				if _, err := r.Put(Console{ID: fmt.Sprintf("console-%02d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 9000+i), Name: "a console"}); err != nil {
					t.Fatal(err)
				}
			}
			r.probes.Wait()
			old, _ := os.ReadFile(path)
			if len(old) <= leave {
				t.Fatalf("the registry is %d bytes: too small to fail part-way", len(old))
			}
			filler := fulldisk.Fill(t, mnt, leave)

			for what, err := range map[string]error{
				"registering": second(r.Put(Console{ID: "new", Addr: "127.0.0.1:9999"})),
				"moving":      second(r.Put(Console{ID: "console-00", Addr: "127.0.0.1:9998"})),
				"removing":    second(r.Delete("console-01")),
			} {
				if err == nil || !strings.Contains(err.Error(), "no space left on device") {
					t.Errorf("%s on a full disk: %v; want the no-space error", what, err)
				}
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, old) {
				t.Fatalf("consoles.json changed on a full disk: %d bytes, was %d", len(b), len(old))
			}
			if got := mustReadDir(t, mnt); strings.Join(got, " ") != "consoles.json filler" {
				t.Fatalf("%s holds %q: a temporary file was left behind", mnt, got)
			}
			if _, ok := r.Get("new"); ok {
				t.Error("the refused registration is routed")
			}
			if c, ok := r.Get("console-00"); !ok || c.Addr != "127.0.0.1:9000" {
				t.Errorf("console-00 routes to %q after a refused move", c.Addr)
			}
			if _, ok := r.Get("console-01"); !ok {
				t.Error("the refused removal removed console-01")
			}

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Put(Console{ID: "new", Addr: "127.0.0.1:9999"}); err != nil {
				t.Fatalf("registering with room again: %v", err)
			}
			r.probes.Wait()
			if again, err := LoadRegistry(path, nil); err != nil || len(again.snapshot()) != 49 {
				t.Fatalf("reloaded with room again: %v", err)
			}
		})
	}
}

// TestFullDiskRegisterThroughDoor_F2: the same through the running supervisor's API: on a full
// disk POST /fleet/v1/consoles is refused (500 registry, one fleet.rejected line), the console
// is not routed and consoles.json is as it was.
func TestFullDiskRegisterThroughDoor_F2(t *testing.T) {
	mnt := fulldisk.Mount(t, 64<<10)
	d := startDoorAt(t, filepath.Join(mnt, "state"), doortest.NewFakeTailscaled())
	path := filepath.Join(state.FleetDir(d.home), state.RegistryFile)
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	filler := fulldisk.Fill(t, mnt, 0)
	defer os.Remove(filler)
	d.WantRejected(t, d.localReq("POST", "/fleet/v1/consoles", `{"id":"beta","addr":"127.0.0.1:9001"}`, d.bearer()),
		http.StatusInternalServerError, "registry")
	if _, ok := d.srv.registry.Get("beta"); ok {
		t.Error("the refused registration is routed")
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, old) {
		t.Fatalf("consoles.json changed on a full disk: %q, was %q", b, old)
	}
	if r := d.Raw(doortest.ServeReq("GET", "/c/alpha/still")); r.Status != http.StatusOK {
		t.Fatalf("alpha after the refused registration: %d %q", r.Status, r.Reason)
	}
}

func second[T any](_ T, err error) error { return err }

func mustReadDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
