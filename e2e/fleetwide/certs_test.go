package fleetwide

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"sync"
	"testing"
	"time"

	"tailscale.com/ipn/ipnlocal"
)

// testCA issues the certificates that Serve presents for HTTPS on the test tailnet, in place of
// Let's Encrypt: one root, and one leaf key shared by every leaf, so that the browser can trust
// exactly that key (--ignore-certificate-errors-spki-list) and nothing else.
type testCA struct {
	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey
	pool    *x509.CertPool

	mu     sync.Mutex
	issued map[string]*ipnlocal.TLSCertKeyPair
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fleet e2e test root"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(root)
	return &testCA{root: root, rootKey: rootKey, leafKey: leafKey, pool: pool, issued: map[string]*ipnlocal.TLSCertKeyPair{}}
}

// certFor is the certificate for one domain, issued once; it is the function Serve's certificate
// lookup calls (ipnlocal's ConfigureCerts).
func (ca *testCA) certFor(domain string) (*ipnlocal.TLSCertKeyPair, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if p, ok := ca.issued[domain]; ok {
		return p, nil
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: domain},
		DNSNames:     []string{domain},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.root, &ca.leafKey.PublicKey, ca.rootKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(ca.leafKey)
	if err != nil {
		return nil, err
	}
	p := &ipnlocal.TLSCertKeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	ca.issued[domain] = p
	return p, nil
}

// leafSPKI is the base64 SHA-256 of the leaves' public key, as Chromium's
// --ignore-certificate-errors-spki-list takes it.
func (ca *testCA) leafSPKI(t *testing.T) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&ca.leafKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(sum[:])
}
