package ca

import (
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// TestReadFingerprint_R4: ReadFingerprint names the root Open uses for the address, the new one
// after a move and the old one again when the door moves back; it creates nothing when there is
// no CA yet, says ErrNoRoot for an address no root covers, and refuses a folder too open (F1).
func TestReadFingerprint_R4(t *testing.T) {
	dir := newDir(t)
	if _, err := ReadFingerprint(dir, netip.MustParseAddr("192.168.1.20")); !errors.Is(err, ErrNoRoot) {
		t.Fatalf("no CA yet: %v, want ErrNoRoot", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFingerprint created %s", dir)
	}

	a := mustOpen(t, dir, "192.168.1.20", nil)
	before := walkModes(t, dir)
	fp, err := ReadFingerprint(dir, netip.MustParseAddr("192.168.1.20"))
	if err != nil || fp != a.Fingerprint() {
		t.Fatalf("ReadFingerprint = %q, %v; want %q", fp, err, a.Fingerprint())
	}
	if _, err := ReadFingerprint(dir, netip.MustParseAddr("192.168.1.21")); !errors.Is(err, ErrNoRoot) {
		t.Errorf("another address: %v, want ErrNoRoot", err)
	}
	if after := walkModes(t, dir); !maps.Equal(after, before) {
		t.Errorf("ReadFingerprint changed the folder: %v -> %v", before, after)
	}

	b := mustOpen(t, dir, "10.0.0.7", nil)
	if fp, _ := ReadFingerprint(dir, netip.MustParseAddr("10.0.0.7")); fp != b.Fingerprint() || fp == a.Fingerprint() {
		t.Errorf("after a move: %q, want %q", fp, b.Fingerprint())
	}
	if fp, _ := ReadFingerprint(dir, netip.MustParseAddr("::ffff:192.168.1.20")); fp != a.Fingerprint() {
		t.Errorf("moving back (a mapped address): %q, want the first root %q", fp, a.Fingerprint())
	}

	if err := os.Chmod(filepath.Join(dir, rootsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFingerprint(dir, netip.MustParseAddr("192.168.1.20")); err == nil || errors.Is(err, ErrNoRoot) {
		t.Errorf("F1 a roots folder 0755: %v, want a mode error", err)
	}
}
