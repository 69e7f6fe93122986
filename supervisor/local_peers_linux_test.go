//go:build linux

package supervisor

// What other processes on this machine can and cannot do to the loopback door, with real
// sockets and a helper process of another uid: the unix-socket door, a systemd user namespace,
// and registry churn while forwarding. Each test guards one trick. (Who is calling — this node's
// own address, the timing of the peer-uid verdict — is package tailnet's.)

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/testdirs"
)

// ---- The supervisor in a user namespace, and the unix socket's place -------------------------

// Guarded: a *user* unit with PrivateUsers=yes. A user manager has no CAP_SETUID, so systemd maps only the user's own uid
// into the namespace ("For unprivileged users … the root to root mapping is excluded",
// setup_private_users in systemd's exec-invoke.c). root — tailscaled — then shows as 65534 both
// in /proc/net/tcp (from_kuid_munged into the reader's namespace) and in stat of its socket, so
// the supervisor refuses every /c/ request as 401 unverified, although the unit and
// docs/operating.md say root keeps its uid and the unit "fits tailscaled running as root". This
// runs a real supervisor in exactly that namespace (uid 4242 mapped to itself, nothing else) and
// sends it tailscaled's request as root.
func TestPrivateUsersHidesRoot_Deploy(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to set up the user namespace")
	}
	// Why deploy/ sets PrivateUsers=no (guarded by deploy.TestSystemdUnit_S1): under a user
	// manager's PrivateUsers=yes, root (tailscaled) shows as 65534 and the supervisor — failing
	// closed — verifies nobody. This proves that hazard, so the unit never brings it back.
	base, err := os.MkdirTemp("", "fleet-userns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	// tailscaled's LocalAPI socket, owned by root as on a real machine.
	tsSock := filepath.Join(base, "tailscaled.sock")
	tsLn, err := net.Listen("unix", tsSock)
	if err != nil {
		t.Fatal(err)
	}
	defer tsLn.Close()
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(home, otheruser.UID, otheruser.UID)

	h := startLocalPeersHelper(t, "userns-door "+home+" "+tsSock, "", func(a *syscall.SysProcAttr) {
		a.Cloneflags = syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: otheruser.UID, HostID: otheruser.UID, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: otheruser.UID, HostID: otheruser.UID, Size: 1}}
		a.Credential = &syscall.Credential{Uid: otheruser.UID, Gid: otheruser.UID, NoSetGroups: true}
	})
	line := h.Expect(t, "PORT ")
	addr := "127.0.0.1:" + strings.TrimSpace(strings.TrimPrefix(line, "PORT "))
	conn, err := net.Dial("tcp4", addr) // root, as tailscaled's Serve
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, rawhttp.CRLF(fmt.Sprintf("GET /c/alpha/ HTTP/1.1\nHost: %s\nX-Forwarded-For: %s\nX-Forwarded-Proto: https\nTailscale-User-Login: %s\n\n", uxSupName, uxUserIP, uxUserLogin)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Fleet-Reason") != "unverified" {
		t.Fatalf("tailscaled (root) seen from a PrivateUsers namespace: %d %s %q; want 401 unverified (fail closed)",
			resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), strings.TrimSpace(string(b)))
	}
}

// Guarded: were ListenUnix to check only the socket's own folder, a folder above it that another
// user can write (here 0777 without the sticky bit) would let that user rename fleet's private
// folder away after the check and put their own socket at the path: `tailscale serve unix:PATH` would then
// send every tailnet request — bodies, cookies, Tailscale-User-Login — to a stranger. ssh's
// StrictModes refuses such paths for the same reason.
func TestWritableAncestor_Unix(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the other user")
	}
	base := filepath.Join(testdirs.Private(t), "anc") // not below /tmp, which is refused for its own reason
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o777) // world-writable, no sticky bit
	path := filepath.Join(base, "run", "serve.sock")
	ln, err := ListenUnix(path)
	if err != nil {
		if !strings.Contains(err.Error(), "written by others") {
			t.Errorf("refused, but not for the world-writable %s: %v", base, err)
		}
		return // refused: what we want
	}
	defer ln.Close()
	h := startLocalPeersHelper(t, "swap "+base, "", nil)
	h.Expect(t, "READY")
	c, err := net.Dial("unix", path) // what tailscaled does next
	if err != nil {
		t.Fatalf("dial after swap: %v", err)
	}
	defer c.Close()
	uid, _ := peercred.UnixPeerUID(c.(*net.UnixConn))
	t.Errorf("ListenUnix(%s) accepted a path below the world-writable %s; after a rename, Serve's connection reaches uid %d", path, base, uid)
}

// ---- Guards: the unix-socket door --------------------------------------------------------------

// On tailscaled's connection only one clean X-Forwarded-Host becomes the Host; anything else is
// either refused by S10 or leaves Host as localhost. What the console sees as X-Forwarded-Host
// is never a name that S10 did not admit.
func TestForwardedHostForms_Unix(t *testing.T) {
	d := uxStart(t, os.Getuid())
	rows := []struct {
		xfh    []string
		status int // 0: forwarded
	}{
		{[]string{"evil.example"}, 421},
		{[]string{"evil.example:443"}, 421},
		{[]string{uxSupName + ".evil.example"}, 421},
		{[]string{uxSupName + ":1,evil.example"}, 0},
		{[]string{uxSupName + "@evil.example"}, 0},
		{[]string{uxSupName + "/x"}, 0},
		{[]string{uxSupName + " evil.example"}, 0},
		{[]string{uxSupName, "evil.example"}, 0},
		{[]string{"[::1]:80"}, 0},
		{[]string{"127.0.0.1"}, 0},
		{[]string{""}, 0},
		{[]string{uxSupName + ":99999"}, 0},
	}
	for _, row := range rows {
		t.Run(strings.Join(row.xfh, "|"), func(t *testing.T) {
			before := len(d.consoleSaw())
			req, _ := http.NewRequest(http.MethodGet, "http://localhost/c/alpha/", nil)
			req.Header["X-Forwarded-Host"] = row.xfh
			req.Header.Set("X-Forwarded-For", uxUserIP)
			resp, err := d.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			seen := d.consoleSaw()[before:]
			if row.status != 0 {
				if resp.StatusCode != row.status || len(seen) != 0 {
					t.Fatalf("got %d (%d forwarded), want %d", resp.StatusCode, len(seen), row.status)
				}
				return
			}
			for _, s := range seen {
				got := s.header.Values("X-Forwarded-Host")
				if len(got) != 1 || (got[0] != "localhost" && got[0] != uxSupName && got[0] != "127.0.0.1" && got[0] != "[::1]:80") {
					t.Errorf("console saw X-Forwarded-Host %q", got)
				}
			}
		})
	}
}

// A stale socket that is not this user's, and a symlink at the path (even to a stale socket of
// ours), are refused and left alone.
func TestStaleSocketTricks_Unix(t *testing.T) {
	t.Run("symlink to a stale socket of ours", func(t *testing.T) {
		dir := filepath.Join(testdirs.Private(t), "s")
		os.Mkdir(dir, 0o700)
		elsewhere := filepath.Join(t.TempDir(), "victim.sock")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: elsewhere, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false)
		old.Close()
		path := filepath.Join(dir, "x.sock")
		os.Symlink(elsewhere, path)
		if _, err := ListenUnix(path); err == nil {
			t.Fatal("ListenUnix over a symlink: accepted")
		}
		if st, err := os.Lstat(elsewhere); err != nil || st.Mode().Type() != fs.ModeSocket {
			t.Errorf("the symlink's target was touched: %v", err)
		}
		if st, err := os.Lstat(path); err != nil || st.Mode().Type() != fs.ModeSymlink {
			t.Errorf("the symlink was touched: %v", err)
		}
	})
	t.Run("stale socket of another uid", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to chown")
		}
		dir := filepath.Join(testdirs.Private(t), "s")
		os.Mkdir(dir, 0o700)
		path := filepath.Join(dir, "x.sock")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false)
		old.Close()
		os.Lchown(path, otheruser.UID, otheruser.UID)
		if _, err := ListenUnix(path); err == nil || !strings.Contains(err.Error(), "not this user's") {
			t.Fatalf("ListenUnix over another uid's socket: %v", err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("another uid's socket was removed")
		}
	})
}

// Another local user cannot even connect to the socket (0600 in a 0700 folder); and were the
// socket reachable, its requests would keep Host localhost and be refused 401 (see
// TestUnixSocketHostOnlyFromTailscaled_S10).
func TestOtherUserCannotConnect_Unix(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the other user")
	}
	d := uxStart(t, os.Getuid())
	h := startLocalPeersHelper(t, "dialunix "+d.sock, "", nil)
	line := h.Expect(t, "DIAL ")
	if !strings.HasPrefix(line, "DIAL error") {
		t.Fatalf("uid %d: %q, want a refused connect", otheruser.UID, line)
	}
}

// ---- Guards: the registry and the hop under concurrency ---------------------------------------

// Registering, re-registering at another address (one of them held by another uid) and
// deregistering while requests are forwarded: every answer is a forward to a console of this
// user with exactly the assertion, a 404, or a 502; the other uid's port never gets a byte.
func TestRegistryChurnWhileForwarding_S8(t *testing.T) {
	d := startDoor(t)
	a, b := d.Alpha, echoconsole.New(t)
	var squatAddr string
	var squat *exec.Cmd
	var squatOut *bufio.Reader
	if os.Getuid() == 0 {
		squat, squatOut = startOtherUIDClient(t, "squat")
		line, err := squatOut.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "PORT ") {
			t.Fatalf("squatter: %q %v", line, err)
		}
		squatAddr = "127.0.0.1:" + strings.TrimSpace(strings.TrimPrefix(line, "PORT "))
		defer func() { squat.Process.Kill(); squat.Wait() }()
	}
	addrs := []string{a.Addr(), b.Addr()}
	if squatAddr != "" {
		addrs = append(addrs, squatAddr)
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				d.srv.registry.Put(Console{ID: "alpha", Addr: a.Addr()})
				return
			default:
			}
			if i%4 == 3 {
				d.srv.registry.Delete("alpha")
			} else {
				d.srv.registry.Put(Console{ID: "alpha", Addr: addrs[i%len(addrs)]})
			}
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", d.Addr)
		},
	}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				req, _ := http.NewRequest(http.MethodGet, "http://"+doortest.TSName+"/c/alpha/x", nil)
				req.Header.Set("X-Forwarded-For", doortest.AliceIP)
				req.Header.Set("Tailscale-User-Login", doortest.Alice)
				resp, err := client.Do(req)
				key := "error"
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					key = fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
				}
				mu.Lock()
				statuses[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	okCount := 0
	for k, n := range statuses {
		switch k {
		case "200 ":
			okCount += n
		case "404 unknown-console", "502 console-down", "502 console-other-user":
		default:
			t.Errorf("%d answers %q", n, k)
		}
	}
	if got := a.Count() + b.Count(); got != okCount {
		t.Errorf("consoles saw %d requests, %d answered 200", got, okCount)
	}
	for _, c := range []*echoconsole.Console{a, b} {
		for _, s := range c.All() {
			if v := s.Header.Values("X-Phase-Console-Fleet"); len(v) != 1 || v[0] != d.Token {
				t.Errorf("a console saw bearer values %d", len(v))
			}
			if v := s.Header.Values("X-Phase-Console-Fleet-Login"); len(v) != 1 || v[0] != doortest.Alice {
				t.Errorf("a console saw logins %q", v)
			}
		}
	}
	if squat != nil {
		got := make(chan string, 1)
		go func() { l, _ := squatOut.ReadString('\n'); got <- l }()
		select {
		case l := <-got:
			if strings.HasPrefix(l, "AUTH") {
				t.Errorf("the other uid's port received a request: %q", l)
			}
		case <-time.After(300 * time.Millisecond):
		}
	}
	t.Logf("answers: %v", statuses)
}

// ---- helpers -------------------------------------------------------------------------------------

// startLocalPeersHelper starts TestLocalPeersHelperProcess as otheruser.UID with $FLEET_LOCAL_PEERS_PAYLOAD set to
// payload; attr, if not nil, may change how the process is started.
func startLocalPeersHelper(t *testing.T, mode, payload string, attr func(*syscall.SysProcAttr)) *otheruser.Helper {
	t.Helper()
	return otheruser.Start(t, "^TestLocalPeersHelperProcess$", "FLEET_LOCAL_PEERS_HELPER", mode, func(cmd *exec.Cmd) {
		cmd.Env = append(cmd.Env, "FLEET_LOCAL_PEERS_PAYLOAD="+payload)
		if attr != nil {
			attr(cmd.SysProcAttr)
		}
	})
}

// TestLocalPeersHelperProcess is the helper of the tests above; otherwise it does nothing.
//
//	userns-door HOME SOCK: run a supervisor (state HOME, tailscaled socket SOCK, fake LocalAPI)
//	                      with an echo console "alpha"; print PORT <port>; serve until stdin ends
//	swap BASE:            rename BASE/run away, listen on a new BASE/run/serve.sock, print READY
//	dialunix PATH:        connect to PATH; print "DIAL ok" or "DIAL error …"
func TestLocalPeersHelperProcess(t *testing.T) {
	mode := os.Getenv("FLEET_LOCAL_PEERS_HELPER")
	if mode == "" {
		return
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "helper:", err); os.Exit(1) }
	f := strings.Fields(mode)
	stdin := bufio.NewReader(os.Stdin)
	switch f[0] {
	case "userns-door":
		console := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") }))
		defer console.Close()
		srv, err := New(Config{StateHome: f[1], TailscaleSocket: f[2], TailscaledUID: -1, LocalAPI: &uxFakeAPI{},
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			fail(err)
		}
		if _, err := srv.registry.Put(Console{ID: "alpha", Addr: console.Listener.Addr().String()}); err != nil {
			fail(err)
		}
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			fail(err)
		}
		go srv.Serve(ln)
		fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
		io.Copy(io.Discard, stdin)
		srv.Close()
	case "swap":
		run := filepath.Join(f[1], "run")
		if err := os.Rename(run, run+".old"); err != nil {
			fail(err)
		}
		if err := os.Mkdir(run, 0o755); err != nil {
			fail(err)
		}
		ln, err := net.Listen("unix", filepath.Join(run, "serve.sock"))
		if err != nil {
			fail(err)
		}
		os.Chmod(filepath.Join(run, "serve.sock"), 0o777)
		fmt.Println("READY")
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		io.Copy(io.Discard, stdin)
	case "dialunix":
		c, err := net.Dial("unix", f[1])
		if err != nil {
			fmt.Println("DIAL error", errors.Unwrap(err))
		} else {
			c.Close()
			fmt.Println("DIAL ok")
		}
	}
	os.Exit(0)
}
