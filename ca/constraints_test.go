package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

// needOpenSSL returns the openssl command, so that the root is judged by OpenSSL's verifier as
// well as Go's (they read name constraints differently). Without it the test is skipped, except
// under CI=true, where it must be there.
func needOpenSSL(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but openssl is missing (%v): .ci/run installs the Debian package openssl", err)
		}
		t.Skipf("openssl not found (%v): install the Debian package openssl to check the root with OpenSSL's verifier too", err)
	}
	return bin
}

// opensslVerify runs `openssl verify` on leaf with root as its only trust anchor (no system
// store) and the extra args (-purpose, -verify_ip). It says whether OpenSSL accepted the leaf,
// and what it printed.
func opensslVerify(t *testing.T, bin string, root, leaf *x509.Certificate, args ...string) (bool, string) {
	t.Helper()
	dir := t.TempDir()
	rootPath, leafPath := filepath.Join(dir, "root.pem"), filepath.Join(dir, "leaf.pem")
	for path, c := range map[string]*x509.Certificate{rootPath: root, leafPath: leaf} {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	argv := append([]string{"verify", "-x509_strict", "-no-CApath", "-no-CAstore", "-CAfile", rootPath}, args...)
	out, err := exec.Command(bin, append(argv, leafPath)...).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("openssl %s: %v", strings.Join(argv, " "), err)
	}
	ok := err == nil && strings.HasSuffix(strings.TrimSpace(string(out)), ": OK")
	return ok, string(out)
}

// A usage is what a verifier is asked to accept a leaf for.
type usage struct {
	name    string
	eku     x509.ExtKeyUsage // Go's VerifyOptions.KeyUsages
	purpose string           // openssl verify -purpose
}

var (
	serverAuth = usage{"server authentication", x509.ExtKeyUsageServerAuth, "sslserver"}
	clientAuth = usage{"client authentication", x509.ExtKeyUsageClientAuth, "sslclient"}
	smime      = usage{"e-mail protection", x509.ExtKeyUsageEmailProtection, "smimesign"}
)

// Why a verifier refuses: how Go and OpenSSL say it.
const (
	byNames = "names" // Go CANotAuthorizedForThisName; OpenSSL "permitted/excluded subtree violation"
	byUsage = "usage" // Go IncompatibleUsage; OpenSSL "unsuitable certificate purpose"
)

// TestRootVouchesOnlyForServerAtListenIP_R4: a leaf the root's own key signs (what a thief of the
// key could make) verifies, with Go's crypto/x509 and with `openssl verify`, only as a TLS server
// certificate for the listen IP. With an email or URI name (beside the IP or alone, under the
// reserved "invalid" too), a DNS name, or for client authentication or e-mail protection, it is
// refused by both, each for the reason the root gives: its name constraints or its extended key
// usage.
func TestRootVouchesOnlyForServerAtListenIP_R4(t *testing.T) {
	bin := needOpenSSL(t)
	const ip = "127.0.0.1"
	a := mustOpen(t, newDir(t), ip, nil)
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	listenIP := []net.IP{net.ParseIP(ip)}
	cases := []struct {
		name    string
		edit    func(*x509.Certificate)
		use     usage
		host    string // the address the verifier checks the leaf for; "" for none
		refused string // "", byNames or byUsage
	}{
		{"R4 server leaf for the listen IP (control)", func(c *x509.Certificate) { c.IPAddresses = listenIP }, serverAuth, ip, ""},
		{"R4 email SAN beside the listen IP", func(c *x509.Certificate) {
			c.IPAddresses, c.EmailAddresses = listenIP, []string{"someone@example.com"}
		}, serverAuth, ip, byNames},
		{"R4 email SAN alone", func(c *x509.Certificate) { c.EmailAddresses = []string{"someone@example.com"} }, serverAuth, "", byNames},
		{"R4 email SAN at invalid", func(c *x509.Certificate) { c.EmailAddresses = []string{"someone@invalid"} }, serverAuth, "", byNames},
		{"R4 email SAN under invalid", func(c *x509.Certificate) { c.EmailAddresses = []string{"someone@x.invalid"} }, serverAuth, "", byNames},
		{"R4 URI SAN beside the listen IP", func(c *x509.Certificate) {
			c.IPAddresses, c.URIs = listenIP, []*url.URL{mustURL("spiffe://example.com/door")}
		}, serverAuth, ip, byNames},
		{"R4 URI SAN alone", func(c *x509.Certificate) { c.URIs = []*url.URL{mustURL("https://example.com/")} }, serverAuth, "", byNames},
		{"R4 URI SAN whose host is the listen IP", func(c *x509.Certificate) { c.URIs = []*url.URL{mustURL("https://" + ip + "/")} }, serverAuth, "", byNames},
		{"R4 URI SAN at invalid", func(c *x509.Certificate) { c.URIs = []*url.URL{mustURL("https://invalid/")} }, serverAuth, "", byNames},
		{"R4 URI SAN under invalid", func(c *x509.Certificate) { c.URIs = []*url.URL{mustURL("https://x.invalid/")} }, serverAuth, "", byNames},
		{"R4 DNS SAN", func(c *x509.Certificate) { c.DNSNames = []string{"example.com"} }, serverAuth, "", byNames},
		{"R4 DNS SAN under invalid", func(c *x509.Certificate) { c.DNSNames = []string{"x.invalid"} }, serverAuth, "", byNames},
		{"R4 e-mail protection leaf", func(c *x509.Certificate) {
			c.EmailAddresses, c.ExtKeyUsage = []string{"someone@example.com"}, []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection}
		}, smime, "", byUsage},
		{"R4 client leaf for the listen IP", func(c *x509.Certificate) {
			c.IPAddresses, c.ExtKeyUsage = listenIP, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}, clientAuth, "", byUsage},
		{"R4 client leaf with only a CommonName", func(c *x509.Certificate) {
			c.Subject, c.ExtKeyUsage = pkix.Name{CommonName: "alice"}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}, clientAuth, "", byUsage},
		{"R4 server-and-client leaf used as a client", func(c *x509.Certificate) {
			c.IPAddresses, c.ExtKeyUsage = listenIP, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		}, clientAuth, "", byUsage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			leaf := a.forgeWith(t, key, tc.edit).Leaf

			_, goErr := leaf.Verify(x509.VerifyOptions{DNSName: tc.host, Roots: a.rootPool(), KeyUsages: []x509.ExtKeyUsage{tc.use.eku}})
			var inv x509.CertificateInvalidError
			switch tc.refused {
			case "":
				if goErr != nil {
					t.Errorf("Go: %v, want it verified for %s", goErr, tc.use.name)
				}
			case byNames:
				if !errors.As(goErr, &inv) || inv.Reason != x509.CANotAuthorizedForThisName {
					t.Errorf("Go: %v, want a name-constraint refusal (CANotAuthorizedForThisName)", goErr)
				}
			case byUsage:
				if !errors.As(goErr, &inv) || inv.Reason != x509.IncompatibleUsage {
					t.Errorf("Go: %v, want an extended key usage refusal (IncompatibleUsage)", goErr)
				}
			}

			args := []string{"-purpose", tc.use.purpose}
			if tc.host != "" {
				args = append(args, "-verify_ip", tc.host)
			}
			ok, out := opensslVerify(t, bin, a.Root(), leaf, args...)
			switch tc.refused {
			case "":
				if !ok {
					t.Errorf("openssl verify %v: refused, want it verified for %s:\n%s", args, tc.use.name, out)
				}
			case byNames:
				if ok || !strings.Contains(out, "subtree violation") {
					t.Errorf("openssl verify %v: want a name-constraint refusal (subtree violation):\n%s", args, out)
				}
			case byUsage:
				if ok || !strings.Contains(out, "unsuitable certificate purpose") {
					t.Errorf("openssl verify %v: want an extended key usage refusal (unsuitable certificate purpose):\n%s", args, out)
				}
			}
		})
	}
}

// TestLeafVerifiesForListenIP_R4: the leaf Open issued verifies, with Go's crypto/x509 and with
// `openssl verify`, as a TLS server certificate for the listen IP (IPv4 and IPv6), and for
// client authentication with neither.
func TestLeafVerifiesForListenIP_R4(t *testing.T) {
	bin := needOpenSSL(t)
	for _, ip := range []string{"192.168.1.20", "fd00::20"} {
		t.Run(ip, func(t *testing.T) {
			a := mustOpen(t, newDir(t), ip, nil)
			leaf := a.leaf(t)
			if _, err := leaf.Verify(a.verifyOpts(ip)); err != nil {
				t.Errorf("Go, server authentication for %s: %v", ip, err)
			}
			if ok, out := opensslVerify(t, bin, a.Root(), leaf, "-purpose", "sslserver", "-verify_ip", ip); !ok {
				t.Errorf("openssl verify -purpose sslserver -verify_ip %s: refused:\n%s", ip, out)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: a.rootPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
				t.Error("Go: the leaf verifies for client authentication")
			}
			if ok, _ := opensslVerify(t, bin, a.Root(), leaf, "-purpose", "sslclient"); ok {
				t.Error("openssl verify -purpose sslclient: the leaf verifies for client authentication")
			}
		})
	}
}

// TestRootSubjectNamesNoMachine_R4: the root's subject — what /ca.crt shows a stranger, and what
// every leaf names as its issuer — is fleet and the listen address, and nothing of the machine.
func TestRootSubjectNamesNoMachine_R4(t *testing.T) {
	const ip = "192.168.1.20"
	a := mustOpen(t, newDir(t), ip, nil)
	blk, _ := pem.Decode(a.RootPEM())
	if blk == nil {
		t.Fatal("RootPEM holds no PEM block")
	}
	served, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	want := "CN=fleet direct-reach root " + ip + ",O=fleet"
	if got := served.Subject.String(); got != want {
		t.Errorf("subject %q, want %q", got, want)
	}
	if got := a.leaf(t).Issuer.String(); got != want {
		t.Errorf("the leaf's issuer %q, want %q", got, want)
	}
	host, _ := os.Hostname()
	if host != "" && !strings.Contains(want, host) && strings.Contains(string(served.RawSubject), host) {
		t.Errorf("the root's subject names the machine's hostname %q", host)
	}
}

// TestRootMadeBeforeNarrowingKept_R4: a root made before the root was limited to server
// authentication and constrained in email addresses and URIs (and that names the machine) keeps
// being used for its address — phones trust it — and no new root is made; a new root, made when
// the door moves, is the narrower one.
func TestRootMadeBeforeNarrowingKept_R4(t *testing.T) {
	dir := newDir(t)
	const ip = "192.168.1.20"
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := randomSerial()
	tmpl := rootTemplate(netip.MustParseAddr(ip), time.Now(), serial)
	tmpl.Subject.CommonName = "fleet direct-reach root somehost " + ip
	tmpl.ExtKeyUsage = nil
	tmpl.PermittedDNSDomains, tmpl.ExcludedDNSDomains = nil, []string{""}
	tmpl.PermittedEmailAddresses, tmpl.ExcludedEmailAddresses = nil, nil
	tmpl.PermittedURIDomains, tmpl.ExcludedURIDomains = nil, nil
	old, err := signRoot(tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := state.EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := state.EnsureDir(filepath.Join(dir, rootsDir)); err != nil {
		t.Fatal(err)
	}
	if err := old.save(filepath.Join(dir, rootsDir)); err != nil {
		t.Fatal(err)
	}

	a := mustOpen(t, dir, ip, nil)
	if a.Fingerprint() != FormatFingerprint(old.fp) {
		t.Fatalf("Open chose root %s, want the one already made %s", a.Fingerprint(), FormatFingerprint(old.fp))
	}
	if n := len(a.log.Events("fleet.reach-root-created")) + len(a.log.Events("fleet.reach-root-new")); n != 0 {
		t.Errorf("a root was made beside the one phones trust:\n%s", a.log.String())
	}
	if _, err := a.leaf(t).Verify(a.verifyOpts(ip)); err != nil {
		t.Errorf("the leaf under the kept root: %v", err)
	}
	a.Close()

	b := mustOpen(t, dir, "192.168.1.21", nil)
	r := b.Root()
	if !slices.Equal(r.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) ||
		len(r.PermittedEmailAddresses) == 0 || len(r.PermittedURIDomains) == 0 ||
		r.Subject.CommonName != "fleet direct-reach root 192.168.1.21" {
		t.Errorf("the root made after the move is not the narrower one: EKU %v, email %q, URI %q, CN %q",
			r.ExtKeyUsage, r.PermittedEmailAddresses, r.PermittedURIDomains, r.Subject.CommonName)
	}
}
