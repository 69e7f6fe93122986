package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"

	"github.com/caddyserver/certmagic"
)

// issuer is the certmagic.Issuer that signs the door's leaf with the Authority's root. It signs
// one thing only: a P-256 key for the Authority's IP, nothing else in the request.
type issuer struct{ a *Authority }

var _ certmagic.Issuer = (*issuer)(nil)

// IssuerKey names the root, so a leaf made by another root is never loaded for this one:
// certmagic keeps each issuer's certificates under leaf/certificates/<IssuerKey>/.
func (i *issuer) IssuerKey() string { return "fleet-ca-" + hex.EncodeToString(i.a.root.fp[:]) }

// Issue signs csr after checking that it asks for exactly the Authority's IP and nothing else.
func (i *issuer) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("ca: certificate request: %w", err)
	}
	if len(csr.DNSNames) != 0 || len(csr.EmailAddresses) != 0 || len(csr.URIs) != 0 ||
		len(csr.IPAddresses) != 1 || !csr.IPAddresses[0].Equal(net.IP(i.a.ip.AsSlice())) {
		return nil, fmt.Errorf("ca: refusing a certificate request for %v %v %v %v: this CA signs only %s",
			csr.DNSNames, csr.IPAddresses, csr.EmailAddresses, csr.URIs, i.a.name)
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ca: refusing a certificate request for a %T key: only ECDSA P-256", csr.PublicKey)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notBefore := i.a.now().Add(-backdate)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(LeafLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IPAddresses:           []net.IP{i.a.ip.AsSlice()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, i.a.root.cert, pub, i.a.root.key)
	if err != nil {
		return nil, fmt.Errorf("ca: signing the leaf: %w", err)
	}
	i.a.log.Info("fleet.reach-leaf-issued", "addr", i.a.name, "serial", serial.Text(16),
		"not_after", tmpl.NotAfter, "root", FormatFingerprint(i.a.root.fp))
	return &certmagic.IssuedCertificate{Certificate: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}
