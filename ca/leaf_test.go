package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// stopAtCert is the CA's own storage, except that the renewal that stores a leaf certificate
// (a .crt under certificates/) stops dead there, as a process killed at that moment would: no
// rollback, no later Store. Everything before it — the renewal's new private key — is on disk.
type stopAtCert struct {
	*storage
	stopped atomic.Bool
}

func (s *stopAtCert) Store(ctx context.Context, key string, value []byte) error {
	if strings.HasPrefix(key, "certificates/") && strings.HasSuffix(key, ".crt") {
		s.stopped.Store(true)
		runtime.Goexit() // the "crash": nothing after this point of the renewal runs
	}
	return s.storage.Store(ctx, key, value)
}

// readTree returns every regular file under dir with its contents.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for p, mode := range walkModes(t, dir) {
		if mode.IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m[p] = string(b)
		}
	}
	return m
}

// assertSetAside checks what Open did with the unusable leaf that was in site (whose files were
// before): one fleet.reach-leaf-set-aside warning naming site and the folder it was moved to,
// that folder beside site holding exactly those files, untouched; the roots exactly as they were
// (rootsBefore); a new leaf from the same root served and stored; every mode still private (F1).
func assertSetAside(t *testing.T, b *testCA, site string, before, rootsBefore map[string]string, fingerprint string) {
	t.Helper()
	ev := b.log.Events("fleet.reach-leaf-set-aside")
	if len(ev) != 1 {
		t.Fatalf("%d set-aside warnings, want 1; log:\n%s", len(ev), b.log)
	}
	moved, _ := ev[0]["moved_to"].(string)
	if ev[0]["level"] != "WARN" || ev[0]["folder"] != site || filepath.Dir(moved) != filepath.Dir(site) ||
		!strings.HasPrefix(filepath.Base(moved), filepath.Base(site)+".broken-") || !strings.HasSuffix(moved, "Z") {
		t.Errorf("set-aside warning %v: want WARN naming %s and a %s.broken-<UTC time> beside it", ev[0], site, filepath.Base(site))
	}
	kept := readTree(t, moved)
	want := map[string]string{}
	for p, data := range before {
		want[filepath.Join(moved, filepath.Base(p))] = data
	}
	if !maps.Equal(kept, want) {
		t.Errorf("the moved folder holds %d files, want the %d that were there, as they were", len(kept), len(want))
	}
	if after := readTree(t, filepath.Join(b.dir, rootsDir)); !maps.Equal(after, rootsBefore) {
		t.Errorf("the roots changed: %d files before, %d after (R4: never touched)", len(rootsBefore), len(after))
	}
	if b.Fingerprint() != fingerprint {
		t.Errorf("root %s, want the same root %s", b.Fingerprint(), fingerprint)
	}
	if n := len(b.log.Events("fleet.reach-leaf-issued")); n != 1 {
		t.Errorf("%d leaves issued, want 1", n)
	}
	leaf := b.leaf(t)
	if _, err := leaf.Verify(b.verifyOpts(b.name)); err != nil {
		t.Errorf("served leaf: %v", err)
	}
	for _, ext := range []string{".crt", ".key", ".json"} {
		if _, err := os.Stat(filepath.Join(site, b.name+ext)); err != nil {
			t.Errorf("the new leaf is not stored: %v", err)
		}
	}
	assertPrivateTree(t, b.dir)
}

// TestRenewalKilledBetweenKeyAndCertSetAside_F2: certmagic renews the door's leaf with a fresh
// key and saves it as three atomic writes (.key, .crt, .json). A supervisor killed between the
// first two leaves the new key beside the old certificate: every file parses, they are no longer
// a pair, and certmagic refuses them ("private key does not match public key") at every start.
// Open moves that folder aside (kept, never deleted, named in a warning) and issues a new leaf
// from the same root, which is not touched: the door opens by itself. The next Open finds the
// new leaf and changes nothing.
func TestRenewalKilledBetweenKeyAndCertSetAside_F2(t *testing.T) {
	const ip = "127.0.0.77"
	dir := newDir(t)
	clock := &fakeClock{}
	clock.Set(issuedAtFor(LeafLifetime/3 - time.Hour)) // a leaf that is due for renewal
	a := mustOpen(t, dir, ip, clock)
	old := a.leaf(t)
	a.Close()
	clock.Real()

	// The renewal a running door's maintenance makes, on the same folder, stopped at the .crt.
	st := &stopAtCert{storage: a.storage}
	zl := zap.NewNop()
	var cfg *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return cfg, nil },
		Logger:           zl,
	})
	defer cache.Stop()
	cfg = certmagic.New(cache, certmagic.Config{
		RenewalWindowRatio: RenewalWindowRatio,
		Issuers:            []certmagic.Issuer{&issuer{a: a.Authority}},
		KeySource:          certmagic.StandardKeyGenerator{KeyType: certmagic.P256},
		Storage:            st,
		OCSP:               certmagic.OCSPConfig{DisableStapling: true},
		DisableARI:         true,
		Logger:             zl,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfg.RenewCertSync(context.Background(), ip, false)
	}()
	<-done
	if !st.stopped.Load() {
		t.Fatal("the renewal never reached the certificate's Store; the test proves nothing")
	}
	// The kernel drops a dead process's flocks.
	st.mu.Lock()
	for name, f := range st.held {
		f.Close()
		delete(st.held, name)
	}
	st.mu.Unlock()

	site, _ := a.leafSite()
	before := readTree(t, site)
	crt := filepath.Join(site, ip+".crt")
	if got, _ := os.ReadFile(crt); !strings.Contains(string(got), "CERTIFICATE") || len(before) != 3 {
		t.Fatalf("the crash did not leave the three files: %v", before)
	}
	rootsBefore := readTree(t, filepath.Join(dir, rootsDir))

	// fleet serve starts again: the door must open (the leaf is disposable; the root is intact).
	b, err := openCA(t, dir, ip, nil)
	if err != nil {
		t.Fatalf("after a renewal killed between its key and its certificate, Open = %v: the door stays shut for good", err)
	}
	assertSetAside(t, b, site, before, rootsBefore, a.Fingerprint())
	if b.leaf(t).Equal(old) {
		t.Error("the old leaf is served")
	}
	if ev := b.log.Events("fleet.reach-leaf-set-aside"); len(ev) == 1 && !strings.Contains(ev[0]["why"].(string), "does not match") {
		t.Errorf("why = %q, want the mismatch named", ev[0]["why"])
	}
	served := b.leaf(t)
	b.Close()

	c := mustOpen(t, dir, ip, nil)
	if n := len(c.log.Events("fleet.reach-leaf-set-aside")); n != 0 || !c.leaf(t).Equal(served) {
		t.Errorf("the next Open: %d set-aside warnings, same leaf %v; want none and the same leaf", n, c.leaf(t).Equal(served))
	}
}

// TestUnusableLeafSetAsideRootKept_F2: a stored leaf that cannot be used — one of its files
// missing (what a crash or a renewal's rollback leaves), its key and certificate not a pair, or
// a file that does not parse at all — is moved aside with everything in its folder, as it was,
// and named in one warning; a new leaf is issued from the same root, and the root's files are
// byte for byte what they were (R4). The leaf is disposable; the root is what phones trust.
func TestUnusableLeafSetAsideRootKept_F2(t *testing.T) {
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKeyPEM, err := certmagic.PEMEncodePrivateKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ext  string
		data []byte // nil: the file is removed
		why  string
	}{
		{"a key that is not the certificate's", ".key", otherKeyPEM, "private key does not match public key"},
		{"the certificate missing", ".crt", nil, ".crt missing"},
		{"the key missing", ".key", nil, ".key missing"},
		{"the metadata missing", ".json", nil, ".json missing"},
		{"a certificate that does not parse", ".crt", []byte("garbage"), "PEM data in certificate"},
		{"a key that does not parse", ".key", []byte("garbage"), "PEM data in key"},
		{"metadata that does not parse", ".json", []byte("garbage"), "metadata: invalid character"},
		{"an empty certificate", ".crt", []byte{}, "PEM data in certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ip = "127.0.0.78"
			dir := newDir(t)
			a := mustOpen(t, dir, ip, nil)
			a.Close()
			site, _ := a.leafSite()
			p := filepath.Join(site, ip+tc.ext)
			if tc.data == nil {
				err = os.Remove(p)
			} else {
				err = os.WriteFile(p, tc.data, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			before := readTree(t, site)
			rootsBefore := readTree(t, filepath.Join(dir, rootsDir))

			b, err := openCA(t, dir, ip, nil)
			if err != nil {
				t.Fatalf("Open = %v, want the leaf set aside and a new one made", err)
			}
			assertSetAside(t, b, site, before, rootsBefore, a.Fingerprint())
			if ev := b.log.Events("fleet.reach-leaf-set-aside"); len(ev) == 1 && !strings.Contains(ev[0]["why"].(string), tc.why) {
				t.Errorf("why = %q, want it to say %q", ev[0]["why"], tc.why)
			}
			if b.leaf(t).Equal(a.leaf(t)) {
				t.Error("the old leaf is served")
			}
		})
	}
}

// TestSetAsideTwiceKeepsBoth_F2: two leaves set aside in the same second get two folders; the
// first is never overwritten.
func TestSetAsideTwiceKeepsBoth_F2(t *testing.T) {
	parent := t.TempDir()
	site := filepath.Join(parent, "127.0.0.79")
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var moved []string
	for i := range 2 {
		if err := os.Mkdir(site, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(site, "x"), []byte{byte('a' + i)}, 0o600); err != nil {
			t.Fatal(err)
		}
		to, err := moveAside(site, now)
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, to)
	}
	want := []string{site + ".broken-20300102T030405Z", site + ".broken-20300102T030405Z-2"}
	if !slices.Equal(moved, want) {
		t.Fatalf("moved to %q, want %q", moved, want)
	}
	for i, m := range moved {
		if b, _ := os.ReadFile(filepath.Join(m, "x")); string(b) != string(rune('a'+i)) {
			t.Errorf("%s holds %q", m, b)
		}
	}
}
