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

// newRoot makes a root for ip: ECDSA P-256, RootYears years, CommonName set, path length 0,
// critical name constraints permitting ip alone and excluding every DNS name.
func newRoot(ip netip.Addr, now time.Time) (*root, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	bits := ip.BitLen()
	host, _ := os.Hostname()
	cn := strings.TrimSpace("fleet direct-reach root " + host + " " + ip.String())
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"fleet"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(RootYears, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		// Critical: a verifier that does not understand name constraints must refuse the
		// root rather than trust it for every name.
		PermittedDNSDomainsCritical: true,
		PermittedIPRanges:           []*net.IPNet{{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, bits)}},
		// An empty dNSName matches every name (Go: newDNSConstraints; RFC 5280 4.2.1.10). With
		// only an IP range permitted, DNS names would otherwise be unconstrained.
		ExcludedDNSDomains: []string{""},
	}
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
