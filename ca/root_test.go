package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"regexp"
	"slices"
	"testing"
	"time"
)

var oidNameConstraints = asn1.ObjectIdentifier{2, 5, 29, 30}

// TestRootProperties_R4: the root is what R4 says, for IPv4 and IPv6 listen addresses.
func TestRootProperties_R4(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		bits int
	}{{"127.0.0.1", 32}, {"::1", 128}, {"192.168.1.20", 32}, {"fd00::20", 128}} {
		t.Run(tc.ip, func(t *testing.T) {
			a := mustOpen(t, newDir(t), tc.ip, nil)
			r := a.Root()
			if want := "fleet direct-reach root " + tc.ip; r.Subject.CommonName != want {
				t.Errorf("CommonName %q, want %q: fleet and the address (iOS shows it), nothing of the machine", r.Subject.CommonName, want)
			}
			pub, ok := r.PublicKey.(*ecdsa.PublicKey)
			if !ok || pub.Curve != elliptic.P256() || r.SignatureAlgorithm != x509.ECDSAWithSHA256 {
				t.Errorf("key %T, signature %v: want ECDSA P-256", r.PublicKey, r.SignatureAlgorithm)
			}
			if !r.IsCA || !r.BasicConstraintsValid || r.MaxPathLen != 0 || !r.MaxPathLenZero {
				t.Errorf("IsCA %v BasicConstraintsValid %v MaxPathLen %d MaxPathLenZero %v: want a CA with path length 0",
					r.IsCA, r.BasicConstraintsValid, r.MaxPathLen, r.MaxPathLenZero)
			}
			if r.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
				t.Errorf("KeyUsage %v", r.KeyUsage)
			}
			if err := r.CheckSignatureFrom(r); err != nil {
				t.Errorf("not self-signed: %v", err)
			}
			if !slices.Equal(r.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(r.UnknownExtKeyUsage) != 0 {
				t.Errorf("ExtKeyUsage %v %v, want server authentication only", r.ExtKeyUsage, r.UnknownExtKeyUsage)
			}
			// Name constraints: critical, permitting exactly the IP; DNS names, email addresses
			// and URIs permitted only under "invalid", which is excluded too (and every DNS name).
			critical := false
			for _, e := range r.Extensions {
				if e.Id.Equal(oidNameConstraints) {
					critical = e.Critical
				}
			}
			if !critical || !r.PermittedDNSDomainsCritical {
				t.Error("name constraints are not critical")
			}
			want := &net.IPNet{IP: net.ParseIP(tc.ip), Mask: net.CIDRMask(tc.bits, tc.bits)}
			if len(r.PermittedIPRanges) != 1 || r.PermittedIPRanges[0].String() != want.String() || len(r.ExcludedIPRanges) != 0 {
				t.Errorf("PermittedIPRanges %v ExcludedIPRanges %v, want [%v] and none", r.PermittedIPRanges, r.ExcludedIPRanges, want)
			}
			invalid := []string{"invalid"}
			for _, c := range []struct {
				what      string
				got, want []string
			}{
				{"PermittedDNSDomains", r.PermittedDNSDomains, invalid},
				{"ExcludedDNSDomains", r.ExcludedDNSDomains, []string{"", "invalid"}},
				{"PermittedEmailAddresses", r.PermittedEmailAddresses, invalid},
				{"ExcludedEmailAddresses", r.ExcludedEmailAddresses, invalid},
				{"PermittedURIDomains", r.PermittedURIDomains, invalid},
				{"ExcludedURIDomains", r.ExcludedURIDomains, invalid},
			} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s %q, want %q", c.what, c.got, c.want)
				}
			}
			// 10 years.
			if got := r.NotAfter.Sub(r.NotBefore); got < 10*365*24*time.Hour || got > 10*366*24*time.Hour+backdate {
				t.Errorf("root lives %v, want 10 years", got)
			}
			if r.SerialNumber.BitLen() < 64 || r.SerialNumber.Sign() <= 0 {
				t.Errorf("serial %v: want a random positive 128-bit number", r.SerialNumber)
			}
			// The fingerprint, the PEM and the file name agree.
			fp := sha256.Sum256(r.Raw)
			if a.Fingerprint() != FormatFingerprint(fp) {
				t.Errorf("Fingerprint %q", a.Fingerprint())
			}
			if !regexp.MustCompile(`^([0-9A-F]{4} ){15}[0-9A-F]{4}$`).MatchString(a.Fingerprint()) {
				t.Errorf("Fingerprint %q is not 16 groups of 4 upper-case hex digits", a.Fingerprint())
			}
			blk, _ := pem.Decode(a.RootPEM())
			if blk == nil || blk.Type != "CERTIFICATE" || string(blk.Bytes) != string(r.Raw) {
				t.Error("RootPEM is not the root")
			}
		})
	}
}

// TestRootSerialsRandom_R4: two roots never share a serial.
func TestRootSerialsRandom_R4(t *testing.T) {
	a := mustOpen(t, newDir(t), "127.0.0.1", nil)
	b := mustOpen(t, newDir(t), "127.0.0.1", nil)
	if a.Root().SerialNumber.Cmp(b.Root().SerialNumber) == 0 || a.Fingerprint() == b.Fingerprint() {
		t.Error("two roots share a serial or fingerprint")
	}
}

// TestLeafProperties_R4: the leaf is for the IP only, server auth, at most 7 days, P-256, signed by the root.
func TestLeafProperties_R4(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "fd00::20"} {
		t.Run(ip, func(t *testing.T) {
			a := mustOpen(t, newDir(t), ip, nil)
			l := a.leaf(t)
			if len(l.IPAddresses) != 1 || !l.IPAddresses[0].Equal(net.ParseIP(ip)) ||
				len(l.DNSNames) != 0 || len(l.EmailAddresses) != 0 || len(l.URIs) != 0 {
				t.Errorf("SANs: IPs %v DNS %v email %v URI %v; want the IP only", l.IPAddresses, l.DNSNames, l.EmailAddresses, l.URIs)
			}
			if len(l.ExtKeyUsage) != 1 || l.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || l.IsCA {
				t.Errorf("ExtKeyUsage %v IsCA %v", l.ExtKeyUsage, l.IsCA)
			}
			if life := l.NotAfter.Sub(l.NotBefore); life > 7*24*time.Hour || life <= 0 {
				t.Errorf("leaf lives %v, want at most 7 days", life)
			}
			if pub, ok := l.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
				t.Errorf("leaf key %T", l.PublicKey)
			}
			if err := l.CheckSignatureFrom(a.Root()); err != nil {
				t.Errorf("leaf not signed by the root: %v", err)
			}
			if _, err := l.Verify(x509.VerifyOptions{DNSName: ip, Roots: a.rootPool()}); err != nil {
				t.Errorf("leaf does not verify for %s: %v", ip, err)
			}
			if !a.LeafExpiry().Equal(l.NotAfter) {
				t.Errorf("LeafExpiry %v, leaf NotAfter %v", a.LeafExpiry(), l.NotAfter)
			}
		})
	}
}

// TestOpenRefusesBadAddress_R4: the CA is for one literal unicast address.
func TestOpenRefusesBadAddress_R4(t *testing.T) {
	for _, ip := range []string{"0.0.0.0", "::", "224.0.0.1"} {
		if _, err := openCA(t, newDir(t), ip, nil); err == nil {
			t.Errorf("Open(%s) succeeded", ip)
		}
	}
}
