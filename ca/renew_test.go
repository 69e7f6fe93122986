package ca

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// issuedAtFor returns the clock time at which the issuer must sign a leaf so that, at the real
// time now, it has left of its life.
func issuedAtFor(left time.Duration) time.Time {
	return time.Now().Add(left - LeafLifetime + backdate)
}

// TestRenewalAtAThirdLeft_R4: a stored leaf with a little more than a third of its life left is
// kept; one with a little less is renewed by certmagic when the door opens. certmagic reads the
// real clock (it cannot be injected), so the test makes the leaves old instead: they are signed
// with a clock set in the past. The margin is an hour either side of the boundary.
func TestRenewalAtAThirdLeft_R4(t *testing.T) {
	cases := []struct {
		name    string
		left    time.Duration
		ip      string
		renewed bool
	}{
		{"a third left plus an hour", LeafLifetime/3 + time.Hour, "127.0.0.10", false},
		{"a third left minus an hour", LeafLifetime/3 - time.Hour, "127.0.0.11", true},
		{"expired", -time.Hour, "127.0.0.12", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			clock := &fakeClock{}
			clock.Set(issuedAtFor(tc.left))
			a := mustOpen(t, dir, tc.ip, clock)
			old := a.leaf(t)
			a.Close()

			b := mustOpen(t, dir, tc.ip, nil)
			cur := b.leaf(t)
			renewed := cur.SerialNumber.Cmp(old.SerialNumber) != 0
			if renewed != tc.renewed {
				t.Fatalf("renewed = %v, want %v (old leaf expires %v)", renewed, tc.renewed, old.NotAfter)
			}
			issued := len(b.log.Events("fleet.reach-leaf-issued"))
			if tc.renewed {
				if issued != 1 || !cur.NotAfter.After(old.NotAfter) || cur.NotAfter.Sub(cur.NotBefore) > LeafLifetime {
					t.Errorf("renewal: %d issued, new leaf %v-%v, old expired %v", issued, cur.NotBefore, cur.NotAfter, old.NotAfter)
				}
				if _, err := cur.Verify(b.verifyOpts(tc.ip)); err != nil {
					t.Errorf("renewed leaf: %v", err)
				}
			} else if issued != 0 {
				t.Errorf("%d leaves issued for a leaf not yet due", issued)
			}
			b.Close()
			// After a renewal too, nothing under the folder is wider than 0700/0600 (F1).
			assertPrivateTree(t, dir)
		})
	}
}

// TestBackgroundRenewal_R4: certmagic's maintenance (the path a running door takes) renews a
// due leaf and the door serves the new one at once.
func TestBackgroundRenewal_R4(t *testing.T) {
	dir := newDir(t)
	clock := &fakeClock{}
	clock.Set(issuedAtFor(LeafLifetime/3 - time.Hour))
	a := mustOpen(t, dir, "127.0.0.13", clock)
	old := a.leaf(t)
	clock.Real()

	// What the maintenance ticker does every 10 minutes, run now.
	if err := a.cache.RenewManagedCertificates(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The renewal runs as certmagic job; wait for the served leaf to change.
	deadline := time.Now().Add(30 * time.Second)
	for a.leaf(t).SerialNumber.Cmp(old.SerialNumber) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("leaf never renewed; log:\n%s", a.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cur := a.leaf(t)
	if _, err := cur.Verify(a.verifyOpts("127.0.0.13")); err != nil {
		t.Fatal(err)
	}
	if !a.LeafExpiry().Equal(cur.NotAfter) {
		t.Errorf("LeafExpiry %v, served leaf %v", a.LeafExpiry(), cur.NotAfter)
	}
	m := assertPrivateTree(t, dir)
	locks, _ := filepath.Glob(filepath.Join(dir, leafDir, "locks", "*.lock"))
	if len(locks) == 0 {
		t.Errorf("no lock file under locks/ (the test must cover them): %v", m)
	}
}
