package doctor

// The HTTPS addresses that Serve publishes (SPEC O6): each is OK only once a TLS handshake to
// it, made through tailscaled as a peer connects, presents a certificate valid for its name.
// Serve takes a certificate from tailscaled, which gets it from Let's Encrypt only when the
// tailnet allows HTTPS certificates: without one, every peer's handshake fails while the Serve
// config looks right.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/ipn"
)

// tailnetDialer is tailscaled's dial for its LocalAPI's callers (POST /localapi/v0/dial, the
// *local.Client's DialTCP): the connection is tailscaled's own, to a name it resolves from its
// netmap, as a peer's connection reaches Serve.
type tailnetDialer interface {
	DialTCP(ctx context.Context, host string, port uint16) (net.Conn, error)
}

// defaultRoots verifies Serve's certificates when Config.RootCAs is nil: nil means the system's
// roots, as a browser on a peer trusts them. This package's tests put their own CA here.
var defaultRoots *x509.CertPool

// certFix is what makes Serve's certificate for host valid.
func certFix(host string) string {
	return "turn on HTTPS certificates for the tailnet (admin console → DNS → HTTPS Certificates), then run: tailscale cert " + host
}

// handshake is what a TLS handshake to one published address came to.
type handshake struct {
	status Status
	what   string
	fix    string
}

// checkCertificates makes one TLS handshake, through tailscaled, to each HTTPS address among
// routes, and sums them up: OK when every one presented a certificate valid for its name; FAIL
// when one did not; WARN when one could not be tried (the LocalAPI cannot dial, or tailscaled
// could not connect). Routes over plain HTTP need none.
func (r *run) checkCertificates(ctx context.Context, routes []route) handshake {
	seen := map[ipn.HostPort]bool{}
	var hps []ipn.HostPort
	for _, rt := range routes {
		if rt.scheme == "https" && !seen[rt.hp] {
			seen[rt.hp] = true
			hps = append(hps, rt.hp)
		}
	}
	sort.Slice(hps, func(i, j int) bool { return hps[i] < hps[j] })
	sum := handshake{status: OK}
	var whats, fixes []string
	for _, hp := range hps {
		h := r.handshakeTo(ctx, hp)
		if h.status > sum.status {
			sum.status = h.status
		}
		whats = append(whats, h.what)
		if h.fix != "" {
			fixes = append(fixes, h.fix)
		}
	}
	if len(whats) > 0 {
		sum.what = "; " + strings.Join(whats, "; ")
	}
	sum.fix = strings.Join(fixes, "; ")
	return sum
}

// handshakeTo connects to hp through tailscaled and makes a TLS handshake with its name, the
// certificate verified against the system's roots (Config.RootCAs) for that name.
func (r *run) handshakeTo(ctx context.Context, hp ipn.HostPort) handshake {
	host, portStr, err := net.SplitHostPort(string(hp))
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || host == "" || port == 0 {
		return handshake{Warn, fmt.Sprintf("cannot check the certificate of %q: not a name and port", string(hp)),
			"check 'tailscale serve status'"}
	}
	url := "https://" + host
	if port != 443 {
		url += ":" + portStr
	}
	openIt := "open " + url + "/ from another device of the tailnet: it must load with no certificate warning"
	d, ok := r.cfg.LocalAPI.(tailnetDialer)
	if !ok {
		return handshake{Warn, fmt.Sprintf("cannot check the certificate %s presents: this LocalAPI cannot dial through tailscaled", url), openIt}
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	conn, err := d.DialTCP(dctx, host, uint16(port))
	if err != nil {
		return handshake{Warn, fmt.Sprintf("cannot check the certificate %s presents: tailscaled could not connect to it (%s)", url, shortErr(err)), openIt}
	}
	defer conn.Close()
	if _, real := r.cfg.LocalAPI.(*local.Client); real {
		if _, direct := conn.(*net.TCPConn); direct {
			// tailscaled answered "dial it yourself" (Dial-Self): it does not route that address,
			// and what answers this process there need not be what a peer reaches.
			return handshake{Warn, fmt.Sprintf("cannot check the certificate %s presents: tailscaled does not carry a connection to it from this machine (%s)", url, conn.RemoteAddr()), openIt}
		}
	}
	if dl, ok := dctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	roots := r.cfg.RootCAs
	if roots == nil {
		roots = defaultRoots
	}
	tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(dctx); err != nil {
		var hostErr x509.HostnameError
		var authErr x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		var verr *tls.CertificateVerificationError
		switch {
		case errors.As(err, &hostErr), errors.As(err, &authErr), errors.As(err, &invalid), errors.As(err, &verr):
			return handshake{Fail, fmt.Sprintf("%s presents a certificate that is not valid for %s (%s): every browser on the tailnet refuses it", url, host, shortErr(err)), certFix(host)}
		}
		return handshake{Fail, fmt.Sprintf("a TLS handshake to %s through tailscaled, as a peer connects, fails (%s): tailscaled has no certificate for it, so no peer can open it", url, shortErr(err)), certFix(host)}
	}
	tc.Close()
	until := ""
	if chains := tc.ConnectionState().VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
		until = ", until " + chains[0][0].NotAfter.UTC().Format(time.DateOnly)
	}
	return handshake{OK, fmt.Sprintf("a TLS handshake to %s through tailscaled presents a certificate valid for %s%s", url, host, until), ""}
}
