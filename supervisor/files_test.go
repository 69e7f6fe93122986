package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testlog"
)

// eventWriter is a log sink that closes seen when a line with event is written.
type eventWriter struct {
	event string
	seen  chan struct{}
	once  sync.Once
	logs  testlog.Buffer
}

func (w *eventWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"msg":"`+w.event+`"`)) {
		w.once.Do(func() { close(w.seen) })
	}
	return w.logs.Write(p)
}

// newServer is New with the fake tailnet and a test logger.
func newServer(t *testing.T, home string, logs *eventWriter) (*Server, error) {
	t.Helper()
	cfg := Config{
		StateHome:     home,
		LocalAPI:      doortest.ServeLocalAPI(t, doortest.NewFakeTailscaled()),
		TailscaledUID: os.Getuid(),
	}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	} else {
		cfg.Logger = slog.New(slog.NewJSONHandler(&testlog.Buffer{}, nil))
	}
	return New(cfg)
}

// TestListenLoopbackOnly_S1: Listen binds 127.0.0.1:<port> and nothing wider; PublishAddr writes
// supervisor.addr (0600); the door serves there, and stops answering after Close.
func TestListenLoopbackOnly_S1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	srv, err := newServer(t, home, nil)
	if err != nil {
		t.Fatal(err)
	}
	port := int(rawhttp.FreeLoopbackAddr(t).Port())
	ln, err := Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.PublishAddr(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	addrFile := filepath.Join(state.FleetDir(home), state.AddrFile)
	want := "127.0.0.1:" + strconv.Itoa(port)
	t.Run("S1 supervisor.addr", func(t *testing.T) {
		b, err := os.ReadFile(addrFile)
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Fatalf("supervisor.addr = %q, %v; want %s", b, err, want)
		}
		if st, _ := os.Stat(addrFile); st.Mode().Perm() != 0o600 {
			t.Errorf("supervisor.addr mode %o, want 600", st.Mode().Perm())
		}
	})
	t.Run("S1 serves on 127.0.0.1", func(t *testing.T) {
		tok, err := state.ReadToken(filepath.Join(state.FleetDir(home), state.TokenFile))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "http://"+want+"/fleet/v1/consoles", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := (&http.Client{Timeout: doortest.WaitLimit}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /fleet/v1/consoles: %d", resp.StatusCode)
		}
	})
	t.Run("S1 nothing wider", func(t *testing.T) {
		// 127.0.0.2 reaches a socket bound to 0.0.0.0, never one bound to 127.0.0.1.
		others := []string{"127.0.0.2", "::1"}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
					others = append(others, ipn.IP.String())
				}
			}
		}
		for _, host := range others {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second)
			if err == nil {
				c.Close()
				t.Errorf("the door answers on %s", host)
			}
		}
	})

	srv.Close()
	select {
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve after Close: %v", err)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatal("Serve did not return after Close")
	}
	if c, err := net.DialTimeout("tcp", want, time.Second); err == nil {
		c.Close()
		t.Error("the door still answers after Close")
	}
}

// TestFreshStateFolder_F1: the first start creates the folder 0700 and the tokens (fleet.token,
// metrics.token) 0600 (one line, base64url, at least 32 bytes); the registry is written 0600 on
// the first registration.
func TestFreshStateFolder_F1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	srv, err := newServer(t, home, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.registry.Put(Console{ID: "alpha", Addr: "127.0.0.1:9001"}); err != nil {
		t.Fatal(err)
	}
	dir := state.FleetDir(home)
	for path, want := range map[string]os.FileMode{
		home:                                0o700,
		dir:                                 0o700,
		filepath.Join(dir, state.TokenFile): 0o600,
		filepath.Join(dir, state.MetricsTokenFile): 0o600,
		filepath.Join(dir, state.RegistryFile):     0o600,
	} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %o; want %o", path, err, st.Mode().Perm(), want)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, state.TokenFile))
	if _, err := state.ParseToken(b); err != nil || strings.Count(string(b), "\n") != 1 {
		t.Errorf("token file %q: %v", b, err)
	}
}

// TestServeAfterCloseReturns_S1: a Server that was closed serves nothing: Serve on a listener
// after Close returns at once instead of serving forever.
func TestServeAfterCloseReturns_S1(t *testing.T) {
	srv, err := newServer(t, filepath.Join(t.TempDir(), "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv.Close()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve after Close: %v, want http.ErrServerClosed", err)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatal("Serve after Close is still serving")
	}
}

// TestTooOpenRefusedAtStart_F1: a folder or file that is group- or world-accessible, or someone
// else's, stops New with an error that names the path and the fix; nothing is re-permissioned
// or rewritten.
func TestTooOpenRefusedAtStart_F1(t *testing.T) {
	// started returns a state folder that one start has filled.
	started := func(t *testing.T) (home, dir string) {
		home = filepath.Join(t.TempDir(), "state")
		if _, err := newServer(t, home, nil); err != nil {
			t.Fatal(err)
		}
		dir = state.FleetDir(home)
		if err := state.WriteFileAtomic(filepath.Join(dir, state.RegistryFile), []byte(`{"consoles":[]}`+"\n")); err != nil {
			t.Fatal(err)
		}
		return home, dir
	}
	t.Run("F1 fleet folder 0755", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "state")
		dir := state.FleetDir(home)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(home, 0o700)
		os.Chmod(dir, 0o755)
		_, err := newServer(t, home, nil)
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod 700 "+dir) {
			t.Fatalf("New: %v; want an error naming %s and chmod 700", err, dir)
		}
		if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
			t.Errorf("the folder was re-permissioned to %o", st.Mode().Perm())
		}
		if _, err := os.Stat(filepath.Join(dir, state.TokenFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a token was written into a refused folder: %v", err)
		}
	})
	t.Run("F1 fleet folder 0701", func(t *testing.T) {
		_, dir := started(t)
		os.Chmod(dir, 0o701)
		if _, err := newServer(t, filepath.Dir(dir), nil); err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
			t.Fatalf("New: %v; want chmod 700 %s", err, dir)
		}
	})
	for _, row := range []struct {
		name, file string
		mode       os.FileMode
	}{
		{"F1 token file 0644", state.TokenFile, 0o644},
		{"F1 token file 0640", state.TokenFile, 0o640},
		{"F1 token file 0604", state.TokenFile, 0o604},
		{"F1 G4 metrics.token 0644", state.MetricsTokenFile, 0o644},
		{"F1 G4 metrics.token 0604", state.MetricsTokenFile, 0o604},
		{"F1 registry 0644", state.RegistryFile, 0o644},
		{"F1 registry 0660", state.RegistryFile, 0o660},
	} {
		t.Run(row.name, func(t *testing.T) {
			home, dir := started(t)
			path := filepath.Join(dir, row.file)
			os.Chmod(path, row.mode)
			before, _ := os.ReadFile(path)
			_, err := newServer(t, home, nil)
			if err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
				t.Fatalf("New: %v; want an error naming chmod 600 %s", err, path)
			}
			after, _ := os.ReadFile(path)
			st, _ := os.Stat(path)
			if !bytes.Equal(before, after) || st.Mode().Perm() != row.mode {
				t.Errorf("the file changed: mode %o, %q -> %q", st.Mode().Perm(), before, after)
			}
		})
	}
	t.Run("F1 token file owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a file to another user")
		}
		home, dir := started(t)
		path := filepath.Join(dir, state.TokenFile)
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := newServer(t, home, nil); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chown") {
			t.Fatalf("New: %v; want an error naming %s and chown", err, path)
		}
	})
	t.Run("F1 state home 0755 holding a private fleet folder", func(t *testing.T) {
		home, _ := started(t)
		os.Chmod(home, 0o755)
		if _, err := newServer(t, home, nil); err != nil {
			t.Fatalf("New: %v", err)
		}
	})
}

// TestUnparsableFilesNeverReplaced_F2: a registry or token that does not parse stops New with an
// error that names the file, and the file is left exactly as it was.
func TestUnparsableFilesNeverReplaced_F2(t *testing.T) {
	rows := []struct {
		name, file, contents string
	}{
		{"F2 registry not JSON", state.RegistryFile, "{not json"},
		{"F2 registry empty", state.RegistryFile, ""},
		{"F2 registry cut short", state.RegistryFile, `{"consoles":[{"id":"alpha","addr":"127.0.0.1:9001"`},
		{"F2 registry with an off-box console", state.RegistryFile, `{"consoles":[{"id":"alpha","addr":"10.0.0.1:80"}]}`},
		{"F2 registry with a bad id", state.RegistryFile, `{"consoles":[{"id":"../x","addr":"127.0.0.1:9001"}]}`},
		{"F2 token too short", state.TokenFile, "short\n"},
		{"F2 token empty", state.TokenFile, ""},
		{"F2 token two lines", state.TokenFile, strings.Repeat("A", 43) + "\n" + strings.Repeat("B", 43) + "\n"},
		{"F2 G4 metrics.token too short", state.MetricsTokenFile, "short\n"},
		{"F2 G4 metrics.token empty", state.MetricsTokenFile, ""},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "state")
			if _, err := newServer(t, home, nil); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(state.FleetDir(home), row.file)
			if err := os.WriteFile(path, []byte(row.contents), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := newServer(t, home, nil)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("New: %v; want an error naming %s", err, path)
			}
			if b, _ := os.ReadFile(path); string(b) != row.contents {
				t.Errorf("%s was rewritten: %q", row.file, b)
			}
		})
	}
}

// TestRegistryWritesLeaveNoTempFiles_F2: registrations, refreshes and removals write consoles.json
// atomically and leave nothing else behind; the file always parses.
func TestRegistryWritesLeaveNoTempFiles_F2(t *testing.T) {
	d := startDoor(t)
	for i := 0; i < 5; i++ {
		id := "c" + strconv.Itoa(i)
		if r := register(d, id, "127.0.0.1:"+strconv.Itoa(9000+i)); r.Status != http.StatusCreated {
			t.Fatalf("register %s: %d %q", id, r.Status, r.Reason)
		}
		if r := register(d, id, "127.0.0.1:"+strconv.Itoa(9100+i)); r.Status != http.StatusOK {
			t.Fatalf("refresh %s: %d %q", id, r.Status, r.Reason)
		}
	}
	for _, id := range []string{"c1", "c3"} {
		if r := d.Raw(d.localReq("DELETE", "/fleet/v1/consoles/"+id, "", d.bearer())); r.Status != http.StatusNoContent {
			t.Fatalf("delete %s: %d %q", id, r.Status, r.Reason)
		}
	}
	dir := state.FleetDir(d.home)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case state.TokenFile, state.MetricsTokenFile, state.RegistryFile, state.AddrFile:
		default:
			t.Errorf("left behind in %s: %s", dir, e.Name())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, state.RegistryFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Consoles []Console }
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("consoles.json: %v", err)
	}
	var ids []string
	for _, c := range f.Consoles {
		ids = append(ids, c.ID)
	}
	if got := strings.Join(ids, ","); got != "alpha,c0,c2,c4" {
		t.Errorf("consoles.json holds %s, want alpha,c0,c2,c4", got)
	}
}

// TestRegistryWriteFailureChangesNothing_F2: when consoles.json cannot be replaced, the
// registration is refused (500 registry), nothing changes in memory or on disk, and no temporary
// file is left behind.
func TestRegistryWriteFailureChangesNothing_F2(t *testing.T) {
	d := startDoor(t)
	dir := state.FleetDir(d.home)
	path := filepath.Join(dir, state.RegistryFile)
	// A non-empty folder where consoles.json was: rename(2) cannot replace it, even as root.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	r := d.WantRejected(t, d.localReq("POST", "/fleet/v1/consoles", `{"id":"beta","addr":"127.0.0.1:9001"}`, d.bearer()),
		http.StatusInternalServerError, "registry")
	if strings.Contains(r.Body, dir) {
		t.Errorf("the page shows the state folder: %q", r.Body)
	}
	if _, ok := d.srv.registry.Get("beta"); ok {
		t.Error("the failed registration is in the registry")
	}
	d.WantRejected(t, d.localReq("DELETE", "/fleet/v1/consoles/alpha", "", d.bearer()), http.StatusInternalServerError, "registry")
	if _, ok := d.srv.registry.Get("alpha"); !ok {
		t.Error("the failed removal removed alpha")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestTooOpenAddrFileRefused_F1: a supervisor.addr that is group- or world-accessible is refused
// like the other files (the error names it and the chmod), never silently rewritten 0600.
func TestTooOpenAddrFileRefused_F1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	srv, err := newServer(t, home, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	path := filepath.Join(state.FleetDir(home), state.AddrFile)
	if err := os.WriteFile(path, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	err = srv.PublishAddr("127.0.0.1:7420")
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("PublishAddr: %v; want an error naming chmod 600 %s", err, path)
	}
	st, _ := os.Stat(path)
	if b, _ := os.ReadFile(path); string(b) != "127.0.0.1:1\n" || st.Mode().Perm() != 0o644 {
		t.Errorf("supervisor.addr changed: mode %o, %q", st.Mode().Perm(), b)
	}
}
