package reach

// The door harness: a real direct-reach door on 127.0.0.1 over real TLS (its own CA), the shared
// hop to an echo console that records what reached it, a device register in a temporary folder,
// a fake clock for the limiter, and raw requests written as bytes over a TLS connection whose
// pool holds only the door's root.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/testlog"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
)

// waitLimit bounds every wait of these tests: a guard against a hang, never an assertion.
const waitLimit = 10 * time.Second

// seen is one request as a console received it.
type seen = echoconsole.Request

// echoConsole records what reaches it (internal/echoconsole, held streams): /sse streams an
// event, then waits for the request to end (a tick at each Tick); a WebSocket upgrade echoes
// lines until the connection ends.
type echoConsole struct{ *echoconsole.Console }

func newEchoConsole(t testing.TB) *echoConsole {
	return &echoConsole{echoconsole.New(t, echoconsole.HeldStreams())}
}

// received is how many requests reached the console, and the last.
func (e *echoConsole) received() (int, seen) {
	reqs := e.All()
	if len(reqs) == 0 {
		return 0, seen{}
	}
	return len(reqs), reqs[len(reqs)-1]
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

type staticToken string

func (s staticToken) Current() (string, error) { return string(s), nil }

type testDoor struct {
	t        testing.TB
	door     *Door
	addr     string // "127.0.0.1:port"
	pool     *x509.CertPool
	clock    *fakeClock
	alpha    *echoConsole
	hop      *proxy.Hop
	reachDir string
	register *pairing.Register
	logs     *testlog.Buffer
}

func startTestDoor(t testing.TB, setup ...func(*Config)) *testDoor {
	t.Helper()
	dir := t.TempDir()
	reachDir := filepath.Join(dir, "reach")
	reg, err := pairing.OpenRegister(reachDir)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	clock := newFakeClock()
	alpha := newEchoConsole(t)
	hop := proxy.NewHop(log, proxy.MarkDownFunc(func(string) {}), proxy.DialConsole)
	t.Cleanup(func() { hop.Close() })
	cfg := Config{
		Profile:  Profile{Mode: ModeDirect, Listen: rawhttp.FreeLoopbackAddr(t)},
		TLSDir:   filepath.Join(reachDir, "tls"),
		Hop:      hop,
		Consoles: consoleMap{"alpha": alpha.Addr()},
		Token:    staticToken("fleet-token-for-tests"),
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
	return &testDoor{t: t, door: d, addr: d.Addr().String(), pool: pool, clock: clock, alpha: alpha,
		hop: hop, reachDir: reachDir, register: reg, logs: logs}
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
	return reqHost(method, target, d.addr, extra...)
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
	dialer := &net.Dialer{Timeout: waitLimit}
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
	conn, err := tls.DialWithDialer(dialer, "tcp", d.addr, cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(waitLimit))
	return conn
}

type response struct {
	status int
	reason string
	header http.Header
	body   string
}

func (d *testDoor) raw(req string) response { return d.rawSNI("", req) }

// rawFrom is raw from the loopback address src.
func (d *testDoor) rawFrom(src, req string) response { return d.exchange(d.dialFrom(src, ""), req) }

// rawSNI writes req on a new TLS connection (SNI serverName) and reads one response.
func (d *testDoor) rawSNI(serverName, req string) response {
	return d.exchange(d.dial(serverName), req)
}

func (d *testDoor) exchange(conn *tls.Conn, req string) response {
	d.t.Helper()
	defer conn.Close()
	go io.WriteString(conn, req)
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		d.t.Fatalf("reading the answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return response{status: resp.StatusCode, reason: resp.Header.Get("X-Fleet-Reason"), header: resp.Header, body: string(body)}
}

// open writes req and reads the response head; the connection stays open for a stream.
func (d *testDoor) open(req string) (*tls.Conn, *bufio.Reader, *http.Response) {
	d.t.Helper()
	conn := d.dial("")
	if _, err := io.WriteString(conn, req); err != nil {
		d.t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		conn.Close()
		d.t.Fatalf("reading the response: %v", err)
	}
	return conn, br, resp
}
