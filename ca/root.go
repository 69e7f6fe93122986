package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

// A root is one CA certificate and its key, as kept in roots/<hex fingerprint>.crt and .key.
type root struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	fp   [sha256.Size]byte
}

// covers says whether the root's name constraints permit ip.
func (r *root) covers(ip netip.Addr) bool {
	for _, n := range r.cert.PermittedIPRanges {
		if n.Contains(ip.AsSlice()) {
			return true
		}
	}
	return false
}

// usable says whether the root can still sign a full-length leaf at now.
func (r *root) usable(now time.Time) bool {
	return !now.Before(r.cert.NotBefore) && now.Add(LeafLifetime).Before(r.cert.NotAfter)
}

// verifyLeaf checks leaf the way a client that trusts only this root does.
func (r *root) verifyLeaf(leaf *x509.Certificate, name string, now time.Time) error {
	pool := x509.NewCertPool()
	pool.AddCert(r.cert)
	_, err := leaf.Verify(x509.VerifyOptions{
		DNSName:     name,
		Roots:       pool,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}

// chooseRoot returns the newest usable root in dir that covers ip, or makes one. Making one
// while other roots exist means the door moved (or its root is about to expire): phones must
// install the new root, so it is logged as a warning. No root is ever overwritten or removed.
func chooseRoot(dir string, ip netip.Addr, now time.Time, log *slog.Logger) (*root, error) {
	if err := state.EnsureDir(dir); err != nil {
		return nil, err
	}
	roots, err := loadRoots(dir)
	if err != nil {
		return nil, err
	}
	var best *root
	for _, r := range roots {
		if r.covers(ip) && r.usable(now) && (best == nil || r.cert.NotBefore.After(best.cert.NotBefore)) {
			best = r
		}
	}
	if best != nil {
		return best, nil
	}
	r, err := newRoot(ip, now)
	if err != nil {
		return nil, err
	}
	if err := r.save(dir); err != nil {
		return nil, err
	}
	if len(roots) == 0 {
		log.Info("fleet.reach-root-created", "addr", ip.String(), "fingerprint", FormatFingerprint(r.fp))
		return r, nil
	}
	kept := make([]string, 0, len(roots))
	for _, o := range roots {
		kept = append(kept, FormatFingerprint(o.fp))
	}
	log.Warn("fleet.reach-root-new", "addr", ip.String(), "fingerprint", FormatFingerprint(r.fp),
		"why", "no root for this address (the door moved, or its root expires soon): every phone must install the new root",
		"kept", kept)
	return r, nil
}

// loadRoots reads every roots/<hex>.crt with its key. A certificate that does not parse, whose
// name is not its fingerprint, or whose key is missing or does not match is an error naming
// the file. A key without a certificate is what a crash between the two writes leaves; it is
// skipped.
func loadRoots(dir string) ([]*root, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var roots []*root
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), ".crt")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		r, err := loadRoot(filepath.Join(dir, base))
		if err != nil {
			return nil, err
		}
		roots = append(roots, r)
	}
	return roots, nil
}

func loadRoot(stem string) (*root, error) {
	crtPath, keyPath := stem+".crt", stem+".key"
	crtPEM, err := state.ReadPrivateFile(crtPath)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(crtPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: not a PEM certificate", crtPath)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", crtPath, err)
	}
	fp := sha256.Sum256(cert.Raw)
	if hex.EncodeToString(fp[:]) != filepath.Base(stem) {
		return nil, fmt.Errorf("%s: its fingerprint is %s, not its name", crtPath, hex.EncodeToString(fp[:]))
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate", crtPath)
	}
	keyPEM, err := state.ReadPrivateFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("key of %s: %w", crtPath, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM private key", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s: not the key of %s", keyPath, crtPath)
	}
	return &root{cert: cert, key: key, pem: crtPEM, fp: fp}, nil
}

// reservedName is the DNS name RFC 6761 reserves as never existing ("invalid"). The root's name
// constraints permit DNS names, email addresses and URIs only under it, and exclude that subtree
// too, so no name of these forms is left (below).
const reservedName = "invalid"

// rootCommonName is the root's CommonName: it names fleet and the listen address, and nothing of
// the machine, since GET /ca.crt serves the root to anyone who asks.
func rootCommonName(ip netip.Addr) string { return "fleet direct-reach root " + ip.String() }

// rootTemplate is a root for ip: ECDSA P-256 (the key is the caller's), RootYears years,
// CommonName set, path length 0, extended key usage server authentication only, and critical
// name constraints that permit ip alone and no DNS name, email address or URI.
//
// Go's crypto/x509 and OpenSSL read an empty base differently: both take an empty excluded
// dNSName as every DNS name (Go: newDNSConstraints; OpenSSL: nc_dns), but OpenSSL takes an empty
// rfc822Name or URI base as matching nothing (nc_email, nc_uri compare the host's length). So
// each of the three forms gets a permitted subtree that only the reserved name matches — a name
// outside every permitted subtree of its form is refused by both — and that subtree is also
// excluded, so even a name under "invalid" is refused. The empty excluded dNSName that roots
// always had stays: both read it as every DNS name.
func rootTemplate(ip netip.Addr, now time.Time, serial *big.Int) *x509.Certificate {
	bits := ip.BitLen()
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: rootCommonName(ip), Organization: []string{"fleet"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(RootYears, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		// Go and OpenSSL refuse a chain whose CA lists extended key usages without the one
		// asked for: the root vouches for TLS servers, not for clients, e-mail or code.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// Critical: a verifier that does not understand name constraints must refuse the
		// root rather than trust it for every name.
		PermittedDNSDomainsCritical: true,
		PermittedIPRanges:           []*net.IPNet{{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, bits)}},
		PermittedDNSDomains:         []string{reservedName},
		ExcludedDNSDomains:          []string{"", reservedName},
		PermittedEmailAddresses:     []string{reservedName},
		ExcludedEmailAddresses:      []string{reservedName},
		PermittedURIDomains:         []string{reservedName},
		ExcludedURIDomains:          []string{reservedName},
	}
}

// newRoot makes a root for ip as rootTemplate describes it, with a new key and a random serial.
func newRoot(ip netip.Addr, now time.Time) (*root, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	return signRoot(rootTemplate(ip, now, serial), key)
}

// signRoot self-signs tmpl with key.
func signRoot(tmpl *x509.Certificate, key *ecdsa.PrivateKey) (*root, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &root{
		cert: cert,
		key:  key,
		pem:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		fp:   sha256.Sum256(der),
	}, nil
}

// save writes the key, then the certificate (whose presence marks the root complete), under
// the root's fingerprint. Neither may exist yet.
func (r *root) save(dir string) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(r.key)
	if err != nil {
		return err
	}
	stem := filepath.Join(dir, hex.EncodeToString(r.fp[:]))
	if err := writeNew(stem+".key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	return writeNew(stem+".crt", r.pem)
}

// writeNew writes a private file that must not exist yet.
func writeNew(path string, data []byte) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s already exists; it is never overwritten", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return state.WriteFileAtomic(path, data)
}

// randomSerial returns a random positive 128-bit serial number from crypto/rand.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, err
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}
