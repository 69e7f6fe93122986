package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"
)

// serveTLS runs a TLS server on 127.0.0.1 with cfg; every accepted connection is handshaken and
// its state (or handshake error) reported on the returned channel.
func serveTLS(t *testing.T, cfg *tls.Config) (addr string, states <-chan serverSide) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan serverSide, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			err = tc.Handshake()
			ch <- serverSide{state: tc.ConnectionState(), err: err}
			tc.Close()
		}
	}()
	return ln.Addr().String(), ch
}

type serverSide struct {
	state tls.ConnectionState
	err   error
}

func recvServer(t *testing.T, ch <-chan serverSide) serverSide {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("server never finished the handshake")
		return serverSide{}
	}
}

// TestHandshake_R4: a client trusting only the root, dialling the IP (so sending no SNI),
// completes TLS 1.2 and 1.3 with h2 and http/1.1, and verifies the leaf for the IP.
func TestHandshake_R4(t *testing.T) {
	a := mustOpen(t, newDir(t), "127.0.0.1", nil)
	addr, states := serveTLS(t, a.TLSConfig())
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, proto := range []string{"h2", "http/1.1"} {
			name := tls.VersionName(v) + " " + proto
			t.Run(name, func(t *testing.T) {
				c, err := tls.Dial("tcp", addr, &tls.Config{
					RootCAs:    a.rootPool(),
					MinVersion: v, MaxVersion: v,
					NextProtos: []string{proto},
				})
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				defer c.Close()
				cs := c.ConnectionState()
				if cs.Version != v || cs.NegotiatedProtocol != proto {
					t.Errorf("client got %s %q, want %s %q", tls.VersionName(cs.Version), cs.NegotiatedProtocol, name, proto)
				}
				if len(cs.VerifiedChains) == 0 || !cs.VerifiedChains[0][len(cs.VerifiedChains[0])-1].Equal(a.Root()) {
					t.Errorf("chain not verified up to the root: %v", cs.VerifiedChains)
				}
				s := recvServer(t, states)
				if s.err != nil {
					t.Fatalf("server handshake: %v", s.err)
				}
				if s.state.ServerName != "" {
					t.Errorf("client sent SNI %q; the test must cover a client that sends none", s.state.ServerName)
				}
				if v == tls.VersionTLS12 && !strings.Contains(tls.CipherSuiteName(s.state.CipherSuite), "ECDHE_ECDSA") {
					t.Errorf("TLS 1.2 suite %s", tls.CipherSuiteName(s.state.CipherSuite))
				}
			})
		}
	}
}

// TestRefusesWeakTLS_R4: TLS 1.1 and below, CBC suites and RSA key exchange are refused.
func TestRefusesWeakTLS_R4(t *testing.T) {
	a := mustOpen(t, newDir(t), "127.0.0.1", nil)
	addr, states := serveTLS(t, a.TLSConfig())
	cases := []struct {
		name     string
		min, max uint16
		suites   []uint16
	}{
		{"TLS 1.0", tls.VersionTLS10, tls.VersionTLS10, nil},
		{"TLS 1.1", tls.VersionTLS11, tls.VersionTLS11, nil},
		{"TLS 1.2 ECDHE-ECDSA AES-128-CBC-SHA", 0, tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}},
		{"TLS 1.2 ECDHE-ECDSA AES-256-CBC-SHA", 0, tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}},
		{"TLS 1.2 ECDHE-ECDSA AES-128-CBC-SHA256", 0, tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}},
		{"TLS 1.2 RSA AES-128-GCM (no forward secrecy)", 0, tls.VersionTLS12, []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{MinVersion: tc.min, MaxVersion: tc.max, CipherSuites: tc.suites}
			cfg.RootCAs = a.rootPool()
			c, err := tls.Dial("tcp", addr, cfg)
			if err == nil {
				cs := c.ConnectionState()
				c.Close()
				t.Fatalf("handshake succeeded: %s %s", tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite))
			}
			if !strings.Contains(err.Error(), "remote error") {
				t.Errorf("client gave up by itself (%v); the server must be the one refusing", err)
			}
			if s := recvServer(t, states); s.err == nil {
				t.Fatalf("server accepted %s", tc.name)
			}
		})
	}

	// The configuration itself: only AEAD suites with ECDHE.
	cfg := a.TLSConfig()
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion %s", tls.VersionName(cfg.MinVersion))
	}
	for _, id := range cfg.CipherSuites {
		n := tls.CipherSuiteName(id)
		if !strings.HasPrefix(n, "TLS_ECDHE_ECDSA_") || !(strings.Contains(n, "_GCM_") || strings.Contains(n, "CHACHA20_POLY1305")) {
			t.Errorf("suite %s is not ECDHE with an AEAD", n)
		}
	}
}

// TestNameConstraints_R4: with the root's own key, a leaf for another IP, for a DNS name, or for
// the listen IP plus a DNS name, does not verify for a client trusting only the root.
func TestNameConstraints_R4(t *testing.T) {
	a := mustOpen(t, newDir(t), "127.0.0.1", nil)
	cases := []struct {
		name   string
		ips    []string
		dns    []string
		verify string // the name the client verifies
		ok     bool
	}{
		{"listen IP (control)", []string{"127.0.0.1"}, nil, "127.0.0.1", true},
		{"another IP", []string{"127.0.0.2"}, nil, "127.0.0.2", false},
		{"another IPv4 in the same /24", []string{"127.0.0.254"}, nil, "127.0.0.254", false},
		{"an IPv6 address", []string{"::1"}, nil, "::1", false},
		{"a DNS name", nil, []string{"localhost"}, "localhost", false},
		{"a public DNS name", nil, []string{"example.com"}, "example.com", false},
		{"a wildcard DNS name", nil, []string{"*.example.com"}, "www.example.com", false},
		{"listen IP plus a DNS name", []string{"127.0.0.1"}, []string{"evil.example"}, "127.0.0.1", false},
		{"listen IP plus another IP", []string{"127.0.0.1", "10.0.0.1"}, nil, "127.0.0.1", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leaf := a.forge(t, tc.ips, tc.dns)
			_, err := leaf.Verify(x509.VerifyOptions{DNSName: tc.verify, Roots: a.rootPool(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if tc.ok {
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				return
			}
			var inv x509.CertificateInvalidError
			if !errors.As(err, &inv) || inv.Reason != x509.CANotAuthorizedForThisName {
				t.Fatalf("verify = %v, want a name-constraint refusal (CANotAuthorizedForThisName)", err)
			}
		})
	}
}

// TestNameConstraintsOverTLS_R4: the same refusal in a real handshake — a server holding a
// root-signed leaf for a DNS name or another IP is refused by a client trusting only the root.
func TestNameConstraintsOverTLS_R4(t *testing.T) {
	a := mustOpen(t, newDir(t), "127.0.0.1", nil)
	cases := []struct {
		name       string
		ips, dns   []string
		serverName string
	}{
		{"DNS name", nil, []string{"localhost"}, "localhost"},
		{"another IP", []string{"127.0.0.2"}, nil, "127.0.0.2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			forged := a.forgeTLS(t, key, tc.ips, tc.dns)
			cfg := a.TLSConfig()
			cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &forged, nil }
			addr, states := serveTLS(t, cfg)
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: a.rootPool(), ServerName: tc.serverName})
			if err == nil {
				c.Close()
				t.Fatal("handshake with a forged leaf succeeded")
			}
			var inv x509.CertificateInvalidError
			if !errors.As(err, &inv) || inv.Reason != x509.CANotAuthorizedForThisName {
				t.Fatalf("dial = %v, want a name-constraint refusal", err)
			}
			recvServer(t, states)
		})
	}
}

// TestServesLeafWhateverTheSNI_R4: GetCertificate answers with the one leaf for no SNI and for any SNI.
func TestServesLeafWhateverTheSNI_R4(t *testing.T) {
	a := mustOpen(t, newDir(t), "127.0.0.1", nil)
	want := a.leaf(t)
	for _, sni := range []string{"", "127.0.0.1", "example.com"} {
		c, err := a.GetCertificate(&tls.ClientHelloInfo{ServerName: sni})
		if err != nil || !c.Leaf.Equal(want) {
			t.Errorf("SNI %q: %v, %v", sni, c, err)
		}
	}
}
