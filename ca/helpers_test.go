package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/testlog"
)

// testCA is an Authority opened in a fresh folder, with its log and a clock the test can move.
type testCA struct {
	*Authority
	dir string
	log *testlog.Buffer
}

// fakeClock is the clock Options.Now reads; zero means the real time.
type fakeClock struct{ t atomic.Pointer[time.Time] }

func (c *fakeClock) Now() time.Time {
	if p := c.t.Load(); p != nil {
		return *p
	}
	return time.Now()
}

func (c *fakeClock) Set(t time.Time) { c.t.Store(&t) }
func (c *fakeClock) Real()           { c.t.Store(nil) }

func openCA(t *testing.T, dir, ip string, clock *fakeClock) (*testCA, error) {
	t.Helper()
	buf := &testlog.Buffer{}
	opts := Options{Logger: slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if clock != nil {
		opts.Now = clock.Now
	}
	a, err := Open(context.Background(), dir, netip.MustParseAddr(ip), opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { a.Close() })
	return &testCA{Authority: a, dir: dir, log: buf}, nil
}

func mustOpen(t *testing.T, dir, ip string, clock *fakeClock) *testCA {
	t.Helper()
	a, err := openCA(t, dir, ip, clock)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", dir, ip, err)
	}
	return a
}

func newDir(t *testing.T) string { return filepath.Join(t.TempDir(), "reach") }

// leaf is the certificate the Authority serves now.
func (a *testCA) leaf(t *testing.T) *x509.Certificate {
	t.Helper()
	c, err := a.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf == nil {
		t.Fatal("served certificate has no parsed Leaf")
	}
	return c.Leaf
}

// rootPool holds only the Authority's root, as a phone that installed it does.
func (a *testCA) rootPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Root())
	return p
}

// forge signs a leaf for ips and dnsNames with the root's key, as a thief of the root key would.
func (a *testCA) forge(t *testing.T, ips []string, dnsNames []string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return a.forgeTLS(t, key, ips, dnsNames).Leaf
}

func (a *testCA) forgeTLS(t *testing.T, key *ecdsa.PrivateKey, ips []string, dnsNames []string) tls.Certificate {
	t.Helper()
	return a.forgeWith(t, key, func(c *x509.Certificate) {
		c.DNSNames = dnsNames
		for _, s := range ips {
			c.IPAddresses = append(c.IPAddresses, net.ParseIP(s))
		}
	})
}

// forgeWith signs with the root's key, as a thief of the root key would, a day-long leaf for
// server authentication that names nothing, after edit has changed it.
func (a *testCA) forgeWith(t *testing.T, key *ecdsa.PrivateKey, edit func(*x509.Certificate)) tls.Certificate {
	t.Helper()
	serial, _ := randomSerial()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.root.cert, &key.PublicKey, a.root.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// walkModes returns every path under dir with its mode.
func walkModes(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	m := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m[p] = info.Mode()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// assertPrivateTree fails unless every folder under dir is 0700 and every file 0600.
func assertPrivateTree(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	m := walkModes(t, dir)
	for p, mode := range m {
		switch {
		case mode.IsDir():
			if mode.Perm() != 0o700 {
				t.Errorf("folder %s is %04o, want 0700", p, mode.Perm())
			}
		case mode.IsRegular():
			if mode.Perm() != 0o600 {
				t.Errorf("file %s is %04o, want 0600", p, mode.Perm())
			}
		default:
			t.Errorf("%s is %v, neither a folder nor a regular file", p, mode)
		}
	}
	return m
}

// verifyOpts is how a client trusting only the root verifies the door at ip.
func (a *testCA) verifyOpts(ip string) x509.VerifyOptions {
	return x509.VerifyOptions{DNSName: ip, Roots: a.rootPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}
