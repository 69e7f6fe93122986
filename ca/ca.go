package ca

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/phase-console/fleet/internal/state"
)

const (
	// RootYears is how long a root is valid, from when it is made.
	RootYears = 10
	// LeafLifetime is the longest a leaf is valid (NotAfter - NotBefore).
	LeafLifetime = 7 * 24 * time.Hour
	// RenewalWindowRatio is the part of a leaf's life left when it is renewed.
	RenewalWindowRatio = 1.0 / 3.0

	// backdate moves NotBefore into the past, so a phone whose clock is a little behind still
	// accepts a certificate made a moment ago. It counts inside LeafLifetime.
	backdate = time.Hour

	rootsDir = "roots"
	leafDir  = "leaf"
)

// Options tune Open. The zero value is what fleet uses.
type Options struct {
	// Logger receives this package's events and certmagic's (certmagic's step-by-step chatter
	// at Debug). Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for the validity of the certificates this package signs and for choosing
	// a root. Nil means time.Now. Tests use it to make a leaf that is already old; certmagic
	// decides on renewal with the real clock.
	Now func() time.Time
}

// An Authority is an open CA for one listen IP: its root, and a leaf kept fresh in the
// background until Close.
type Authority struct {
	ip   netip.Addr
	name string // ip.String(): the leaf's only name
	log  *slog.Logger
	now  func() time.Time

	root    *root
	storage *storage
	cache   *certmagic.Cache
	cfg     atomic.Pointer[certmagic.Config] // read by the cache's maintenance goroutine

	closeOnce sync.Once
}

// Open opens the CA kept in dir for the listen address ip (the port does not matter: moving the
// door to another port keeps its root and leaf). dir is created 0700 when missing. It checks
// every folder and file under dir (F1), chooses or makes the root for ip, and makes sure a leaf
// for ip that is not due for renewal is in memory before it returns. The caller must Close it.
func Open(ctx context.Context, dir string, ip netip.Addr, opts Options) (*Authority, error) {
	ip = ip.Unmap().WithZone("") // a SAN holds no zone
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return nil, fmt.Errorf("ca: %q is not one literal unicast address", ip)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := state.EnsureDir(dir); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if err := checkTree(dir); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	a := &Authority{ip: ip, name: ip.String(), log: opts.Logger, now: opts.Now}

	r, err := chooseRoot(filepath.Join(dir, rootsDir), ip, a.now(), a.log)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	a.root = r
	a.storage, err = newStorage(filepath.Join(dir, leafDir))
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	// A leaf left unusable (a renewal killed between its key and its certificate) would keep the
	// door shut at every start: it is moved aside, kept, and a new one made (F2, R4).
	if err := a.setAsideBrokenLeaf(ctx); err != nil {
		return nil, fmt.Errorf("ca: leaf for %s: %w", a.name, err)
	}

	zl := zap.New(newSlogCore(a.log.Handler()))
	a.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return a.cfg.Load(), nil },
		Logger:           zl,
	})
	cfg := certmagic.New(a.cache, certmagic.Config{
		RenewalWindowRatio: RenewalWindowRatio,
		Issuers:            []certmagic.Issuer{&issuer{a: a}},
		KeySource:          certmagic.StandardKeyGenerator{KeyType: certmagic.P256},
		Storage:            a.storage,
		OCSP:               certmagic.OCSPConfig{DisableStapling: true},
		DisableARI:         true,
		Logger:             zl,
	})
	a.cfg.Store(cfg)
	err = cfg.ManageSync(ctx, []string{a.name})
	if err == nil {
		// Fail closed: what certmagic loaded must be a leaf this root made for this address.
		var c certmagic.Certificate
		if c, err = a.current(); err == nil {
			err = a.root.verifyLeaf(c.Leaf, a.name, a.now())
		}
	}
	if err != nil {
		a.Close()
		// What setAsideBrokenLeaf leaves in place (a leaf that parses and pairs but that this
		// root did not make for this address) is never replaced (F2): name its folder, and say
		// that the leaf, unlike the root, is disposable.
		site, _ := a.leafSite()
		return nil, fmt.Errorf("ca: leaf for %s in %s: %w (the leaf is disposable: remove that folder to have a new one made)", a.name, site, err)
	}
	return a, nil
}

// Close stops renewing the leaf. Handshakes already under way (or still arriving on a listener
// being shut down) keep being served the leaf it holds.
func (a *Authority) Close() error {
	a.closeOnce.Do(func() { a.cache.Stop() })
	return nil
}

// TLSConfig returns a new server configuration for the door (SPEC R4): TLS 1.2 and 1.3 only,
// for TLS 1.2 only ECDHE-ECDSA suites with AES-GCM or ChaCha20-Poly1305 (no CBC, no RSA key
// exchange; TLS 1.3 suites are all AEAD), ALPN h2 and http/1.1, and GetCertificate. certmagic's
// own TLSConfig offers only acme-tls/1, so it is not used.
func (a *Authority) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		MaxVersion: tls.VersionTLS13,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: a.GetCertificate,
	}
}

// GetCertificate returns the current leaf whatever the client sent as SNI: a client dialling an
// IP sends none (RFC 6066 has no place for an IP), and there is only one certificate to give.
// Judging the Host and any SNI is the door's job.
func (a *Authority) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c, err := a.current()
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return &c.Certificate, nil
}

// current is the leaf in certmagic's cache for our address that expires last.
func (a *Authority) current() (certmagic.Certificate, error) {
	var best certmagic.Certificate
	for _, c := range a.cache.AllMatchingCertificates(a.name) {
		if c.Leaf != nil && (best.Leaf == nil || c.Leaf.NotAfter.After(best.Leaf.NotAfter)) {
			best = c
		}
	}
	if best.Leaf == nil {
		return best, errors.New("no certificate for " + a.name)
	}
	return best, nil
}

// LeafExpiry is when the leaf being served now expires.
func (a *Authority) LeafExpiry() time.Time {
	c, err := a.current()
	if err != nil {
		return time.Time{}
	}
	return c.Leaf.NotAfter
}

// Addr is the IP the root and leaf are for.
func (a *Authority) Addr() netip.Addr { return a.ip }

// Root returns the root certificate (a copy; callers may not change the Authority through it).
func (a *Authority) Root() *x509.Certificate {
	c, _ := x509.ParseCertificate(a.root.cert.Raw)
	return c
}

// RootPEM returns the root certificate, PEM-encoded, as GET /ca.crt serves it.
func (a *Authority) RootPEM() []byte { return append([]byte(nil), a.root.pem...) }

// Fingerprint returns the SHA-256 of the root's DER in upper-case hex, in groups of four
// separated by spaces ("AB12 CD34 …"), as fleet reach status and the pairing page show it.
func (a *Authority) Fingerprint() string { return FormatFingerprint(a.root.fp) }

// FormatFingerprint formats a SHA-256 fingerprint as Fingerprint does.
func FormatFingerprint(fp [sha256.Size]byte) string {
	h := strings.ToUpper(hex.EncodeToString(fp[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 4 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(h[i : i+4])
	}
	return b.String()
}
