package fastloop

// The harness of the fast loop's tests: a proxy.Door (the judgement every door shares) served by
// a ConnServer in front of proxy.NewServer on a real 127.0.0.1 listener, as the loopback door
// serves it, with a stand-in for a door's own rules (Host admission, caller verification), echo
// consoles that record what reached them, and raw requests written as bytes over net.Dial
// (internal/doortest). The rules themselves are proven in package proxy (whose door tests run
// through this loop too: proxy/loopback_door_test.go); these tests prove what is the loop's own.

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/testlog"
	"github.com/phase-console/fleet/proxy"
)

// standIn is a door's own rules, as the harness plays them: Host is admitted when it is
// doortest.TSName or a loopback name (else 421 host); every caller is Alice. It counts what it
// was asked, so that a test can show that a request was judged once, and records the consoles
// marked down.
type standIn struct {
	asked   atomic.Int64 // VerifyCaller calls
	tokErr  atomic.Bool
	token   string
	mu      sync.Mutex
	console map[string]string
	down    []string
}

func (s *standIn) AdmitHost(r *http.Request) *proxy.Refusal {
	h := r.Host
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	if h == doortest.TSName || h == "localhost" || h == "127.0.0.1" {
		return nil
	}
	return proxy.Refuse(http.StatusMisdirectedRequest, "host", "not this door's name")
}

func (s *standIn) VerifyCaller(r *http.Request, consoleID string) (proxy.Caller, *proxy.Refusal) {
	s.asked.Add(1)
	return proxy.Caller{Login: doortest.Alice, IP: netip.MustParseAddr(doortest.AliceIP)}, nil
}

func (s *standIn) Lookup(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.console[id]
	return a, ok
}

func (s *standIn) Current() (string, error) {
	if s.tokErr.Load() {
		return "", errors.New("token file unusable")
	}
	return s.token, nil
}

func (s *standIn) MarkDown(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = append(s.down, id)
}

// testDoor is a running Door, served by a ConnServer, with its stand-in, one console, Alpha, and
// a client for it.
type testDoor struct {
	*doortest.Client
	t    testing.TB
	door *proxy.Door
	own  *standIn
	cs   *ConnServer // the door's connection loop (serve)
}

// startTestDoor serves a Door on 127.0.0.1. setup, if any, changes the Door before it serves.
func startTestDoor(t testing.TB, setup ...func(*proxy.Door)) *testDoor {
	t.Helper()
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	own := &standIn{token: "fleet-token-for-tests-0123456789abcdef", console: map[string]string{}}
	d := &testDoor{Client: &doortest.Client{T: t, Logs: logs, Token: own.token}, t: t, own: own}
	d.door = &proxy.Door{
		Hop:       proxy.NewHop(log, own, nil),
		Log:       log,
		Host:      own,
		Callers:   own,
		Consoles:  own,
		Token:     own,
		FromServe: true,
	}
	for _, f := range setup {
		f(d.door)
	}
	d.Addr = d.serve(t, proxy.NewServer(d.door, log))
	d.Alpha = echoconsole.New(d.t)
	d.setConsole("alpha", d.Alpha.Addr())
	return d
}

// serve serves srv on a new 127.0.0.1 listener until the test ends, as the loopback door serves
// its own: through a ConnServer (the fast loop, then srv).
func (d *testDoor) serve(t testing.TB, srv *http.Server) string {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &ConnServer{Door: d.door, Server: srv}
	d.cs = cs
	go cs.Serve(ln)
	t.Cleanup(func() { cs.Close() })
	return ln.Addr().String()
}

func (d *testDoor) setConsole(id, addr string) {
	d.own.mu.Lock()
	defer d.own.mu.Unlock()
	d.own.console[id] = addr
}
