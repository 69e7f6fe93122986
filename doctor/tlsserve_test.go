package doctor

// SPEC O6: what the doctor says of the HTTPS address that Serve publishes, from a real TLS
// handshake over the connection that tailscaled's dial gives (here: a TLS server on 127.0.0.1
// standing in for Serve), and what it says of what it cannot know.

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/testca"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"
)

// healthyOwner is WhoIs of a healthy machine's own address: a person, with no grant.
var healthyOwner = &apitype.WhoIsResponse{Node: &tailcfg.Node{ID: 1}, UserProfile: &tailcfg.UserProfile{LoginName: "ann@example.com"}}

// doctorCA issues the certificates the stand-in Serve presents; the doctor's tests trust it in
// place of the system's roots (defaultRoots), as a tailnet's browsers trust Let's Encrypt.
var doctorCA = testca.New()

func init() { defaultRoots = doctorCA.Pool }

// serveTLS is a stand-in for Serve's HTTPS listener: it answers every handshake with cert, or,
// when cert is nil, fails it as tailscaled does when it has no certificate for the name.
func serveTLS(t testing.TB, cert *tls.Certificate) string {
	t.Helper()
	addr, stop, err := listenTLS(cert)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

func listenTLS(cert *tls.Certificate) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if cert == nil {
			return nil, errors.New("no certificate: HTTPS is not enabled for this tailnet")
		}
		return cert, nil
	}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(c, cfg)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				tc.Handshake()
				tc.Close()
			}()
		}
	}()
	return ln.Addr().String(), func() { ln.Close() }, nil
}

// healthyServe is the stand-in Serve of every test's healthy set-up, as long as the test binary
// runs: a valid certificate for supName.
var healthyServe = sync.OnceValue(func() string {
	cert := doctorCA.Leaf(supName, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), false)
	addr, _, err := listenTLS(&cert)
	if err != nil {
		panic(err)
	}
	return addr
})

// dialTo is tailscaled's dial as the tests' LocalAPIs give it: supName:443 reaches addr, any
// other name is no peer.
func dialTo(ctx context.Context, addr, host string, port uint16) (net.Conn, error) {
	if host != supName || port != 443 {
		return nil, errors.New("dial failure: no such peer")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// DialTCP is tailscaled's dial (POST /localapi/v0/dial): supName:443 reaches a Serve with a valid
// certificate.
func (f *fakeTailscaled) DialTCP(ctx context.Context, host string, port uint16) (net.Conn, error) {
	return dialTo(ctx, healthyServe(), host, port)
}

func (f *hostileAPI) DialTCP(ctx context.Context, host string, port uint16) (net.Conn, error) {
	return dialTo(ctx, healthyServe(), host, port)
}

// dialingTailscaled is a fakeTailscaled whose dial reaches another Serve, or fails.
type dialingTailscaled struct {
	*fakeTailscaled
	addr    string
	dialErr error
}

func (f *dialingTailscaled) DialTCP(ctx context.Context, host string, port uint16) (net.Conn, error) {
	if f.dialErr != nil {
		return nil, f.dialErr
	}
	return dialTo(ctx, f.addr, host, port)
}

// notDialing is a LocalAPI that cannot dial through tailscaled: what it cannot check is WARN.
type notDialing struct{ LocalAPI }

func TestServeCertificate_O6(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	now := time.Now()
	valid := doctorCA.Leaf(supName, now.Add(-time.Hour), now.Add(24*time.Hour), false)
	otherName := doctorCA.Leaf("other.example.ts.net", now.Add(-time.Hour), now.Add(24*time.Hour), false)
	expired := doctorCA.Leaf(supName, now.Add(-48*time.Hour), now.Add(-24*time.Hour), false)
	selfSigned := doctorCA.Leaf(supName, now.Add(-time.Hour), now.Add(24*time.Hour), true)
	fix := "HTTPS Certificates), then run: tailscale cert " + supName
	rows := []struct {
		name    string
		api     func(f *fakeTailscaled) LocalAPI
		status  Status
		whatHas string
		fixHas  string
	}{
		{"O6 a valid certificate", func(f *fakeTailscaled) LocalAPI {
			return &dialingTailscaled{fakeTailscaled: f, addr: serveTLS(t, &valid)}
		},
			OK, "a TLS handshake to https://" + supName + " through tailscaled presents a certificate valid for " + supName, ""},
		{"O6 no certificate", func(f *fakeTailscaled) LocalAPI { return &dialingTailscaled{fakeTailscaled: f, addr: serveTLS(t, nil)} },
			Fail, "fails (tls: internal error): tailscaled has no certificate for it", fix},
		{"O6 a certificate for another name", func(f *fakeTailscaled) LocalAPI {
			return &dialingTailscaled{fakeTailscaled: f, addr: serveTLS(t, &otherName)}
		}, Fail, "not valid for " + supName, fix},
		{"O6 an expired certificate", func(f *fakeTailscaled) LocalAPI {
			return &dialingTailscaled{fakeTailscaled: f, addr: serveTLS(t, &expired)}
		},
			Fail, "expired", fix},
		{"O6 a certificate no root vouches for", func(f *fakeTailscaled) LocalAPI {
			return &dialingTailscaled{fakeTailscaled: f, addr: serveTLS(t, &selfSigned)}
		}, Fail, "unknown authority", fix},
		{"O6 tailscaled cannot connect", func(f *fakeTailscaled) LocalAPI {
			return &dialingTailscaled{fakeTailscaled: f, dialErr: errors.New("unexpected HTTP response: 502 Bad Gateway, dial failure")}
		}, Warn, "cannot check the certificate https://" + supName + " presents: tailscaled could not connect to it", "from another device of the tailnet"},
		{"O6 a LocalAPI that cannot dial", func(f *fakeTailscaled) LocalAPI { return notDialing{f} },
			Warn, "this LocalAPI cannot dial through tailscaled", "no certificate warning"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			f := healthyTailscaled(port)
			checks := Run(context.Background(), Config{StateHome: home, LocalAPI: row.api(f), TailscaledArgs: cleanArgs})
			want(t, checks, "tailscale serve", row.status, row.whatHas, row.fixHas)
			if c, _ := find(checks, "tailscale serve"); !strings.HasPrefix(c.What, "https://"+supName+"/ → http://127.0.0.1:") {
				t.Errorf("the line does not say what Serve publishes: %q", c.What)
			}
			if Failed(checks) != (row.status == Fail) {
				t.Errorf("Failed = %v with a %v:\n%s", Failed(checks), row.status, report(checks))
			}
		})
	}

	// Plain HTTP needs no certificate: no handshake is made, and the line is OK.
	t.Run("O6 HTTP needs no handshake", func(t *testing.T) {
		f := healthyTailscaled(port)
		f.serve = serveConfig(80, true, "/", "http://127.0.0.1:"+strconv.Itoa(port))
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: notDialing{f}, TailscaledArgs: cleanArgs})
		want(t, checks, "tailscale serve", OK, "http://"+supName+"/ → http://127.0.0.1:", "")
	})
	// The system's roots, when the config names none: a certificate of a test CA is no good there.
	t.Run("O6 verified against the system's roots", func(t *testing.T) {
		old := defaultRoots
		defaultRoots = nil
		t.Cleanup(func() { defaultRoots = old })
		f := healthyTailscaled(port)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: &dialingTailscaled{fakeTailscaled: f, addr: serveTLS(t, &valid)}, TailscaledArgs: cleanArgs})
		want(t, checks, "tailscale serve", Fail, "not valid for "+supName, fix)
		checks = Run(context.Background(), Config{StateHome: home, LocalAPI: &dialingTailscaled{fakeTailscaled: f, addr: serveTLS(t, &valid)}, TailscaledArgs: cleanArgs, RootCAs: doctorCA.Pool})
		want(t, checks, "tailscale serve", OK, "valid for "+supName, "")
	})
}

// TestUnknownsAreWarn_O6: what the doctor cannot know is WARN, never OK — the owner's grant under
// either access.mode, a version tailscaled did not say — and the version has its own OK line.
func TestUnknownsAreWarn_O6(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)

	f := healthyTailscaled(port)
	checks := Run(context.Background(), Config{StateHome: home, LocalAPI: f, TailscaledArgs: cleanArgs})
	want(t, checks, "tailscaled version", OK, "1.102.5", "")

	f = healthyTailscaled(port)
	f.whois = nil // WhoIs of the machine's own address names nobody
	checks = Run(context.Background(), Config{StateHome: home, LocalAPI: f, TailscaledArgs: cleanArgs})
	want(t, checks, "access: this machine's owner", Warn, "cannot know", "open this machine's index")

	f = healthyTailscaled(port)
	f.status.Self.TailscaleIPs = nil
	checks = Run(context.Background(), Config{StateHome: home, LocalAPI: f, TailscaledArgs: cleanArgs})
	want(t, checks, "access: this machine's owner", Warn, "cannot know", "")

	checks = Run(context.Background(), Config{StateHome: home, LocalAPI: notWhoIs{f}, TailscaledArgs: cleanArgs})
	want(t, checks, "access: this machine's owner", Warn, "cannot know", "")

	f = healthyTailscaled(port)
	f.status.Version = ""
	checks = Run(context.Background(), Config{StateHome: home, LocalAPI: f, TailscaledArgs: cleanArgs})
	want(t, checks, "tailscaled version", Warn, "did not say", "tailscale version")

	for _, c := range checks {
		if c.Status == OK && (strings.Contains(c.What, "cannot know") || strings.Contains(c.What, "cannot check") || strings.Contains(c.What, "cannot tell")) {
			t.Errorf("an unknown is OK: %s", c)
		}
	}
}

// notWhoIs is a LocalAPI without WhoIs.
type notWhoIs struct{ LocalAPI }
