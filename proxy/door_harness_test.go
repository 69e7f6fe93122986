package proxy

// The door harness: a Door (the judgement every door shares) served by NewServer on a real
// 127.0.0.1 listener, with a stand-in for a door's own rules (Host admission, caller
// verification), echo consoles that record what reached them, and raw requests written as bytes
// over net.Dial (internal/doortest). The rules of the hop (S3, S4, S6, S7, S9, S12) are proven
// here once for both doors; each door's own rules (S5, S10; R5–R9) are proven in its package.

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
)

// standIn is a door's own rules, as the harness plays them: Host is admitted when it is
// doortest.TSName or a loopback name (else 421 host); every caller is Alice, unless refuse is
// set. It counts what it was asked, so that a test can show that a request was refused before.
type standIn struct {
	asked   atomic.Int64 // VerifyCaller calls
	refuse  atomic.Pointer[Refusal]
	tokErr  atomic.Bool
	token   string
	mu      sync.Mutex
	console map[string]string
	down    []string
}

func (s *standIn) AdmitHost(r *http.Request) *Refusal {
	h := r.Host
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	if h == doortest.TSName || h == "localhost" || h == "127.0.0.1" {
		return nil
	}
	return Refuse(http.StatusMisdirectedRequest, "host", "not this door's name")
}

func (s *standIn) VerifyCaller(r *http.Request, consoleID string) (Caller, *Refusal) {
	s.asked.Add(1)
	if ref := s.refuse.Load(); ref != nil {
		return Caller{}, ref
	}
	return Caller{Login: doortest.Alice, IP: netip.MustParseAddr(doortest.AliceIP)}, nil
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

// testDoor is a running Door with its stand-in and one console, Alpha, and a client for it.
type testDoor struct {
	*doortest.Client
	t    testing.TB
	door *Door
	own  *standIn
}

// startTestDoor serves a Door on 127.0.0.1. setup, if any, changes the Door before it serves.
func startTestDoor(t testing.TB, setup ...func(*Door)) *testDoor {
	t.Helper()
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	own := &standIn{token: "fleet-token-for-tests-0123456789abcdef", console: map[string]string{}}
	d := &testDoor{Client: &doortest.Client{T: t, Logs: logs, Token: own.token}, t: t, own: own}
	d.door = &Door{
		Hop:       NewHop(log, own, nil),
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
	d.Addr = d.serve(t, NewServer(d.door, log))
	d.Alpha = d.addConsole("alpha")
	return d
}

// ServeDoorConns serves the connections of ln for a test door whose net/http server is srv, as
// the loopback door serves its own, and returns what closes them all. It is set by
// loopback_door_test.go to the loopback door's connection loop (package proxy/fastloop: the fast
// loop, then srv), which this package must not import, so that every rule here is proven on the
// loop too; nil (a test binary without that file) serves with srv alone.
var ServeDoorConns func(d *Door, srv *http.Server, ln net.Listener) (closeAll func())

// serve serves srv on a new 127.0.0.1 listener until the test ends (ServeDoorConns).
func (d *testDoor) serve(t testing.TB, srv *http.Server) string {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ServeDoorConns == nil {
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	} else {
		t.Cleanup(ServeDoorConns(d.door, srv, ln))
	}
	return ln.Addr().String()
}

// addConsole starts an echo console and registers it as id.
func (d *testDoor) addConsole(id string) *echoconsole.Console {
	e := echoconsole.New(d.t)
	d.setConsole(id, e.Addr())
	return e
}

func (d *testDoor) setConsole(id, addr string) {
	d.own.mu.Lock()
	defer d.own.mu.Unlock()
	d.own.console[id] = addr
}
