package reach

// The door harness: a real direct-reach door on 127.0.0.1 over real TLS (its own CA), the shared
// hop to an echo console that records what reached it, a device register in a temporary folder,
// a fake clock for the limiter, and raw requests written as bytes over a TLS connection whose
// pool holds only the door's root (internal/doortest's client, dialling TLS).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/testlog"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
)

// heldConsole is an echo console whose /sse streams are held (echoconsole.HeldStreams): an event,
// then a tick at each Tick until the request ends; a WebSocket upgrade echoes lines until the
// connection ends.
func heldConsole(t testing.TB) *echoconsole.Console {
	return echoconsole.New(t, echoconsole.HeldStreams())
}

type consoleMap map[string]string

func (m consoleMap) Lookup(id string) (string, bool) { a, ok := m[id]; return a, ok }
func (m consoleMap) IDs() []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// fleetToken is the fleet token the door asserts on every hop.
const fleetToken = "fleet-token-for-tests"

type staticToken string

func (s staticToken) Current() (string, error) { return string(s), nil }

// testDoor is a running direct-reach door, its console Alpha, and a client for it whose
// requests are written byte for byte over TLS (dial "": no SNI).
type testDoor struct {
	*doortest.Client
	t        testing.TB
	door     *Door
	pool     *x509.CertPool
	clock    *fakeClock
	hop      *proxy.Hop
	reachDir string
	register *pairing.Register
}

func startTestDoor(t testing.TB, setup ...func(*Config)) *testDoor {
	t.Helper()
	dir := t.TempDir()
	reachDir := filepath.Join(dir, "reach")
	reg, err := pairing.OpenRegister(reachDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.WaitWrites) // before the folder goes
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	clock := newFakeClock()
	alpha := heldConsole(t)
	hop := proxy.NewHop(log, proxy.MarkDownFunc(func(string) {}), proxy.DialConsole)
	t.Cleanup(func() { hop.Close() })
	cfg := Config{
		Profile:  Profile{Mode: ModeDirect, Listen: rawhttp.FreeLoopbackAddr(t)},
		TLSDir:   filepath.Join(reachDir, "tls"),
		Hop:      hop,
		Consoles: consoleMap{"alpha": alpha.Addr()},
		Token:    staticToken(fleetToken),
		Devices:  reg,
		Log:      log,
		Now:      clock.Now,
	}
	for _, f := range setup {
		f(&cfg)
	}
	d, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	reg.OnRevoke(d.Revoke)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(d.RootPEM()) {
		t.Fatal("the root does not parse")
	}
	td := &testDoor{t: t, door: d, pool: pool, clock: clock, hop: hop, reachDir: reachDir, register: reg}
	td.Client = &doortest.Client{T: t, Addr: d.Addr().String(), Logs: logs, Alpha: alpha, Token: fleetToken,
		DialConn: func() net.Conn { return td.dial("") }, AsIs: true}
	return td
}

// pair registers a device and returns it with its cookie line.
func (d *testDoor) pair(name string) (pairing.Device, string) {
	d.t.Helper()
	dev, cred, err := d.register.AddFor(name, access.Everything, d.clock.Now())
	if err != nil {
		d.t.Fatal(err)
	}
	return dev, "Cookie: " + pairing.CookieName + "=" + cred
}

// req is a raw request to the door with its own Host.
func (d *testDoor) req(method, target string, extra ...string) string {
	return reqHost(method, target, d.Addr, extra...)
}

func reqHost(method, target, host string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, host)
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// dial opens a TLS connection trusting only the door's root; serverName "" sends no SNI.
func (d *testDoor) dial(serverName string) *tls.Conn { return d.dialFrom("", serverName) }

// dialFrom is dial from the loopback address src ("" any): another source for the limiter.
func (d *testDoor) dialFrom(src, serverName string) *tls.Conn {
	d.t.Helper()
	dialer := &net.Dialer{Timeout: doortest.WaitLimit}
	if src != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	cfg := &tls.Config{RootCAs: d.pool, NextProtos: []string{"http/1.1"}}
	if serverName != "" {
		// A name the leaf cannot verify: what is tested is the door's answer to it.
		cfg.ServerName, cfg.InsecureSkipVerify = serverName, true
	} else {
		cfg.ServerName = d.door.Addr().Addr().String() // an IP: verified, and sent as no SNI
	}
	conn, err := tls.DialWithDialer(dialer, "tcp", d.Addr, cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	return conn
}

// rawFrom is RawAs from the loopback address src.
func (d *testDoor) rawFrom(src, req string) doortest.Response {
	return d.ExchangeOn(d.dialFrom(src, ""), req)
}

// rawSNI writes req on a new TLS connection (SNI serverName) and reads one response.
func (d *testDoor) rawSNI(serverName, req string) doortest.Response {
	return d.ExchangeOn(d.dial(serverName), req)
}
