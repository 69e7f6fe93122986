package supervisor

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit/accesslog"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/testdirs"
	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
)

// uxFakeAPI is a LocalAPI that knows one tailnet user and this machine's name, and records
// every WhoIs it is asked.
type uxFakeAPI struct {
	mu     sync.Mutex
	asked  []string
	runSSH bool
	serve  *ipn.ServeConfig
}

const (
	uxUserIP    = "100.64.0.5"
	uxUserLogin = "alice@example.com"
	uxSupName   = "sup.example.ts.net"
)

func (f *uxFakeAPI) WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error) {
	f.mu.Lock()
	f.asked = append(f.asked, addr)
	f.mu.Unlock()
	if addr != uxUserIP {
		return nil, local.ErrPeerNotFound
	}
	return &apitype.WhoIsResponse{
		Node:        &tailcfg.Node{ID: 5, Name: "laptop.example.ts.net."},
		UserProfile: &tailcfg.UserProfile{ID: 7, LoginName: uxUserLogin},
	}, nil
}

func (f *uxFakeAPI) StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error) {
	return &ipnstate.Status{
		BackendState: "Running",
		TUN:          false, // userspace networking: the TCP door would ask WhoIs(RemoteAddr) (S5b)
		Self:         &ipnstate.PeerStatus{DNSName: uxSupName + "."},
		TailscaleIPs: []netip.Addr{netip.MustParseAddr("100.64.0.1")},
	}, nil
}

// GetPrefs and GetServeConfig say what tailscaled says by default: no Tailscale SSH, and the
// socket published by Serve's HTTP proxy (no raw forward), unless a test sets them.
func (f *uxFakeAPI) GetPrefs(ctx context.Context) (*ipn.Prefs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ipn.Prefs{RunSSH: f.runSSH}, nil
}

func (f *uxFakeAPI) GetServeConfig(ctx context.Context) (*ipn.ServeConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.serve == nil {
		return new(ipn.ServeConfig), nil
	}
	return f.serve, nil
}

func (f *uxFakeAPI) whoIsAsked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// uxSeen is what reached the echo console.
type uxSeen struct {
	path   string
	header http.Header
}

// uxDoor is a supervisor serving only on a unix socket, with an echo console "alpha".
type uxDoor struct {
	srv  *Server
	api  *uxFakeAPI
	sock string
	http *http.Client

	mu   sync.Mutex
	seen []uxSeen

	polled    chan struct{} // /poll reached the console, which answers nothing
	pollEnded chan struct{} // /poll's request ended: the door closed its connection
}

func uxStart(t *testing.T, tailscaledUID int) *uxDoor {
	t.Helper()
	return uxStartLogging(t, tailscaledUID, io.Discard)
}

// uxStartLogging is uxStart with the supervisor's JSON log lines written to logs.
func uxStartLogging(t *testing.T, tailscaledUID int, logs io.Writer) *uxDoor {
	t.Helper()
	d := &uxDoor{api: &uxFakeAPI{}, polled: make(chan struct{}, 1), pollEnded: make(chan struct{}, 1)}
	console := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.seen = append(d.seen, uxSeen{path: r.URL.Path, header: r.Header.Clone()})
		d.mu.Unlock()
		if r.URL.Path == "/poll" { // a long poll: no answer until the caller goes
			d.polled <- struct{}{}
			select {
			case <-r.Context().Done():
				d.pollEnded <- struct{}{}
			case <-time.After(10 * time.Second):
			}
			return
		}
		io.WriteString(w, "console says hi")
	}))
	t.Cleanup(console.Close)

	srv, err := New(Config{
		StateHome:     filepath.Join(t.TempDir(), "state"),
		LocalAPI:      d.api,
		TailscaledUID: tailscaledUID,
		Logger:        slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if _, err := srv.registry.Put(Console{ID: "alpha", Addr: console.Listener.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	d.srv = srv
	d.sock = filepath.Join(testdirs.Private(t), "run", "serve.sock")
	ln, err := ListenUnix(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeUnixListener(ln) }()
	t.Cleanup(func() {
		srv.Close()
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("ServeUnixListener = %v, want http.ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("ServeUnixListener did not return after Close")
		}
	})
	d.http = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
			},
		},
	}
	t.Cleanup(d.http.CloseIdleConnections)
	return d
}

// serveRequest is a request as tailscaled's Serve sends it to a unix-socket backend: Host
// localhost, the caller's name in X-Forwarded-Host, its tailnet address in X-Forwarded-For.
// withOrigin adds the Origin a browser sends for a WebSocket or a POST.
func (d *uxDoor) serveRequest(t *testing.T, path string, withOrigin bool) *http.Response {
	t.Helper()
	return d.serveRequestWith(t, path, withOrigin, uxUserLogin)
}

// serveRequestAs is serveRequest with login as the Tailscale-User-Login Serve sent.
func (d *uxDoor) serveRequestAs(t *testing.T, path, login string) *http.Response {
	t.Helper()
	return d.serveRequestWith(t, path, false, login)
}

func (d *uxDoor) serveRequestWith(t *testing.T, path string, withOrigin bool, login string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://localhost"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-Host", uxSupName)
	req.Header.Set("X-Forwarded-For", uxUserIP)
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("Tailscale-User-Login", login)
	if withOrigin {
		req.Header.Set("Origin", "https://"+uxSupName) // judged against the Host Serve saw (S12)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func (d *uxDoor) consoleSaw() []uxSeen {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]uxSeen(nil), d.seen...)
}

func TestUnixSocketVerified_S5a(t *testing.T) {
	d := uxStart(t, os.Getuid())
	for i := range 2 { // the second request rides the same connection, judged once
		resp := d.serveRequest(t, "/c/alpha/page", true)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d (%s), want 200", i, resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
		}
	}
	seen := d.consoleSaw()
	if len(seen) != 2 {
		t.Fatalf("console saw %d requests, want 2", len(seen))
	}
	s := seen[0]
	if got := s.header.Get("X-Phase-Console-Fleet-Login"); got != uxUserLogin {
		t.Errorf("asserted login %q, want %q", got, uxUserLogin)
	}
	if got := s.header.Get("X-Forwarded-Host"); got != uxSupName {
		t.Errorf("console saw X-Forwarded-Host %q, want %q (the Host the caller used, from Serve)", got, uxSupName)
	}
	if got := s.header.Get("X-Forwarded-For"); got != uxUserIP {
		t.Errorf("console saw X-Forwarded-For %q, want %q", got, uxUserIP)
	}
	if s.path != "/page" {
		t.Errorf("console saw path %q, want /page", s.path)
	}
	// S5b does not apply to a unix socket: WhoIs is only ever asked about the caller's tailnet
	// address, never about a connection's ip:port.
	for _, a := range d.api.whoIsAsked() {
		if a != uxUserIP {
			t.Errorf("WhoIs(%q) asked; a unix-socket connection needs no WhoIs of its own address", a)
		}
	}
}

// TestUnixSocketCallerGone_S9: on the unix door too, a caller who goes away while its console
// is still thinking ends the console's request (the door closes its connection to the console).
func TestUnixSocketCallerGone_S9(t *testing.T) {
	d := uxStart(t, os.Getuid())
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/c/alpha/poll", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-Host", uxSupName)
	req.Header.Set("X-Forwarded-For", uxUserIP)
	req.Header.Set("Tailscale-User-Login", uxUserLogin)
	asked := make(chan error, 1)
	go func() {
		resp, err := d.http.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		asked <- err
	}()
	select {
	case <-d.polled:
	case <-time.After(10 * time.Second):
		t.Fatal("the console was never asked")
	}
	cancel() // the caller goes: net/http's client closes its connection to the door
	if err := <-asked; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller's request ended with %v, want context.Canceled", err)
	}
	select {
	case <-d.pollEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the console's request went on after its caller left")
	}
}

// On tailscaled's connection the Host comes from X-Forwarded-Host, and S10 judges it.
func TestUnixSocketForeignHostRefused_S10(t *testing.T) {
	d := uxStart(t, os.Getuid())
	req, _ := http.NewRequest(http.MethodGet, "http://localhost/c/alpha/", nil)
	req.Header.Set("X-Forwarded-Host", "evil.example.com")
	req.Header.Set("X-Forwarded-For", uxUserIP)
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("X-Fleet-Reason") != "host" {
		t.Fatalf("status %d %q, want 421 host", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
	}
	if n := len(d.consoleSaw()); n != 0 {
		t.Fatalf("console saw %d requests, want none", n)
	}
}

func TestUnixSocketOtherUIDRefused_S5a(t *testing.T) {
	d := uxStart(t, os.Getuid()+1)
	resp := d.serveRequest(t, "/c/alpha/page", false)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Fleet-Reason") != "unverified" {
		t.Fatalf("status %d %q, want 401 unverified", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
	}
	if n := len(d.consoleSaw()); n != 0 {
		t.Fatalf("console saw %d requests, want none", n)
	}
}

// A peer that is not tailscaled keeps its Host: X-Forwarded-Host is believed only from tailscaled.
func TestUnixSocketHostOnlyFromTailscaled_S10(t *testing.T) {
	d := uxStart(t, os.Getuid()+1)
	req, _ := http.NewRequest(http.MethodGet, "http://localhost/c/alpha/", nil)
	req.Header.Set("X-Forwarded-Host", "evil.example.com")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("Origin", "https://evil.example.com")
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Host stays "localhost", so the Origin of evil.example.com is cross-origin (S12). (Had the
	// Host been taken from X-Forwarded-Host, S10 would have answered 421 host.)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Fleet-Reason") != "cross-origin" {
		t.Fatalf("status %d %q, want 403 cross-origin", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
	}
}

func TestUnixSocketModes_F1(t *testing.T) {
	d := uxStart(t, os.Getuid())
	st, err := os.Lstat(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != fs.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a 0600 socket", st.Mode())
	}
	dst, err := os.Stat(filepath.Dir(d.sock))
	if err != nil {
		t.Fatal(err)
	}
	if dst.Mode().Perm() != 0o700 {
		t.Errorf("socket folder mode %04o, want 0700", dst.Mode().Perm())
	}

	t.Run("close removes the socket", func(t *testing.T) {
		dir := filepath.Join(testdirs.Private(t), "s")
		path := filepath.Join(dir, "x.sock")
		ln, err := ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Close: %v, want the socket gone", err)
		}
	})
	t.Run("too-open folder refused", func(t *testing.T) {
		dir := filepath.Join(testdirs.Private(t), "open")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o755)
		_, err := ListenUnix(filepath.Join(dir, "x.sock"))
		if err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
			t.Fatalf("ListenUnix in a 0755 folder: %v, want an error naming 'chmod 700 %s'", err, dir)
		}
		if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
			t.Errorf("folder re-permissioned to %04o; it must be left alone", st.Mode().Perm())
		}
	})
	t.Run("stale socket replaced", func(t *testing.T) {
		dir := filepath.Join(testdirs.Private(t), "s")
		os.Mkdir(dir, 0o700)
		path := filepath.Join(dir, "x.sock")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false)
		old.Close() // the file stays; nobody answers: a crash's leftover
		ln, err := ListenUnix(path)
		if err != nil {
			t.Fatalf("ListenUnix over a stale socket: %v", err)
		}
		ln.Close()
	})
	t.Run("live socket refused", func(t *testing.T) {
		_, err := ListenUnix(d.sock)
		if err == nil || !strings.Contains(err.Error(), "listening") {
			t.Fatalf("ListenUnix over a live socket: %v, want refused", err)
		}
	})
	t.Run("non-socket left alone", func(t *testing.T) {
		dir := filepath.Join(testdirs.Private(t), "s")
		os.Mkdir(dir, 0o700)
		path := filepath.Join(dir, "x.sock")
		if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ListenUnix(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("ListenUnix over a regular file: %v, want refused", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "keep me" {
			t.Errorf("the file was touched")
		}
	})
}

// In a user namespace (the systemd unit's PrivateUsers=) every unmapped user shows as 65534: a
// tailscaled uid of 65534 cannot tell tailscaled from anyone, so nothing is verified.
func TestOverflowTailscaledUIDRefused_S5a(t *testing.T) {
	d := uxStart(t, 65534)
	req, _ := http.NewRequest(http.MethodGet, "http://localhost/c/alpha/", nil)
	req.Header.Set("X-Forwarded-Host", uxSupName)
	req.Header.Set("X-Forwarded-For", uxUserIP)
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "65534 (nobody)") {
		t.Fatalf("status %d, body %q: want 401 unverified naming uid 65534", resp.StatusCode, body)
	}
	if n := len(d.consoleSaw()); n != 0 {
		t.Fatalf("console saw %d requests, want none", n)
	}
}

// TestUnixSocketPlaceRefused_S5e: the unix door's socket never sits below /tmp, where tailscaled
// lets every Tailscale SSH login forward to unix sockets (dialling them itself, as root, so the
// socket's 0700 folder stops nothing, and the door would believe the X-Forwarded-For the login
// writes), nor below a folder that others can write, sticky bit or not: ListenUnix refuses both
// at start, through a symlink too, and makes nothing. (ssh's StrictModes is not the check: it
// lets a sticky folder such as /tmp through.)
func TestUnixSocketPlaceRefused_S5e(t *testing.T) {
	tmp, err := os.MkdirTemp("/tmp", "fleet-place-")
	if err != nil {
		t.Skipf("no /tmp here: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	private := testdirs.Private(t)
	sticky := filepath.Join(private, "sticky")
	if err := os.Mkdir(sticky, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(sticky, 0o1777)
	link := filepath.Join(private, "link")
	if err := os.Symlink(tmp, link); err != nil {
		t.Fatal(err)
	}
	for _, row := range []struct{ name, path, want string }{
		{"S5e private folder below /tmp", filepath.Join(tmp, "run", "serve.sock"), "below /tmp"},
		{"S5e below /tmp through a symlink", filepath.Join(link, "run", "serve.sock"), "below /tmp"},
		{"S5e below a sticky world-writable folder", filepath.Join(sticky, "run", "serve.sock"), "written by others"},
	} {
		t.Run(row.name, func(t *testing.T) {
			ln, err := ListenUnix(row.path)
			if err == nil {
				ln.Close()
				t.Fatalf("ListenUnix(%s) accepted a place that a Tailscale SSH login or another user reaches", row.path)
			}
			if !strings.Contains(err.Error(), row.want) || !strings.Contains(err.Error(), row.path) && !strings.Contains(err.Error(), filepath.Dir(filepath.Dir(row.path))) {
				t.Errorf("error %q does not name the place and %q", err, row.want)
			}
			if _, err := os.Lstat(filepath.Dir(row.path)); err == nil {
				t.Errorf("the refused socket's folder was made")
			}
		})
	}
	ln, err := ListenUnix(filepath.Join(private, "run", "serve.sock"))
	if err != nil {
		t.Fatalf("a folder only this user reaches was refused: %v", err)
	}
	ln.Close()
}

// TestUnixSocketAccessLog_G3: the unix-socket door's lines say door "loopback", as the TCP
// door's do; a hooks refusal, decided before the caller is verified, writes none.
func TestUnixSocketAccessLog_G3(t *testing.T) {
	d := uxStart(t, os.Getuid())
	if resp := d.serveRequest(t, "/c/alpha/hooks/x", false); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("hooks: %d", resp.StatusCode)
	}
	if resp := d.serveRequest(t, "/c/alpha/page?code=QUERYSECRET123", false); resp.StatusCode != http.StatusOK {
		t.Fatalf("page: %d", resp.StatusCode)
	}
	lines := doortest.AccessLog(t, filepath.Join(d.srv.fleetDir, accesslog.FileName), 1)
	l := lines[0]
	if len(lines) != 1 || l.Door != "loopback" || l.Login != uxUserLogin || l.Console != "alpha" || l.Path != "/page" ||
		l.Status != 200 || l.Bytes != int64(len("console says hi")) || l.Peer != uxUserIP {
		t.Fatalf("lines %+v", lines)
	}
}
