package tailnet

// The test harness: a door that judges with a real Verifier — package proxy's Door, with the
// Verifier as its Host admission and caller verification, served by proxy.NewServer on a real
// 127.0.0.1 listener (and, for the unix door, a private unix socket) — a fake tailscaled LocalAPI
// served over a unix socket (so the real tailscale.com/client/local code runs), an echo console
// that records what reached it, and raw requests written as bytes over net.Dial
// (internal/doortest).

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/testdirs"
	"github.com/phase-console/fleet/internal/testlog"
	"github.com/phase-console/fleet/proxy"
)

// The Verifier is what the loopback door plugs into proxy.Door.
var (
	_ proxy.CallerVerifier = (*Verifier)(nil)
	_ proxy.HostAdmitter   = (*Verifier)(nil)
)

// testToken is the fleet token the test door asserts on every hop.
const testToken = "test-fleet-token"

// door is a running door that judges with a Verifier, its fake tailscaled, its console Alpha and
// a client for it.
type door struct {
	*doortest.Client
	t       testing.TB
	v       *Verifier
	judge   *proxy.Door
	tailnet *doortest.FakeTailscaled
	// build1 and beta are two more consoles, for the grants' tests (SPEC G1).
	build1, beta *echoconsole.Console
	stop         chan struct{}
}

type doorOption func(*Config)

// uid is a Config.TailscaledUID that always answers n.
func uid(n int) func() (uint32, error) { return func() (uint32, error) { return uint32(n), nil } }

func startDoor(t testing.TB, opts ...doorOption) *door {
	t.Helper()
	return startDoorWith(t, doortest.NewFakeTailscaled(), opts...)
}

// startDoorWith starts a door on tn whose tailscaled is this test process (TailscaledUID is its
// uid), unless an option says otherwise.
func startDoorWith(t testing.TB, tn *doortest.FakeTailscaled, opts ...doorOption) *door {
	t.Helper()
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	api := doortest.ServeLocalAPI(t, tn)
	cfg := Config{
		LocalAPI:       api,
		TailscaledUID:  uid(os.Getuid()),
		TailscaledArgs: tn.CommandLine(api.Socket),
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
	alpha := echoconsole.New(t)
	d := &door{
		Client: &doortest.Client{T: t, Logs: logs, Alpha: alpha, Token: testToken},
		t:      t, v: v, tailnet: tn, stop: make(chan struct{}),
		build1: echoconsole.New(t), beta: echoconsole.New(t),
	}
	hop := proxy.NewHop(log, proxy.MarkDownFunc(func(string) {}), proxy.DialConsole)
	d.judge = &proxy.Door{
		Hop:       hop,
		Log:       log,
		Host:      v,
		Callers:   v,
		Consoles:  consoles{"alpha": alpha.Addr(), "build-1": d.build1.Addr(), "beta": d.beta.Addr()},
		Token:     fixedToken(testToken),
		FromServe: true,
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.Addr = ln.Addr().String()
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
func (d *door) setTailscaled(t *testing.T, fn func(f *doortest.FakeTailscaled)) {
	t.Helper()
	d.tailnet.Set(fn)
	// Twice: the first may join a poll that started before the change (the door's first one).
	d.v.Refresh(context.Background())
	d.v.Refresh(context.Background())
}

// rawUnix writes req to a new connection to the unix-socket door at sock and reads one response.
func (d *door) rawUnix(t *testing.T, sock, req string) doortest.Response {
	t.Helper()
	return d.ExchangeOn(doortest.Dial(t, "unix", sock), req)
}

// unixServeReq is a request as Serve sends it to a unix-socket backend for Alice.
const unixServeReq = "GET /c/alpha/ HTTP/1.1\nHost: localhost\nX-Forwarded-Host: " + doortest.TSName +
	"\nX-Forwarded-For: " + doortest.AliceIP + "\nX-Forwarded-Proto: https\nTailscale-User-Login: " + doortest.Alice + "\n\n"

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

// waitUntil checks cond until it holds, for at most doortest.WaitLimit.
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(doortest.WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
