package ca

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestNewRootWhenAddressMoves_R4: moving the door to an address outside the root's constraints
// makes a new root, loudly; the old root stays under its fingerprint, byte for byte; moving back
// finds the old root again instead of making a third.
func TestNewRootWhenAddressMoves_R4(t *testing.T) {
	dir := newDir(t)
	a := mustOpen(t, dir, "192.168.1.20", nil)
	fp1, leaf1 := a.Fingerprint(), a.leaf(t)
	if ev := a.log.Events("fleet.reach-root-created"); len(ev) != 1 || ev[0]["level"] != "INFO" {
		t.Errorf("first root: events %v", ev)
	}
	before := readRoots(t, dir)
	a.Close()

	b := mustOpen(t, dir, "192.168.1.21", nil)
	if b.Fingerprint() == fp1 {
		t.Fatal("the moved door kept a root that does not cover its address")
	}
	ev := b.log.Events("fleet.reach-root-new")
	if len(ev) != 1 || ev[0]["level"] != "WARN" {
		t.Fatalf("new root not logged as a warning: %v\n%s", ev, b.log.String())
	}
	if kept, _ := ev[0]["kept"].([]any); !slices.Contains(kept, any(fp1)) {
		t.Errorf("warning does not name the kept root %s: %v", fp1, ev[0])
	}
	after := readRoots(t, dir)
	for name, data := range before {
		if after[name] != data {
			t.Errorf("old root file %s changed or vanished", name)
		}
	}
	if len(after) != 4 {
		t.Errorf("roots/ holds %d files, want 2 roots × (crt, key)", len(after))
	}
	// The new leaf is for the new address and only the new root vouches for it.
	leaf2 := b.leaf(t)
	if _, err := leaf2.Verify(b.verifyOpts("192.168.1.21")); err != nil {
		t.Errorf("new leaf: %v", err)
	}
	if _, err := leaf2.Verify(a.verifyOpts("192.168.1.21")); err == nil {
		t.Error("the old root vouches for the new address")
	}
	b.Close()

	// Back to the first address: the root phones already trust, and its leaf.
	c := mustOpen(t, dir, "192.168.1.20", nil)
	if c.Fingerprint() != fp1 {
		t.Errorf("moving back made root %s, want the kept %s", c.Fingerprint(), fp1)
	}
	if n := len(readRoots(t, dir)); n != 4 {
		t.Errorf("roots/ holds %d files after moving back, want 4", n)
	}
	if !c.leaf(t).Equal(leaf1) {
		t.Error("moving back did not find the stored leaf of the first root")
	}
	if len(c.log.Events("fleet.reach-root-new"))+len(c.log.Events("fleet.reach-root-created")) != 0 {
		t.Errorf("moving back made a root: %s", c.log.String())
	}
}

func readRoots(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, rootsDir))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, rootsDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(data)
	}
	return m
}
