// Package tailnettest brings up a real tailnet inside one `go test` process, with no internet, for
// the end-to-end tests of other packages (e2e/tailnet, e2e/fleetwide): a DERP relay and STUN on
// 127.0.0.1, a control server (tailscale.com/tstest/integration/testcontrol) and tsnet nodes, as
// tsnet's own tests do. It is for tests only; nothing in the product imports it.
package tailnettest

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn/store/mem"
	"tailscale.com/logtail"
	"tailscale.com/net/netns"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
	"tailscale.com/tstest/integration"
	"tailscale.com/tstest/integration/testcontrol"
	"tailscale.com/types/logger"
)

// Prepare is for a TestMain: no log upload, ever (tsnet skips its logger under `go test`; this
// makes sure), and, as tsnet's own tests (corp#4520), no socket marks or SO_BINDTODEVICE.
func Prepare() {
	logtail.Disable()
	netns.SetEnabled(false)
}

// Logf is a Logf for the tailnet's parts that prints with prefix when verbose, and goes quiet
// when t is over (tsnet logs from its goroutines).
func Logf(t testing.TB, verbose bool, prefix string) logger.Logf {
	if !verbose {
		return logger.Discard
	}
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	return func(format string, args ...any) {
		if !done.Load() {
			t.Logf(prefix+format, args...)
		}
	}
}

// StartControl runs DERP+STUN and a control server on 127.0.0.1 whose nodes get MagicDNS names
// under magicDNSDomain (and certificate domains, for Serve's HTTPS). configure, if not nil, sets
// more of the server before it starts.
func StartControl(t testing.TB, verbose bool, magicDNSDomain string, configure func(*testcontrol.Server)) *testcontrol.Server {
	t.Helper()
	derpMap := integration.RunDERPAndSTUN(t, Logf(t, verbose, "derp: "), "127.0.0.1")
	control := &testcontrol.Server{
		DERPMap:        derpMap,
		DNSConfig:      &tailcfg.DNSConfig{Proxied: true},
		MagicDNSDomain: magicDNSDomain,
		Logf:           Logf(t, verbose, "control: "),
	}
	if configure != nil {
		configure(control)
	}
	control.HTTPTestServer = httptest.NewUnstartedServer(control)
	control.HTTPTestServer.Start()
	t.Cleanup(control.HTTPTestServer.Close)
	return control
}

// A Node is one tsnet node of the test tailnet, up and with a home DERP region.
type Node struct {
	Name string
	Srv  *tsnet.Server
	LC   *local.Client
	IP   netip.Addr // its Tailscale IPv4
}

// StartNode brings up the ephemeral node name (tags, if any, advertised) on control and waits
// for its home DERP region. It is closed when t ends.
func StartNode(t testing.TB, ctx context.Context, verbose bool, control *testcontrol.Server, name string, tags ...string) *Node {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &tsnet.Server{
		Dir:           dir,
		ControlURL:    control.HTTPTestServer.URL,
		Hostname:      name,
		Store:         new(mem.Store),
		Ephemeral:     true,
		AdvertiseTags: tags,
		Logf:          Logf(t, verbose, name+": "),
		UserLogf:      Logf(t, verbose, name+": "),
	}
	t.Cleanup(func() { s.Close() })
	st, err := s.Up(ctx)
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	lc, err := s.LocalClient()
	if err != nil {
		t.Fatal(err)
	}
	WaitHomeDERP(t, ctx, s)
	return &Node{Name: name, Srv: s, LC: lc, IP: st.TailscaleIPs[0]}
}

// WaitHomeDERP waits until s has a home DERP region and has heard from it (as tsnet's tests do),
// so that the first packets to it are not dropped as "peer gone".
func WaitHomeDERP(t testing.TB, ctx context.Context, s *tsnet.Server) {
	t.Helper()
	h := s.Sys().HealthTracker.Get()
	ms := s.Sys().MagicSock.Get()
	for {
		if r := ms.GetLastNetcheckReport(ctx); r != nil && r.PreferredDERP != 0 && !h.GetDERPRegionReceivedTime(r.PreferredDERP).IsZero() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for home DERP: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitWhoIs waits until lc's WhoIs of ip answers with a node and a user: until lc's netmap holds
// that peer.
func WaitWhoIs(t testing.TB, ctx context.Context, lc *local.Client, ip netip.Addr) *apitype.WhoIsResponse {
	t.Helper()
	for {
		who, err := lc.WhoIs(ctx, ip.String())
		if err == nil && who.Node != nil && who.UserProfile != nil {
			return who
		}
		select {
		case <-ctx.Done():
			t.Fatalf("WhoIs(%v) never answered: %v (last: %v)", ip, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
