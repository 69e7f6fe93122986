// Package testca is a certificate authority for tests: one ECDSA P-256 root, and leaves for
// DNS names signed by it (or by themselves), standing in for the public CA that a tailnet's HTTPS
// certificates come from. Tests trust its Pool in place of the system's roots. It is for tests
// only; nothing in the product imports it.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"time"
)

// A CA is a root and its key.
type CA struct {
	Root *x509.Certificate
	Pool *x509.CertPool // holds Root alone
	key  *ecdsa.PrivateKey
}

// New makes a root valid from an hour ago for a day. It panics if the system's randomness fails.
func New() *CA {
	key := newKey()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "fleet test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	root, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(root)
	return &CA{Root: root, Pool: pool, key: key}
}

// Leaf is a server certificate for name, valid from notBefore to notAfter, signed by the root —
// or by its own key when selfSigned, so that no root vouches for it.
func (ca *CA) Leaf(name string, notBefore, notAfter time.Time, selfSigned bool) tls.Certificate {
	cert, _, _ := ca.leaf(name, notBefore, notAfter, selfSigned)
	return cert
}

// LeafPEM is Leaf for a day from an hour ago, as PEM: the certificate and its key.
func (ca *CA) LeafPEM(name string) (certPEM, keyPEM []byte) {
	_, der, key := ca.leaf(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), false)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func (ca *CA) leaf(name string, notBefore, notAfter time.Time, selfSigned bool) (tls.Certificate, []byte, *ecdsa.PrivateKey) {
	key := newKey()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	parent, signer := ca.Root, ca.key
	if selfSigned {
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		panic(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, der, key
}

func newKey() *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return key
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}
