package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/state"
)

// TestStorage_F1_F2: certmagic's view of the folder: private modes, refusal of a too-open file
// (never replaced), no key outside the folder, missing keys as fs.ErrNotExist.
func TestStorage_F1_F2(t *testing.T) {
	ctx := context.Background()
	s, err := newStorage(newDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Store(ctx, "certificates/x/y/z.crt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx, "certificates/x/y/z.crt"); err != nil || string(got) != "hello" {
		t.Fatalf("Load = %q, %v", got, err)
	}
	assertPrivateTree(t, s.root)
	if _, err := s.Load(ctx, "certificates/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing key: %v", err)
	}
	if keys, err := s.List(ctx, "certificates", true); err != nil || strings.Join(keys, ",") != "certificates/x,certificates/x/y,certificates/x/y/z.crt" {
		t.Errorf("List = %v, %v", keys, err)
	}
	for _, bad := range []string{"", "../escape", "/etc/passwd", "a/../../b"} {
		if err := s.Store(ctx, bad, []byte("x")); err == nil {
			t.Errorf("Store(%q) succeeded", bad)
		}
	}

	p := filepath.Join(s.root, "certificates", "x", "y", "z.crt")
	os.Chmod(p, 0o644)
	var me *state.ModeError
	if _, err := s.Load(ctx, "certificates/x/y/z.crt"); !errors.As(err, &me) {
		t.Errorf("Load of a 0644 file: %v", err)
	}
	if err := s.Store(ctx, "certificates/x/y/z.crt", []byte("new")); !errors.As(err, &me) {
		t.Errorf("Store over a 0644 file: %v", err)
	}
	if data, _ := os.ReadFile(p); string(data) != "hello" {
		t.Errorf("a refused file was replaced: %q", data)
	}

	if err := s.Delete(ctx, "certificates/x"); err != nil || s.Exists(ctx, "certificates/x") {
		t.Errorf("Delete: %v", err)
	}
	if err := s.Delete(ctx, "certificates/x"); err != nil {
		t.Errorf("Delete of a missing key: %v", err)
	}
}

// TestStorageLocks: a held lock is exclusive within the process and across processes (another
// open file, as another fleet would have), Lock honours its context, and the lock file is 0600.
func TestStorageLocks(t *testing.T) {
	ctx := context.Background()
	dir := newDir(t)
	s, _ := newStorage(dir)
	other, _ := newStorage(dir) // another process's view: its own descriptors
	if err := s.Lock(ctx, "issue_cert_127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.TryLock(ctx, "issue_cert_127.0.0.1"); ok || err != nil {
		t.Errorf("TryLock of a held lock = %v, %v", ok, err)
	}
	if ok, err := other.TryLock(ctx, "issue_cert_127.0.0.1"); ok || err != nil {
		t.Errorf("TryLock through another descriptor = %v, %v", ok, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := other.Lock(cctx, "issue_cert_127.0.0.1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context = %v", err)
	}
	if err := s.Unlock(ctx, "issue_cert_127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := other.TryLock(ctx, "issue_cert_127.0.0.1"); !ok || err != nil {
		t.Errorf("TryLock after Unlock = %v, %v", ok, err)
	}
	other.Unlock(ctx, "issue_cert_127.0.0.1")
	assertPrivateTree(t, dir)

	lock := filepath.Join(dir, "locks", "issue_cert_127.0.0.1.lock")
	os.Chmod(lock, 0o644)
	var me *state.ModeError
	if _, err := s.TryLock(ctx, "issue_cert_127.0.0.1"); !errors.As(err, &me) {
		t.Errorf("TryLock with a 0644 lock file = %v", err)
	}
}

// TestIssuerSignsOnlyItsAddress_R4: the issuer refuses a request for anything but the one IP
// with a P-256 key.
func TestIssuerSignsOnlyItsAddress_R4(t *testing.T) {
	a := mustOpen(t, newDir(t), "127.0.0.30", nil)
	iss := &issuer{a: a.Authority}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	csr := func(key *ecdsa.PrivateKey, ips []string, dns []string) *x509.CertificateRequest {
		tmpl := &x509.CertificateRequest{DNSNames: dns}
		for _, s := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(s))
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := x509.ParseCertificateRequest(der)
		return r
	}
	if _, err := iss.Issue(context.Background(), csr(p256, []string{"127.0.0.30"}, nil)); err != nil {
		t.Fatalf("the right request: %v", err)
	}
	for name, r := range map[string]*x509.CertificateRequest{
		"another IP":      csr(p256, []string{"127.0.0.31"}, nil),
		"two IPs":         csr(p256, []string{"127.0.0.30", "127.0.0.31"}, nil),
		"a DNS name":      csr(p256, nil, []string{"localhost"}),
		"IP and DNS name": csr(p256, []string{"127.0.0.30"}, []string{"localhost"}),
		"a P-384 key":     csr(p384, []string{"127.0.0.30"}, nil),
	} {
		if _, err := iss.Issue(context.Background(), r); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}
