package pairing

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

// pairedMany writes a register of n devices straight to dir (pairing them one by one would
// rewrite the file n times) and returns the credentials, in the order of the file.
func pairedMany(tb testing.TB, dir string, n int) []string {
	tb.Helper()
	if err := state.EnsureDir(dir); err != nil {
		tb.Fatal(err)
	}
	f := &devicesFile{Version: fileVersion}
	creds := make([]string, n)
	for i := range n {
		raw := make([]byte, CredentialBytes)
		copy(raw, fmt.Sprintf("credential %d", i))
		creds[i] = base64.RawURLEncoding.EncodeToString(raw)
		sum := sha256.Sum256([]byte(creds[i]))
		id := make([]byte, 6)
		for j, v := 0, i; j < 6; j, v = j+1, v/32 {
			id[5-j] = id6Alphabet[v%32]
		}
		name := fmt.Sprintf("phone-%05d", i)
		f.Devices = append(f.Devices, deviceRecord{ID6: string(id), Name: name, Slug: name,
			SHA256: hex.EncodeToString(sum[:]), Created: t0.Add(time.Duration(i) * time.Second)})
	}
	if err := writeJSON(filepath.Join(dir, DevicesFile), f); err != nil {
		tb.Fatal(err)
	}
	return creds
}

// BenchmarkAuthenticate is the device check of every direct-reach request with 10 and 10,000
// paired devices (SPEC P1: O(1)), and the same check when the device's last seen is due to be
// written (once per device per LastSeenInterval): the file holds every device, so its write is
// O(devices), and it must not be on the request's path.
//
//	go test -run='^$' -bench=Authenticate ./pairing
func BenchmarkAuthenticate(b *testing.B) {
	for _, n := range []int{10, 10000} {
		dir := filepath.Join(b.TempDir(), "reach")
		creds := pairedMany(b, dir, n)
		r, err := OpenRegister(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(r.WaitWrites)
		last := creds[n-1]
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			now := t0
			r.Authenticate(last, now, "192.0.2.1:1")
			r.WaitWrites()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				if _, ok := r.Authenticate(last, now, "192.0.2.1:1"); !ok {
					b.Fatal("not believed")
				}
			}
		})
		b.Run(fmt.Sprintf("devices=%d/last-seen-due", n), func(b *testing.B) {
			now := t0.Add(time.Hour)
			for b.Loop() {
				now = now.Add(LastSeenInterval)
				if _, ok := r.Authenticate(last, now, "192.0.2.1:1"); !ok {
					b.Fatal("not believed")
				}
			}
			b.StopTimer()
			r.WaitWrites()
		})
	}
}

// TestLastSeenWrittenNotReadBack_R8: the register's own write of last seen is not read back (the
// file it wrote is what memory holds), and a request that finds the file changed by another
// process loads it once, whatever else waits for it.
func TestLastSeenWrittenNotReadBack_R8(t *testing.T) {
	dir := reachDir(t)
	creds := pairedMany(t, dir, 3)
	r, err := OpenRegister(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.WaitWrites)
	held := map[string]*liveDevice{}
	for id, d := range r.byID {
		held[id] = d
	}
	r.Authenticate(creds[0], t0, "192.0.2.1:1")
	r.WaitWrites()
	if list, _ := ListDevices(dir); !list[0].LastSeen.Equal(t0) {
		t.Fatalf("R8 last seen not written: %+v", list[0])
	}
	if st := statFile(r.path); !r.fresh(st) {
		t.Error("the register's own write is taken for another process's change")
	}
	for id, d := range r.byID {
		if held[id] != d {
			t.Errorf("%s: the register read its own write back", id)
		}
	}
	if err := RevokeDevice(dir, r.Devices()[1].ID6); err != nil { // another process
		t.Fatal(err)
	}
	if _, ok := r.Authenticate(creds[1], t0, "192.0.2.1:1"); ok {
		t.Error("R8 a device revoked by another process is believed")
	}
	if _, ok := r.Authenticate(creds[2], t0, "192.0.2.1:1"); !ok {
		t.Error("R8 the other devices are no longer believed")
	}
}
