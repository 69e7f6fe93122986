package refconsole

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testlog"
)

const testToken = "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE"

// newStateHome makes a <stateHome> with a fleet folder and a token.
func newStateHome(t *testing.T) (home, fleetDir string) {
	t.Helper()
	home = t.TempDir()
	fleetDir = state.FleetDir(home)
	if err := state.EnsureDir(fleetDir); err != nil {
		t.Fatal(err)
	}
	if err := state.WriteFileAtomic(filepath.Join(fleetDir, state.TokenFile), []byte(testToken+"\n")); err != nil {
		t.Fatal(err)
	}
	return home, fleetDir
}

// supEvent is one request the fake supervisor answered.
type supEvent struct {
	method, id string
	status     int
	body       map[string]string
}

// fakeSup implements the S8 registration API: POST /fleet/v1/consoles (201 new, 200 refreshed,
// 401 without the bearer) and DELETE /fleet/v1/consoles/<id>. Its registry lives in memory, so a
// new fakeSup is a supervisor that lost it.
type fakeSup struct {
	mu       sync.Mutex
	consoles map[string]bool
	events   chan supEvent
}

func newFakeSup() *fakeSup {
	return &fakeSup{consoles: map[string]bool{}, events: make(chan supEvent, 1000)}
}

func (f *fakeSup) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ev := supEvent{method: r.Method}
	defer func() {
		select {
		case f.events <- ev:
		default:
		}
	}()
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		ev.status = http.StatusUnauthorized
		w.WriteHeader(ev.status)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/fleet/v1/consoles":
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev.body); err != nil {
			ev.status = 400
			w.WriteHeader(400)
			return
		}
		ev.id = ev.body["id"]
		ev.status = http.StatusOK
		if !f.consoles[ev.id] {
			f.consoles[ev.id] = true
			ev.status = http.StatusCreated
		}
		w.WriteHeader(ev.status)
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/fleet/v1/consoles/"):
		ev.id = strings.TrimPrefix(r.URL.Path, "/fleet/v1/consoles/")
		ev.status = http.StatusNotFound
		if f.consoles[ev.id] {
			delete(f.consoles, ev.id)
			ev.status = http.StatusNoContent
		}
		w.WriteHeader(ev.status)
	default:
		ev.status = 404
		w.WriteHeader(404)
	}
}

// serveOn serves h on addr ("127.0.0.1:0" for any port); the port may still be held by the kernel
// right after a close, so it retries listening for a while.
func serveOn(t *testing.T, addr string, h http.Handler) (*http.Server, string) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 200 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

func waitEvent(t *testing.T, f *fakeSup, want func(supEvent) bool, what string) supEvent {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-f.events:
			if want(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("the fake supervisor never saw %s", what)
		}
	}
}

func writeAddr(t *testing.T, fleetDir, addr string) {
	t.Helper()
	if err := state.WriteFileAtomic(filepath.Join(fleetDir, state.AddrFile), []byte(addr+"\n")); err != nil {
		t.Fatal(err)
	}
}

// TestRegistrar_S8: finds the supervisor through supervisor.addr, retries while it is down,
// re-registers after it restarts with an empty registry, deregisters on exit.
func TestRegistrar_S8(t *testing.T) {
	_, fleetDir := newStateHome(t)
	logs := &syncBuffer{}
	attempts := make(chan error, 1000)
	g := &Registrar{
		ID: "alpha", Name: "Alpha", Addr: "127.0.0.1:9001",
		FleetDir: fleetDir, Token: func() (string, error) { return testToken, nil },
		Refresh: 10 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	g.attempted = func(err error) {
		select {
		case attempts <- err:
		default:
		}
	}
	waitFailures := func(n int, what string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for n > 0 {
			select {
			case err := <-attempts:
				if err != nil {
					n--
				}
			case <-timeout:
				t.Fatalf("no failed attempts while %s", what)
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()

	// No supervisor.addr yet: it retries.
	waitFailures(2, "supervisor.addr is missing")

	sup1 := newFakeSup()
	srv1, addr := serveOn(t, "127.0.0.1:0", sup1)
	writeAddr(t, fleetDir, addr)
	ev := waitEvent(t, sup1, func(e supEvent) bool { return e.method == "POST" && e.status == 201 }, "a registration")
	if ev.body["id"] != "alpha" || ev.body["addr"] != "127.0.0.1:9001" || ev.body["name"] != "Alpha" || len(ev.body) != 3 {
		t.Fatalf("registered %v", ev.body)
	}
	waitEvent(t, sup1, func(e supEvent) bool { return e.method == "POST" && e.status == 200 }, "a refresh (200)")

	// The supervisor goes down: the registrar keeps trying.
	srv1.Close()
	for len(attempts) > 0 {
		<-attempts
	}
	waitFailures(2, "the supervisor is down")

	// It comes back on the same address with an empty registry: registered anew (201).
	sup2 := newFakeSup()
	serveOn(t, addr, sup2)
	waitEvent(t, sup2, func(e supEvent) bool { return e.method == "POST" && e.status == 201 }, "a registration after the restart")

	// Exit: deregistered, then Run returns.
	cancel()
	<-done
	waitEvent(t, sup2, func(e supEvent) bool { return e.method == "DELETE" && e.id == "alpha" && e.status == 204 }, "the deregistration")

	out := logs.String()
	for _, want := range []string{"console.registered", "console.register-failed", "console.deregistered"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, testToken) {
		t.Fatal("the token appears in the log")
	}
}

// recordingTransport fails the test if anything is sent through it.
type recordingTransport struct {
	mu   sync.Mutex
	sent []string
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.sent = append(rt.sent, r.Method+" "+r.URL.Host)
	rt.mu.Unlock()
	return nil, errors.New("recording transport: nothing should be sent")
}

// TestRegistrar_S8_RefusesNonLoopback: a supervisor address that is not a loopback literal gets
// nothing — not the registration, not the bearer, not the deregistration.
func TestRegistrar_S8_RefusesNonLoopback(t *testing.T) {
	sup := newFakeSup()
	_, supAddr := serveOn(t, "127.0.0.1:0", sup)
	_, port, _ := net.SplitHostPort(supAddr)

	cases := []struct {
		name       string
		supervisor string // --supervisor
		file       string // supervisor.addr contents, when supervisor is ""
		fileMode   os.FileMode
	}{
		{name: "S8 flag with a LAN address", supervisor: "192.168.1.20:7420"},
		{name: "S8 flag with a public address", supervisor: "8.8.8.8:7420"},
		{name: "S8 flag with localhost (a name)", supervisor: "localhost:" + port},
		{name: "S8 flag with a wildcard", supervisor: "0.0.0.0:" + port},
		{name: "S8 flag with IPv4-mapped loopback", supervisor: "[::ffff:127.0.0.1]:" + port},
		{name: "S8 flag without a port", supervisor: "127.0.0.1"},
		{name: "S8 file with a LAN address", file: "10.1.2.3:7420\n", fileMode: 0o600},
		{name: "S8 file with a name", file: "supervisor.example:7420\n", fileMode: 0o600},
		{name: "S8 file too open", file: supAddr + "\n", fileMode: 0o644},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, fleetDir := newStateHome(t)
			if tc.file != "" {
				p := filepath.Join(fleetDir, state.AddrFile)
				if err := os.WriteFile(p, []byte(tc.file), tc.fileMode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, tc.fileMode); err != nil {
					t.Fatal(err)
				}
			}
			rt := &recordingTransport{}
			logs := &syncBuffer{}
			attempts := make(chan error, 100)
			g := &Registrar{
				ID: "alpha", Addr: "127.0.0.1:9001", Supervisor: tc.supervisor, FleetDir: fleetDir,
				Token:  func() (string, error) { return testToken, nil },
				Client: &http.Client{Transport: rt}, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
				Logger: slog.New(slog.NewJSONHandler(logs, nil)),
			}
			g.attempted = func(err error) {
				select {
				case attempts <- err:
				default:
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { g.Run(ctx); close(done) }()
			for range 3 {
				if err := <-attempts; err == nil {
					t.Fatal("an attempt succeeded")
				}
			}
			cancel()
			<-done
			if len(rt.sent) != 0 {
				t.Fatalf("sent %v", rt.sent)
			}
			if !strings.Contains(logs.String(), "the fleet token is not sent") && tc.fileMode != 0o644 {
				t.Fatalf("log does not say why:\n%s", logs.String())
			}
		})
	}
	select {
	case ev := <-sup.events:
		t.Fatalf("the supervisor got %+v", ev)
	default:
	}
}

func TestCheckSupervisorAddr(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:7420", "127.0.0.2:1", "[::1]:7420"} {
		if err := CheckSupervisorAddr(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1", "127.0.0.1:0", "localhost:7420", "[::1%lo]:7420", "10.0.0.1:7420", "[::ffff:127.0.0.1]:7420", "127.0.0.1:7420/x", "http://127.0.0.1:7420"} {
		if err := CheckSupervisorAddr(bad); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("%q: %v, want ErrNotLoopback", bad, err)
		}
	}
}

// syncBuffer is the tests' log sink.
type syncBuffer = testlog.Buffer

// TestRegistrarSaysWhyRefused_S8: a refused registration is logged with the supervisor's reason
// and detail (its JSON answer to a JSON client), not only the status.
func TestRegistrarSaysWhyRefused_S8(t *testing.T) {
	_, fleetDir := newStateHome(t)
	_, addr := serveOn(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":"bad-registration","detail":"addr \"10.0.0.5:9001\": want a loopback literal"}` + "\n"))
	}))
	writeAddr(t, fleetDir, addr)
	attempts := make(chan error, 1)
	g := &Registrar{ID: "alpha", Addr: "10.0.0.5:9001", FleetDir: fleetDir,
		Token:  func() (string, error) { return testToken, nil },
		Logger: slog.New(slog.NewJSONHandler(&syncBuffer{}, nil)),
	}
	g.attempted = func(err error) {
		select {
		case attempts <- err:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	err := <-attempts
	cancel()
	<-done
	want := `answered 400 to the registration: bad-registration: addr "10.0.0.5:9001": want a loopback literal`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to hold %q", err, want)
	}
}
