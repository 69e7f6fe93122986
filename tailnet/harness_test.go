package tailnet

// The test harness: a door that judges with a real Verifier — package proxy's Door, with the
// Verifier as its Host admission and caller verification, served by proxy.NewServer on a real
// 127.0.0.1 listener (and, for the unix door, a private unix socket) — a fake tailscaled LocalAPI
// served over a unix socket (so the real tailscale.com/client/local code runs), an echo console
// that records what reached it, and raw requests written as bytes over net.Dial.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/testdirs"
	"github.com/phase-console/fleet/internal/testlog"
	"github.com/phase-console/fleet/proxy"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
)

// The Verifier is what the loopback door plugs into proxy.Door.
var (
	_ proxy.CallerVerifier = (*Verifier)(nil)
	_ proxy.HostAdmitter   = (*Verifier)(nil)
)

// waitLimit bounds every wait in these tests; nothing is asserted about how long anything takes.
const waitLimit = 10 * time.Second

// testToken is the fleet token the test door asserts on every hop.
const testToken = "test-fleet-token"

const (
	tsName   = "sup.tail1234.ts.net"
	aliceIP  = "100.101.102.103"
	alice    = "alice@example.com"
	bobIP    = "fd7a:115c:a1e0::b0b"
	bob      = "bob@example.com"
	taggedIP = "100.101.102.104"
	jurgenIP = "100.101.102.105"
	jurgen   = "jürgen@example.com"
	selfIP   = "100.101.102.1"
)

// fakeTailnet is tailscaled's LocalAPI as far as a Verifier asks it.
type fakeTailnet struct {
	mu       sync.Mutex
	peers    map[string]fakePeer // by bare IP
	direct   func(addr string) bool
	tun      bool
	down     bool
	whoisLog []string

	// S5e: tailscaled's prefs and Serve config (default: no Tailscale SSH, no raw forward);
	// prefsDown and serveDown make just that call fail.
	runSSH               bool
	serve                *ipn.ServeConfig
	prefsDown, serveDown bool
	// args, if not nil, is tailscaled's command line (else this test process's own, read
	// through the fake LocalAPI's socket as fleet reads tailscaled's); argsDown makes reading
	// it fail.
	args     []string
	argsDown bool
}

// commandLine is Config.TailscaledArgs for a door on f, whose LocalAPI socket is sock.
func (f *fakeTailnet) commandLine(sock string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		f.mu.Lock()
		args, down := f.args, f.argsDown
		f.mu.Unlock()
		switch {
		case down:
			return nil, errors.New("open /proc/4242/cmdline: permission denied")
		case args != nil:
			return args, nil
		}
		return peercred.SocketServerArgs(ctx, sock)
	}
}

type fakePeer struct {
	login  string
	tagged bool
	// caps, if not nil, is the peer's CapMap in WhoIs (app capability grants, SPEC G1).
	caps tailcfg.PeerCapMap
}

func newFakeTailnet() *fakeTailnet {
	return &fakeTailnet{peers: map[string]fakePeer{
		aliceIP:  {login: alice},
		bobIP:    {login: bob},
		jurgenIP: {login: jurgen},
		taggedIP: {login: "tagged-devices", tagged: true},
	}}
}

func (f *fakeTailnet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		http.Error(w, "tailscaled is down", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/localapi/v0/whois":
		addr := r.URL.Query().Get("addr")
		f.whoisLog = append(f.whoisLog, addr)
		if _, err := netip.ParseAddrPort(addr); err == nil {
			// An ip:port: a connection tailscaled itself forwarded (S5b), or not known.
			if f.direct != nil && f.direct(addr) {
				json.NewEncoder(w).Encode(&apitype.WhoIsResponse{
					Node:        &tailcfg.Node{ID: 9, Name: "direct."},
					UserProfile: &tailcfg.UserProfile{LoginName: alice},
				})
				return
			}
			http.Error(w, "no match for IP:port", http.StatusNotFound)
			return
		}
		p, ok := f.peers[addr]
		if !ok {
			http.Error(w, "no match for IP:port", http.StatusNotFound)
			return
		}
		n := &tailcfg.Node{ID: 1, Name: "peer."}
		if p.tagged {
			n.Tags = []string{"tag:ci"}
		}
		json.NewEncoder(w).Encode(&apitype.WhoIsResponse{Node: n, UserProfile: &tailcfg.UserProfile{LoginName: p.login}, CapMap: p.caps})
	case "/localapi/v0/prefs":
		if f.prefsDown {
			http.Error(w, "prefs unavailable", http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode(&ipn.Prefs{RunSSH: f.runSSH})
	case "/localapi/v0/serve-config":
		if f.serveDown {
			http.Error(w, "serve config unavailable", http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode(f.serve)
	case "/localapi/v0/status":
		json.NewEncoder(w).Encode(&ipnstate.Status{
			Version:      "1.102.5",
			TUN:          f.tun,
			BackendState: "Running",
			TailscaleIPs: []netip.Addr{netip.MustParseAddr(selfIP)},
			Self:         &ipnstate.PeerStatus{DNSName: tsName + ".", HostName: "sup"},
		})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeTailnet) set(fn func(f *fakeTailnet)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// serveFakeLocalAPI serves f on a unix socket and returns a real LocalAPI client for it.
func serveFakeLocalAPI(t testing.TB, f *fakeTailnet) *local.Client {
	dir, err := os.MkdirTemp("", "fleet-lapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tailscaled.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &local.Client{Socket: sock, UseSocketOnly: true}
}

// seen is one request as a console received it.
type seen = echoconsole.Request

// echoConsole records every request that reaches it (internal/echoconsole).
type echoConsole struct{ *echoconsole.Console }

func (e *echoConsole) addr() string       { return e.Addr() }
func (e *echoConsole) count() int         { return e.Count() }
func (e *echoConsole) last() (seen, bool) { return e.Last() }

// door is a running door that judges with a Verifier, its fake tailnet and its console alpha.
type door struct {
	t       testing.TB
	v       *Verifier
	judge   *proxy.Door
	addr    string // 127.0.0.1:port
	tailnet *fakeTailnet
	alpha   *echoConsole
	// build1 and beta are two more consoles, for the grants' tests (SPEC G1).
	build1, beta *echoConsole
	logs         *syncBuffer
	stop         chan struct{}

	// Set by rawMany: how many fleet.rejected lines there were before the last exchange, and
	// how many requests it held.
	rejectedBefore, lastExchange int
}

type doorOption func(*Config)

// uid is a Config.TailscaledUID that always answers n.
func uid(n int) func() (uint32, error) { return func() (uint32, error) { return uint32(n), nil } }

func startDoor(t testing.TB, opts ...doorOption) *door {
	t.Helper()
	return startDoorWith(t, newFakeTailnet(), opts...)
}

// startDoorWith starts a door on tn whose tailscaled is this test process (TailscaledUID is its
// uid), unless an option says otherwise.
func startDoorWith(t testing.TB, tn *fakeTailnet, opts ...doorOption) *door {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	api := serveFakeLocalAPI(t, tn)
	cfg := Config{
		LocalAPI:       api,
		TailscaledUID:  uid(os.Getuid()),
		TailscaledArgs: tn.commandLine(api.Socket),
		LocalAPIHint:   "socket " + api.Socket,
		Access:         access.ModeTailnet,
		Log:            log,
	}
	for _, o := range opts {
		o(&cfg)
	}
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &door{t: t, v: v, tailnet: tn, logs: logs, stop: make(chan struct{})}
	d.alpha = &echoConsole{echoconsole.New(t)}
	d.build1 = &echoConsole{echoconsole.New(t)}
	d.beta = &echoConsole{echoconsole.New(t)}
	hop := proxy.NewHop(log, proxy.MarkDownFunc(func(string) {}), proxy.DialConsole)
	d.judge = &proxy.Door{
		Hop:       hop,
		Log:       log,
		Host:      v,
		Callers:   v,
		Consoles:  consoles{"alpha": d.alpha.addr(), "build-1": d.build1.addr(), "beta": d.beta.addr()},
		Token:     fixedToken(testToken),
		FromServe: true,
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.addr = ln.Addr().String()
	srv := proxy.NewServer(d.judge, log)
	srv.ConnContext = v.ConnContext
	v.Watch(ln.Addr(), d.stop)
	go srv.Serve(ln)
	t.Cleanup(func() {
		close(d.stop)
		srv.Close()
		hop.Close()
	})
	return d
}

// consoles is the door's console lookup: id to loopback address.
type consoles map[string]string

func (c consoles) Lookup(id string) (string, bool) { a, ok := c[id]; return a, ok }

// fixedToken is the door's fleet token.
type fixedToken string

func (f fixedToken) Current() (string, error) { return string(f), nil }

// serveUnix serves d's judgement on a unix-socket door too, as the supervisor does (Host from
// RestoreServeHost, then the same Door), and returns the socket's path.
func (d *door) serveUnix(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(testdirs.Private(t), "serve.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := proxy.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.v.RestoreServeHost(r)
		d.judge.ServeHTTP(w, r)
	}), d.judge.Log)
	srv.ConnContext = d.v.ConnContext
	d.v.Watch(ln.Addr(), d.stop)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// setTailscaled changes what the fake tailscaled says about prefs and Serve, then drives one
// poll of the forward watch, as the next tick would.
func (d *door) setTailscaled(t *testing.T, fn func(f *fakeTailnet)) {
	t.Helper()
	d.tailnet.set(fn)
	// Twice: the first may join a poll that started before the change (the door's first one).
	d.v.Refresh(context.Background())
	d.v.Refresh(context.Background())
}

// response is one parsed answer to a raw request.
type response struct {
	status int
	reason string // X-Fleet-Reason
	header http.Header
	body   string
}

// raw writes req (CRLF line ends may be written as \n; they are converted) to a new connection and
// reads one response.
func (d *door) raw(req string) response {
	d.t.Helper()
	rs := d.rawMany(req, 1)
	return rs[0]
}

// rawMany writes req (possibly several pipelined requests) and reads n responses.
func (d *door) rawMany(req string, n int) []response {
	d.t.Helper()
	d.rejectedBefore, d.lastExchange = len(d.logs.Events("fleet.rejected")), n
	conn, err := net.Dial("tcp", d.addr)
	if err != nil {
		d.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	rs := rawhttp.Exchange(d.t, conn, req, n)
	out := make([]response, len(rs))
	for i, r := range rs {
		out[i] = response{status: r.Status, reason: r.Reason, header: r.Header, body: r.Body}
	}
	return out
}

// rawUnix writes req to a new connection to the unix-socket door at sock and reads one response.
func (d *door) rawUnix(t *testing.T, sock, req string) response {
	t.Helper()
	d.rejectedBefore, d.lastExchange = len(d.logs.Events("fleet.rejected")), 1
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dialling %s: %v", sock, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(conn, crlf(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return response{status: resp.StatusCode, reason: resp.Header.Get("X-Fleet-Reason"), header: resp.Header, body: string(body)}
}

// dial opens a connection to the door whose reads and writes are bounded by waitLimit.
func (d *door) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(waitLimit))
	return conn
}

// serveReq is a request as Tailscale Serve sends it for alice, with extra header lines.
func serveReq(method, path string, extra ...string) string {
	return serveReqHost(method, path, tsName, extra...)
}

// serveReqHost is serveReq with another Host (Serve keeps the Host that the caller used).
func serveReqHost(method, path, host string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Host: %s\nX-Forwarded-Proto: https\nTailscale-User-Login: %s\n",
		method, path, host, aliceIP, host, alice)
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

// unixServeReq is a request as Serve sends it to a unix-socket backend for alice.
const unixServeReq = "GET /c/alpha/ HTTP/1.1\nHost: localhost\nX-Forwarded-Host: " + tsName +
	"\nX-Forwarded-For: " + aliceIP + "\nX-Forwarded-Proto: https\nTailscale-User-Login: " + alice + "\n\n"

// wantRefused checks a refusal: status, reason, one fleet.rejected log line with that reason, and
// that the console saw nothing new.
func (d *door) wantRefused(t *testing.T, r response, before int, status int, reason string) {
	t.Helper()
	if r.status != status || r.reason != reason {
		t.Errorf("got %d %q, want %d %q (body %q)", r.status, r.reason, status, reason, r.body)
	}
	if n := d.alpha.count(); n != before {
		t.Errorf("the console saw %d new request(s); a refused request must never be forwarded", n-before)
	}
	if d.lastExchange == 1 { // S11: exactly one log line for this refusal, with its reason
		lines := d.logs.Events("fleet.rejected")[d.rejectedBefore:]
		if len(lines) != 1 || lines[0]["reason"] != reason {
			t.Errorf("want one fleet.rejected line with reason %q, got %v", reason, lines)
		}
	}
}

// wantForwarded checks that the request reached alpha as login with path, and returns what it saw.
func (d *door) wantForwarded(t *testing.T, r response, before int, login, path string) seen {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("got %d %q (%q), want 200", r.status, r.reason, r.body)
	}
	if n := d.alpha.count(); n != before+1 {
		t.Fatalf("the console saw %d new requests, want 1", n-before)
	}
	s, _ := d.alpha.last()
	if got := s.Header.Values("X-Phase-Console-Fleet-Login"); len(got) != 1 || got[0] != login {
		t.Errorf("console saw login %q, want %q", got, login)
	}
	if got := s.Header.Values("X-Phase-Console-Fleet"); len(got) != 1 || got[0] != testToken {
		t.Errorf("console saw %d fleet token header(s), or not the token", len(got))
	}
	if s.Path != path {
		t.Errorf("console saw path %q, want %q", s.Path, path)
	}
	return s
}

// wantRejected sends req and checks the refusal (wantRefused) and that its one fleet.rejected
// line names the method and the path (S11).
func (d *door) wantRejected(t *testing.T, req string, status int, reason string) response {
	t.Helper()
	before := d.alpha.count()
	r := d.raw(req)
	d.wantRefused(t, r, before, status, reason)
	lines := d.logs.Events("fleet.rejected")[d.rejectedBefore:]
	method, target := rawhttp.RequestLine(req)
	path, _, _ := strings.Cut(target, "?")
	if len(lines) == 1 && (lines[0]["method"] != method || lines[0]["path"] != path) {
		t.Errorf("log line method=%v path=%v, want %s %s", lines[0]["method"], lines[0]["path"], method, path)
	}
	return r
}

// syncBuffer is the tests' log sink.
type syncBuffer = testlog.Buffer

var crlf = rawhttp.CRLF

// wallClock is a settable Config.Now for the tests of how long an answer is used.
type wallClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *wallClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *wallClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// waitUntil checks cond until it holds, for at most waitLimit.
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
