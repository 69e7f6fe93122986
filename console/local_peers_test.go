package console

// The console's per-connection uid verdict (ConnContext, sameUser) over real sockets, HTTP/2 with
// and without TLS, and what the uid check cannot see: guards.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/otheruser"
)

// peerConsole is a console with runs, presence and the hook behind the Verifier, on a real
// listener, with ConnContext set. gate, if not nil, is waited on before the Verifier runs: it
// stands for whatever a console does first (an access log, a session lookup, the scheduler).
type peerConsole struct {
	e      *env
	runs   Runs
	srv    *http.Server
	addr   string
	mu     sync.Mutex
	starts int
}

func newPeerConsole(t *testing.T, gate func(), cfg ...Config) *peerConsole {
	t.Helper()
	var conf Config
	if len(cfg) > 0 {
		conf = cfg[0]
	}
	c := &peerConsole{e: newEnv(t, tokA, conf)}
	mux := http.NewServeMux()
	mux.Handle("POST /runs", c.e.v.LocalOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, tok, _ := c.runs.Start()
		c.mu.Lock()
		c.starts++
		c.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"token": tok})
	})))
	mux.Handle("POST /hooks/permission-request", c.e.v.PermissionHook(&c.runs, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"decision":"allow"}`)
	})))
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, r *http.Request) {
		caller, _ := CallerFrom(r.Context())
		json.NewEncoder(w).Encode(caller)
	})
	var h http.Handler = c.e.v.Middleware(mux)
	if gate != nil {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { gate(); inner.ServeHTTP(w, r) })
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	c.srv = &http.Server{Handler: h, ConnContext: c.e.v.ConnContext}
	go c.srv.Serve(ln)
	t.Cleanup(func() { c.srv.Close() })
	return c
}

func (c *peerConsole) started() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts
}

// TestTailscaledUIDIsLocal_C4: "local" means "the peer socket is this console's own
// uid". tailscaled runs as root, and under userspace networking (tailscaled in a container, the
// Tailscale Docker image's default, any --tun=userspace-networking) it forwards a tailnet peer's
// connection to <node>:<console port> straight to 127.0.0.1:<port> from a socket of its own uid.
// A console that runs as root — a container, a dev VM, this test — cannot tell that connection
// from its own user: any tailnet peer (a tagged node, a shared-in user, anyone the ACLs let reach
// the port) writes Host: 127.0.0.1 and is scope local: it starts runs and answers permission hooks.
// (doc.go and console-contract.md promise 403 no-assertion for exactly this case.) So the console
// fails closed when its uid is tailscaled's (owner of its LocalAPI socket) unless the console can ask
// WhoIs(RemoteAddr) (S5b) or tailscaled reports TUN: true; fleet doctor FAILs the combination.
func TestTailscaledUIDIsLocal_C4(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the console must run as tailscaled's uid (root)")
	}
	// tailscaled's LocalAPI socket, owned (like tailscaled) by this console's uid.
	dir, err := os.MkdirTemp("", "fleet-ts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tailscaled.sock")
	tsLn, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer tsLn.Close()
	c := newPeerConsole(t, nil, Config{TailscaleSocket: sock})
	// The bytes a tailnet peer writes; tailscaled (uid 0) opens the connection to 127.0.0.1.
	conn, err := net.Dial("tcp4", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "POST /runs HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", c.addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusCreated {
		t.Fatalf("a connection of tailscaled's uid started a run (scope local); want 403 no-assertion")
	}
}

// TestResetConnectionInheritsNextOwner_C4: the console's uid verdict, read lazily at the first
// local request from /proc/net/tcp, checks that the connection still holds its 4-tuple. Another user
// connects from 127.0.0.1:X, sends POST /runs and resets the connection; if a socket of the
// console's own user (the supervisor's hop or probe, the user's browser) takes 127.0.0.1:X before
// the Verifier runs, the stranger's request — still readable after the reset — is scope local and
// starts a run. The gate stands for whatever runs before the Verifier; in production it is the
// scheduler and any outer middleware.
func TestResetConnectionInheritsNextOwner_C4(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the stranger as another uid")
	}
	hit, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c := newPeerConsole(t, func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(hit)
			<-release
		}
	})
	port := otheruser.FreePort(t)
	payload := fmt.Sprintf("POST /runs HTTP/1.1\r\nHost: %s\r\nContent-Length: 2\r\n\r\n{}", c.addr)
	h := otheruser.Start(t, "^TestConsoleLocalPeersHelperProcess$", "FLEET_CONSOLE_PEERS_HELPER", fmt.Sprintf("rst %d %s", port, c.addr),
		func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, "FLEET_CONSOLE_PEERS_PAYLOAD="+payload) })
	h.Expect(t, "SENT")
	select {
	case <-hit:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the console")
	}
	h.Say(t, "go")
	h.Expect(t, "RST")
	h.Wait(t)
	dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	next, err := dl.Dial("tcp4", c.addr) // the console's own user, from the freed port
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	close(release)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && c.started() == 0 && !strings.Contains(c.e.logs.String(), ReasonNoAssertion) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.started() != 0 {
		t.Fatalf("uid %d's reset request started a run as scope local", otheruser.UID)
	}
}

// ---- Guards ------------------------------------------------------------------------------------

// With ConnContext, over HTTP/2 with TLS: this user is local, another uid is 403 no-assertion —
// each connection judged on its own, the verdict of one never reused for another.
func TestHTTP2TLS_C4(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	e := newEnv(t, tokA, Config{})
	srv := httptest.NewUnstartedServer(e.v.Middleware(whoamiMux()))
	srv.EnableHTTP2 = true
	srv.Config.ConnContext = e.v.ConnContext
	srv.StartTLS()
	defer srv.Close()
	url := "https://" + srv.Listener.Addr().String() + "/whoami"
	mine := func() {
		resp, err := srv.Client().Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.Contains(string(b), `"local"`) {
			t.Fatalf("this user over %s: %d %s", resp.Proto, resp.StatusCode, b)
		}
	}
	mine()
	out := runOtherUser(t, "get "+url)
	if !strings.HasPrefix(out, "STATUS 403 HTTP/2.0 no-assertion") {
		t.Errorf("uid %d over HTTP/2: %q, want 403 no-assertion", otheruser.UID, out)
	}
	mine()
}

// Without ConnContext (the package doc's three lines) and over unencrypted HTTP/2 (h2c prior
// knowledge): the per-request lookup still runs, another uid is refused.
func TestH2CWithoutConnContext_C4(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	e := newEnv(t, tokA, Config{})
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.v.Middleware(whoamiMux())}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/whoami"
	out := runOtherUser(t, "h2c "+url)
	if !strings.HasPrefix(out, "STATUS 403 HTTP/2.0 no-assertion") {
		t.Errorf("uid %d over h2c: %q, want 403 no-assertion over HTTP/2", otheruser.UID, out)
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || !strings.Contains(string(b), `"local"`) {
		t.Errorf("this user over h2c: %s %d %s", resp.Proto, resp.StatusCode, b)
	}
}

// A request whose context holds neither a verdict nor the connection's local address (a console
// that calls the handler itself, a framework that builds its own context) is never local.
func TestNoConnectionFacts_C4(t *testing.T) {
	e := newEnv(t, tokA, Config{})
	for _, peer := range []string{"127.0.0.1:40000", "[::1]:40000", "[::ffff:127.0.0.1]:40000"} {
		r := httptest.NewRequest("GET", "/whoami", nil)
		r.Host = "127.0.0.1:9001"
		r.RemoteAddr = peer
		c, ref := e.v.Judge(r)
		if ref == nil || ref.Reason != ReasonNoAssertion {
			t.Errorf("peer %s without connection facts: %+v %v, want 403 no-assertion", peer, c, ref)
		}
		ctx := context.WithValue(r.Context(), http.LocalAddrContextKey, &net.UnixAddr{Name: "/x", Net: "unix"})
		if c, ref := e.v.Judge(r.WithContext(ctx)); ref == nil {
			t.Errorf("peer %s with a unix local address: %+v", peer, c)
		}
	}
}

// C6 still comes first for another uid: with a proxy mark it is "not local"; without one, the
// uid check refuses it (hook.rejected, no-assertion) before the run's token is looked at — even
// a live run's real token.
func TestOtherUserWithLiveRunToken_C6(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	c := newPeerConsole(t, nil)
	_, tok, err := c.runs.Start()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + c.addr + "/hooks/permission-request"
	if out := runOtherUser(t, "hook "+base+" "+tok); !strings.HasPrefix(out, "STATUS 403 no-assertion") {
		t.Errorf("uid %d with a live run token: %q, want 403 no-assertion", otheruser.UID, out)
	}
	if out := runOtherUser(t, "hook "+base+" "+tok+" X-Forwarded-For"); !strings.HasPrefix(out, "STATUS 403 not local") {
		t.Errorf("uid %d with a proxy mark: %q, want 403 not local", otheruser.UID, out)
	}
	for _, ev := range c.e.logs.Events(EventHookRejected) {
		if ev["reason"] != ReasonNoAssertion && ev["reason"] != ReasonHookProxied {
			t.Errorf("hook.rejected %v", ev)
		}
	}
	c.e.noSecretInLogs(tok, tokA)
}

// ---- helpers ------------------------------------------------------------------------------------

func whoamiMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		caller, _ := CallerFrom(r.Context())
		json.NewEncoder(w).Encode(caller)
	})
	return mux
}

// runOtherUser runs TestConsoleLocalPeersHelperProcess as otheruser.UID to the end and returns its output.
func runOtherUser(t *testing.T, mode string) string {
	t.Helper()
	return otheruser.Run(t, "^TestConsoleLocalPeersHelperProcess$", "FLEET_CONSOLE_PEERS_HELPER", mode, "")
}

// TestConsoleLocalPeersHelperProcess is the other-uid client of the tests above.
//
//	rst PORT ADDR:        from 127.0.0.1:PORT connect to ADDR, write $FLEET_CONSOLE_PEERS_PAYLOAD, print
//	                      SENT; after a line on stdin reset the connection, print RST
//	get URL:              GET over HTTPS (HTTP/2, any certificate); print "STATUS code proto reason"
//	h2c URL:              GET over unencrypted HTTP/2; the same line
//	hook URL TOKEN [HDR]: POST with the run bearer (and header HDR: 127.0.0.1); "STATUS code reason"
func TestConsoleLocalPeersHelperProcess(t *testing.T) {
	mode := os.Getenv("FLEET_CONSOLE_PEERS_HELPER")
	if mode == "" {
		return
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "helper:", err); os.Exit(1) }
	f := strings.Fields(mode)
	report := func(resp *http.Response, err error, proto bool) {
		if err != nil {
			fmt.Println("ERROR", err)
			return
		}
		resp.Body.Close()
		if proto {
			fmt.Printf("STATUS %d %s %s\n", resp.StatusCode, resp.Proto, resp.Header.Get("X-Fleet-Reason"))
		} else {
			fmt.Printf("STATUS %d %s\n", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
		}
	}
	switch f[0] {
	case "rst":
		port, _ := strconv.Atoi(f[1])
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
		c, err := dl.Dial("tcp4", f[2])
		if err != nil {
			fail(err)
		}
		io.WriteString(c, os.Getenv("FLEET_CONSOLE_PEERS_PAYLOAD"))
		fmt.Println("SENT")
		bufio.NewReader(os.Stdin).ReadString('\n')
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		fmt.Println("RST")
	case "get":
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(f[1])
		report(resp, err, true)
	case "h2c":
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(f[1])
		report(resp, err, true)
	case "hook":
		req, _ := http.NewRequest("POST", f[1], strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+f[2])
		if len(f) > 3 {
			req.Header.Set(f[3], "127.0.0.1")
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		report(resp, err, false)
	}
	os.Exit(0)
}
