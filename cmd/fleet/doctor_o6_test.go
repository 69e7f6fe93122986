package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/phase-console/fleet/internal/testca"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/tailcfg"
)

// The healthy tailscaled of fleet doctor's tests owns its machine (WhoIs of its own address names
// a person) and dials, as tailscaled does for its LocalAPI's callers, a Serve whose HTTPS address
// presents a certificate of the tests' own CA, which the doctor trusts in place of the system's
// roots (SPEC O6).

var doctorTestCA = testca.New()

func init() { doctorRootCAs = doctorTestCA.Pool }

// doctorServe is the stand-in Serve: a TLS listener presenting a valid certificate for
// sup.example.ts.net, for as long as the test binary runs.
var doctorServe = sync.OnceValue(func() string {
	cert := doctorTestCA.Leaf("sup.example.ts.net", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
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
	return ln.Addr().String()
})

func (f *doctorFakeTailscaled) DialTCP(ctx context.Context, host string, port uint16) (net.Conn, error) {
	if host != "sup.example.ts.net" || port != 443 {
		return nil, errors.New("dial failure: no such peer")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", doctorServe())
}

func (f *doctorFakeTailscaled) WhoIs(context.Context, string) (*apitype.WhoIsResponse, error) {
	return &apitype.WhoIsResponse{Node: &tailcfg.Node{ID: 1}, UserProfile: &tailcfg.UserProfile{LoginName: "ann@example.com"}}, nil
}
