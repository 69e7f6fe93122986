package supervisor

// The test harness: a real supervisor on a real 127.0.0.1 listener, a fake tailscaled LocalAPI
// served over a unix socket (so the real tailscale.com/client/local code runs), echo consoles that
// record what reached them, and raw requests written as bytes over net.Dial.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/rawhttp"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testlog"
)

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

// fakeTailnet is tailscaled's LocalAPI as far as the supervisor asks it.
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

// commandLine is TailscaledArgs for a door on f, whose LocalAPI socket is sock.
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

// echoConsole records every request that reaches it (internal/echoconsole): /sse streams three
// events, a WebSocket upgrade echoes lines, anything else answers "echo <path>".
type echoConsole struct{ *echoconsole.Console }

func newEchoConsole(t testing.TB, opts ...echoconsole.Option) *echoConsole {
	return &echoConsole{echoconsole.New(t, opts...)}
}

func (e *echoConsole) addr() string       { return e.Addr() }
func (e *echoConsole) count() int         { return e.Count() }
func (e *echoConsole) last() (seen, bool) { return e.Last() }

// door is a running supervisor with its fake tailnet and consoles.
type door struct {
	t       testing.TB
	srv     *Server
	addr    string // 127.0.0.1:port
	home    string
	tailnet *fakeTailnet
	alpha   *echoConsole
	logs    *syncBuffer
	token   string

	// Set by rawMany: how many fleet.rejected lines there were before the last exchange, and
	// how many requests it held.
	rejectedBefore, lastExchange int
}

type doorOption func(*Config)

func startDoor(t testing.TB, opts ...doorOption) *door {
	t.Helper()
	home := filepath.Join(t.TempDir(), "state")
	return startDoorAt(t, home, newFakeTailnet(), opts...)
}

func startDoorAt(t testing.TB, home string, tn *fakeTailnet, opts ...doorOption) *door {
	t.Helper()
	logs := &syncBuffer{}
	api := serveFakeLocalAPI(t, tn)
	cfg := Config{
		StateHome:      home,
		LocalAPI:       api,
		TailscaledUID:  os.Getuid(),
		TailscaledArgs: tn.commandLine(api.Socket),
		Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tok, err := state.ReadToken(filepath.Join(state.FleetDir(home), state.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	d := &door{t: t, srv: srv, addr: ln.Addr().String(), home: home, tailnet: tn, logs: logs, token: tok}
	d.alpha = newEchoConsole(t)
	if _, err := srv.registry.Put(Console{ID: "alpha", Addr: d.alpha.addr(), Name: "Alpha"}); err != nil {
		t.Fatal(err)
	}
	return d
}

// setTailscaled changes what the fake tailscaled says about prefs and Serve, then has the door
// ask it again (tailnet.Verifier.Refresh), as the next poll would.
func (d *door) setTailscaled(t *testing.T, fn func(f *fakeTailnet)) {
	t.Helper()
	d.tailnet.set(fn)
	// Twice: the first may join a poll that started before the change (the door's first one).
	d.srv.tailnet.Refresh(context.Background())
	d.srv.tailnet.Refresh(context.Background())
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
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return toResponses(rawhttp.Exchange(d.t, conn, req, n))
}

// serveReq is a request as Tailscale Serve sends it for alice, with extra header lines.
func serveReq(method, path string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Host: %s\nX-Forwarded-Proto: https\nTailscale-User-Login: %s\n",
		method, path, tsName, aliceIP, tsName, alice)
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

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
	if got := s.Header.Values("X-Phase-Console-Fleet"); len(got) != 1 || got[0] != d.token {
		t.Errorf("console saw %d fleet token header(s), or not the token", len(got))
	}
	if s.Path != path {
		t.Errorf("console saw path %q, want %q", s.Path, path)
	}
	if s.Host != d.alpha.addr() {
		t.Errorf("console saw Host %q, want its own address %q", s.Host, d.alpha.addr())
	}
	return s
}

// syncBuffer is the tests' log sink.
type syncBuffer = testlog.Buffer

// The raw-request helpers every door's tests share (internal/rawhttp).
var (
	crlf         = rawhttp.CRLF
	requestLine  = rawhttp.RequestLine
	foldForTest  = rawhttp.Fold
	hasFolded    = rawhttp.HasFolded
	foldedValues = rawhttp.FoldedValues
)

// toResponses is what rawhttp read, in this harness's shape.
func toResponses(rs []rawhttp.Response) []response {
	out := make([]response, len(rs))
	for i, r := range rs {
		out[i] = response{status: r.Status, reason: r.Reason, header: r.Header, body: r.Body}
	}
	return out
}
