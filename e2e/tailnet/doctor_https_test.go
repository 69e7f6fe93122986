package tailnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnlocal"
	"tailscale.com/tsnet"

	"github.com/phase-console/fleet/doctor"
	"github.com/phase-console/fleet/internal/tailnettest"
	"github.com/phase-console/fleet/internal/testca"
)

// TestDoctorServeCertificate_O6: fleet doctor judges the HTTPS address that real Serve publishes
// by a real TLS handshake through the node's own tailscaled (its LocalAPI's dial), as a peer
// connects. Serve on HTTPS 443 with no certificate to present (tsnet's certificate hook refusing,
// as tailscaled does when the tailnet has HTTPS certificates turned off): a peer's handshake
// fails, and the doctor FAILs the "tailscale serve" line with the fix. With a certificate (of a
// test CA, which the doctor and the peer trust in place of Let's Encrypt's roots): the peer's
// handshake succeeds, and the line is OK.
func TestDoctorServeCertificate_O6(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testBudget)
	defer cancel()
	control := tailnettest.StartControl(t, *verbose, magicDNSDomain, nil)
	sup := tailnettest.StartNode(t, ctx, *verbose, control, "sup")
	peer := tailnettest.StartNode(t, ctx, *verbose, control, "peer")
	tailnettest.WaitWhoIs(t, ctx, peer.LC, sup.IP)
	st, err := sup.LC.StatusWithoutPeers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fqdn := strings.TrimSuffix(st.Self.DNSName, ".")

	ca := testca.New()
	var certsOn atomic.Bool
	tsnet.TestHooks.LocalBackend(sup.Srv).ForTest().ConfigureCerts(func(domain string) (*ipnlocal.TLSCertKeyPair, error) {
		if !certsOn.Load() {
			return nil, errors.New("HTTPS certificates are not enabled for this tailnet")
		}
		certPEM, keyPEM := ca.LeafPEM(domain)
		return &ipnlocal.TLSCertKeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, nil
	})

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fleet") }))
	t.Cleanup(backend.Close)
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	if err := sup.LC.SetServeConfig(ctx, &ipn.ServeConfig{
		TCP: map[uint16]*ipn.TCPPortHandler{443: {HTTPS: true}},
		Web: map[ipn.HostPort]*ipn.WebServerConfig{
			ipn.HostPort(fqdn + ":443"): {Handlers: map[string]*ipn.HTTPHandler{"/": {Proxy: backend.URL}}},
		},
	}); err != nil {
		t.Fatal(err)
	}

	// What a peer sees: a TLS handshake to sup's name over the tailnet.
	peerHandshake := func() error {
		c, err := peer.Srv.Dial(ctx, "tcp", fqdn+":443")
		if err != nil {
			return err
		}
		defer c.Close()
		tc := tls.Client(c, &tls.Config{ServerName: fqdn, RootCAs: ca.Pool})
		return tc.HandshakeContext(ctx)
	}
	home := filepath.Join(t.TempDir(), "state")
	runDoctor := func() (doctor.Check, string) {
		checks := doctor.Run(ctx, doctor.Config{StateHome: home, LocalAPI: sup.LC, Port: port, RootCAs: ca.Pool,
			TailscaledArgs: func(context.Context) ([]string, error) { return os.Args, nil }})
		var report strings.Builder
		var serve doctor.Check
		for _, c := range checks {
			report.WriteString(c.String() + "\n")
			if c.Name == "tailscale serve" {
				serve = c
			}
		}
		return serve, report.String()
	}

	if err := peerHandshake(); err == nil {
		t.Fatalf("a peer's handshake succeeded with no certificate to present")
	} else {
		t.Logf("a peer's handshake with no certificate: %v", err)
	}
	serve, report := runDoctor()
	t.Logf("fleet doctor, Serve HTTPS without a certificate:\n%s", report)
	if serve.Status != doctor.Fail || !strings.Contains(serve.What, "https://"+fqdn+"/ → "+backend.URL) ||
		!strings.Contains(serve.What, "a TLS handshake to https://"+fqdn+" through tailscaled, as a peer connects, fails") ||
		!strings.Contains(serve.Fix, "HTTPS Certificates") || !strings.Contains(serve.Fix, "tailscale cert "+fqdn) {
		t.Errorf("without a certificate: %q, want a FAIL naming the fix", serve.String())
	}
	if v := findCheck(report, "tailscaled version"); !strings.HasPrefix(v, "OK   tailscaled version: ") {
		t.Errorf("the version line: %q", v)
	}

	certsOn.Store(true)
	if err := peerHandshake(); err != nil {
		t.Fatalf("a peer's handshake with a certificate: %v", err)
	}
	serve, report = runDoctor()
	t.Logf("fleet doctor, Serve HTTPS with a certificate:\n%s", report)
	if serve.Status != doctor.OK || !strings.Contains(serve.What, "presents a certificate valid for "+fqdn) {
		t.Errorf("with a certificate: %q, want OK", serve.String())
	}
}

// findCheck is the line of report whose check is name.
func findCheck(report, name string) string {
	for _, l := range strings.Split(report, "\n") {
		if len(l) > 5 && strings.HasPrefix(l[5:], name+": ") {
			return l
		}
	}
	return ""
}
