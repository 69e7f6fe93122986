package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
)

// handoffCaller is the tailnet address the fake tailscaled names a person for.
const handoffCaller = "100.64.0.7"

// fakeTailscaled serves a LocalAPI on a unix socket: a kernel TUN, one tailnet caller
// (handoffCaller, alice@example.com), no SSH, no Serve forwards — what the loopback door needs to
// verify a caller (S5) without a tailnet.
func fakeTailscaled(t *testing.T) string {
	t.Helper()
	self := netip.MustParseAddr("100.100.100.1")
	mux := http.NewServeMux()
	mux.HandleFunc("/localapi/v0/whois", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("addr") != handoffCaller {
			http.Error(w, "no match for IP:port", http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(&apitype.WhoIsResponse{
			Node:        &tailcfg.Node{ID: 7, StableID: "n7", Name: "phone."},
			UserProfile: &tailcfg.UserProfile{LoginName: "alice@example.com"},
		})
	})
	mux.HandleFunc("/localapi/v0/status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(&ipnstate.Status{
			Version: "1.102.5", TUN: true, BackendState: "Running", TailscaleIPs: []netip.Addr{self},
			Self: &ipnstate.PeerStatus{ID: "n1", DNSName: "sup.example.ts.net.", HostName: "sup", TailscaleIPs: []netip.Addr{self}},
		})
	})
	mux.HandleFunc("/localapi/v0/prefs", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(&ipn.Prefs{WantRunning: true})
	})
	mux.HandleFunc("/localapi/v0/serve-config", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", "handoff")
		json.NewEncoder(w).Encode(&ipn.ServeConfig{})
	})
	sock := filepath.Join(t.TempDir(), "tailscaled.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// handoffConsole answers "console" on /, a server-sent event every 20 ms on /events, and on /ws
// a WebSocket message every 20 ms.
func handoffConsole(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console") })
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ctx := c.CloseRead(r.Context())
		for i := 0; ; i++ {
			if err := c.Write(ctx, websocket.MessageText, []byte(strconv.Itoa(i))); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// gone reports whether process pid has exited (or is a zombie nobody reaped yet).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z") || strings.HasPrefix(after, "X")
}

// loadResult is what one door's steady load saw.
type loadResult struct {
	mu        sync.Mutex
	ok        int
	failed    []string // what a failed request got
	refused   int      // connections refused
	steady    []time.Duration
	handingOf []time.Duration
}

func (l *loadResult) add(d time.Duration, during bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ok++
	if during {
		l.handingOf = append(l.handingOf, d)
	} else {
		l.steady = append(l.steady, d)
	}
}

func (l *loadResult) fail(why string, refused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if refused {
		l.refused++
	}
	if len(l.failed) < 20 {
		l.failed = append(l.failed, why)
	} else {
		l.failed = append(l.failed[:20], "…")
	}
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// TestHandoffUnderLoad_O3: fleet serve (this test binary as fleet, in its own process) is handed
// over five times in a row (SIGUSR2) while steady load runs through the loopback door (a tailnet
// person's requests to a console, verified by a fake tailscaled) and the direct-reach door (a
// paired device's): no request fails and no connection is refused on either door. serve.pid
// names each new process as it takes over, and the old one exits. An event stream and a
// WebSocket open on each door across the first handoff end cleanly: the stream as a finished
// answer, the WebSocket with close code 1001. The load is bounded (at most loadCap requests a
// door, four workers) and loopback only; FLEET_HANDOFF_REPORT names a file that gets one line of
// figures (bench/run's row).
func TestHandoffUnderLoad_O3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleet serve six times")
	}
	const handoffs, loadCap, workersPerDoor = 5, 40000, 2
	home := filepath.Join(t.TempDir(), "state")
	fleetDir := state.FleetDir(home)
	if _, err := state.LoadOrCreateToken(fleetDir); err != nil {
		t.Fatal(err)
	}
	reachAddr := rawhttp.FreeLoopbackAddr(t).String()
	profile := fmt.Sprintf("reach:\n  mode: direct\n  listen: %s\n", reachAddr)
	if err := state.WritePrivateFile(filepath.Join(home, reach.ProfileFile), []byte(profile)); err != nil {
		t.Fatal(err)
	}
	_, cred, err := pairing.RegisterDeviceFor(pairingFolder(home), "phone", access.Everything, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	console := handoffConsole(t)
	tailscaled := fakeTailscaled(t)
	port := int(rawhttp.FreeLoopbackAddr(t).Port())
	loopback := fmt.Sprintf("127.0.0.1:%d", port)

	// A file, not a pipe: every process handed over writes to it too, and exec.Cmd.Wait would
	// wait for all of them to close a pipe.
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(os.Args[0], "serve", "--state-dir", home, "--port", strconv.Itoa(port),
		"--tailscaled-uid", strconv.Itoa(os.Getuid()), "--tailscale-socket", tailscaled, "--log-format", "json")
	cmd.Env = append(os.Environ(), "FLEET_RUN_MAIN=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := []int{cmd.Process.Pid}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("fleet serve said:\n%s", b)
		}
	})
	waitFor(t, "serve.pid", func() bool { return servePID(fleetDir) == cmd.Process.Pid })
	if st, _, errs := runFleet("register", "--state-dir", home, "--id", "alpha", "--addr", strings.TrimPrefix(console.URL, "http://")); st != 0 {
		t.Fatalf("register: %d %s", st, errs)
	}

	// The direct-reach door's root, for a client that verifies it.
	var rootPEM []byte
	waitFor(t, "the direct-reach door", func() bool {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := c.Get("https://" + reachAddr + "/ca.crt")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		rootPEM, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == 200
	})
	reachTLS := reachTLSConfig(t, rootPEM)
	loopbackClient := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	reachClient := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: reachTLS, MaxIdleConnsPerHost: 8}}
	loopbackGet := func(path string) (*http.Request, error) {
		req, err := http.NewRequest("GET", "http://"+loopback+path, nil)
		if err == nil {
			req.Header.Set("X-Forwarded-For", handoffCaller) // as Tailscale Serve writes it
		}
		return req, err
	}
	reachGet := func(path string) (*http.Request, error) {
		req, err := http.NewRequest("GET", "https://"+reachAddr+path, nil)
		if err == nil {
			req.AddCookie(&http.Cookie{Name: pairing.CookieName, Value: cred})
		}
		return req, err
	}
	for name, try := range map[string]func() error{
		"loopback": func() error { return expectConsole(loopbackClient, loopbackGet) },
		"reach":    func() error { return expectConsole(reachClient, reachGet) },
	} {
		waitFor(t, "the console through the "+name+" door", func() bool { return try() == nil })
	}

	// The streams that stay open across the first handoff.
	type streamEnd struct {
		what string
		err  error
	}
	ends := make(chan streamEnd, 4)
	openStream := func(what string, client *http.Client, get func(string) (*http.Request, error)) {
		req, _ := get("/c/alpha/events")
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s event stream: %v %v", what, resp, err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatalf("%s event stream: no first event: %v", what, err)
		}
		go func() {
			defer resp.Body.Close()
			_, err := io.Copy(io.Discard, br)
			ends <- streamEnd{what + " event stream", err} // nil: ended as a finished answer
		}()
	}
	openWS := func(what, url string, opts *websocket.DialOptions) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, url, opts)
		if err != nil {
			t.Fatalf("%s WebSocket: %v", what, err)
		}
		if _, _, err := c.Read(ctx); err != nil {
			t.Fatalf("%s WebSocket: no first message: %v", what, err)
		}
		go func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					ends <- streamEnd{what + " WebSocket", err}
					return
				}
			}
		}()
	}
	openStream("loopback", loopbackClient, loopbackGet)
	openStream("reach", reachClient, reachGet)
	openWS("loopback", "ws://"+loopback+"/c/alpha/ws", &websocket.DialOptions{HTTPHeader: http.Header{"X-Forwarded-For": {handoffCaller}}})
	openWS("reach", "wss://"+reachAddr+"/c/alpha/ws", &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: reachTLS}},
		HTTPHeader: http.Header{"Cookie": {pairing.CookieName + "=" + cred}},
	})

	// Steady load on both doors.
	var during atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	results := map[string]*loadResult{"loopback": {}, "reach": {}}
	for name, door := range map[string]struct {
		c   *http.Client
		get func(string) (*http.Request, error)
	}{"loopback": {loopbackClient, loopbackGet}, "reach": {reachClient, reachGet}} {
		res := results[name]
		for range workersPerDoor {
			wg.Go(func() {
				for i := 0; i < loadCap/workersPerDoor; i++ {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					req, _ := door.get("/c/alpha/")
					resp, err := door.c.Do(req)
					if err != nil {
						res.fail(err.Error(), errors.Is(err, syscall.ECONNREFUSED))
						continue
					}
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 || string(b) != "console" {
						res.fail(fmt.Sprintf("%d %q %v", resp.StatusCode, b, err), false)
						continue
					}
					res.add(time.Since(start), during.Load())
				}
			})
		}
	}
	count := func() int {
		n := 0
		for _, r := range results {
			r.mu.Lock()
			n += r.ok
			r.mu.Unlock()
		}
		return n
	}
	waitFor(t, "steady load", func() bool { return count() >= 400 })

	during.Store(true)
	for i := range handoffs {
		old := servePID(fleetDir)
		if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("handoff %d: serve.pid to name the new process", i+1), func() bool {
			pid := servePID(fleetDir)
			return pid != 0 && pid != old
		})
		pids = append(pids, servePID(fleetDir))
		if i == 0 {
			cmd.Wait() // the first process is this test's child: reaped here
		}
		waitFor(t, fmt.Sprintf("handoff %d: the old process to exit", i+1), func() bool { return gone(old) })
		if i == 0 {
			for range 4 {
				select {
				case e := <-ends:
					var ce websocket.CloseError
					switch {
					case strings.HasSuffix(e.what, "event stream") && e.err != nil:
						t.Errorf("%s did not end as a finished answer: %v", e.what, e.err)
					case strings.HasSuffix(e.what, "WebSocket") && (!errors.As(e.err, &ce) || ce.Code != websocket.StatusGoingAway):
						t.Errorf("%s ended with %v, want close code 1001", e.what, e.err)
					}
				case <-time.After(40 * time.Second):
					t.Fatal("a stream or WebSocket stayed open past the drain")
				}
			}
		}
	}
	during.Store(false)
	before := count()
	waitFor(t, "load after the last handoff", func() bool { return count() >= before+200 })
	close(stop)
	wg.Wait()

	if st, _, errs := runFleet("consoles", "--state-dir", home); st != 0 {
		t.Errorf("fleet consoles after the handoffs: %d %s", st, errs)
	}
	line := ""
	for _, name := range []string{"loopback", "reach"} {
		r := results[name]
		if len(r.failed) > 0 || r.refused > 0 {
			t.Errorf("%s door: %d failed, %d refused: %q", name, len(r.failed), r.refused, r.failed)
		}
		if len(r.handingOf) == 0 {
			t.Errorf("%s door: no request ran during the handoffs", name)
		}
		line += fmt.Sprintf("%s: requests=%d failed=%d refused=%d p99_steady=%s p99_handoffs=%s; ", name, r.ok, len(r.failed), r.refused,
			p99(r.steady).Round(10*time.Microsecond), p99(r.handingOf).Round(10*time.Microsecond))
	}
	t.Logf("%d handoffs: %s", handoffs, line)
	if report := os.Getenv("FLEET_HANDOFF_REPORT"); report != "" {
		os.WriteFile(report, []byte(line+"\n"), 0o600)
	}
	// The last process serves, and holds the lock: an independent fleet serve is refused.
	second := exec.Command(os.Args[0], "serve", "--state-dir", home, "--port", strconv.Itoa(int(rawhttp.FreeLoopbackAddr(t).Port())), "--tailscale-socket", tailscaled)
	second.Env = append(os.Environ(), "FLEET_RUN_MAIN=1")
	out, err := second.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "already running") {
		t.Errorf("a second fleet serve beside the handed-over one: %v %s", err, out)
	}
}

// reachTLSConfig trusts only the direct-reach door's root.
func reachTLSConfig(t *testing.T, rootPEM []byte) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("the door's /ca.crt is not a certificate: %q", rootPEM)
	}
	return &tls.Config{RootCAs: pool}
}

func expectConsole(c *http.Client, get func(string) (*http.Request, error)) error {
	req, _ := get("/c/alpha/")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "console" {
		return fmt.Errorf("%d %q", resp.StatusCode, b)
	}
	return nil
}

// replaceFile puts content at path the way an upgrade does: a new file renamed over the old one
// (a running binary cannot be written in place).
func replaceFile(t *testing.T, path string, content []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, content, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestHandoffFailedBinary_O3: a binary on disk that fails to start leaves the old process
// serving, and the log says why (fleet.handoff-failed, after the new binary's own line); serve.pid
// still names the old process, the folder is still locked to an independent fleet serve, and once
// a working binary is back on disk the next SIGUSR2 hands over.
func TestHandoffFailedBinary_O3(t *testing.T) {
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fleet")
	replaceFile(t, bin, self)
	home := filepath.Join(t.TempDir(), "state")
	fleetDir := state.FleetDir(home)
	token, err := state.LoadOrCreateToken(fleetDir)
	if err != nil {
		t.Fatal(err)
	}
	port := int(rawhttp.FreeLoopbackAddr(t).Port())
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "serve", "--state-dir", home, "--port", strconv.Itoa(port), "--tailscaled-uid", "0",
		"--tailscale-socket", filepath.Join(t.TempDir(), "none.sock"), "--log-format", "json")
	cmd.Env = append(os.Environ(), "FLEET_RUN_MAIN=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := cmd.Process.Pid
	var next int
	t.Cleanup(func() {
		syscall.Kill(first, syscall.SIGKILL)
		if next != 0 {
			syscall.Kill(next, syscall.SIGKILL)
		}
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("fleet serve said:\n%s", b)
		}
	})
	waitFor(t, "serve.pid", func() bool { return servePID(fleetDir) == first })
	answers := func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		return err == nil && askFleet(t, c, token) == http.StatusOK
	}
	waitFor(t, "the loopback door", answers)

	replaceFile(t, bin, []byte("#!/bin/sh\necho 'fleet: this build is broken' >&2\nexit 3\n"))
	syscall.Kill(first, syscall.SIGUSR2)
	waitFor(t, "fleet.handoff-failed", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), `"msg":"fleet.handoff-failed"`)
	})
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), "this build is broken") || !strings.Contains(string(b), "exit status 3") {
		t.Errorf("the log does not say why the handoff failed:\n%s", b)
	}
	if gone(first) || servePID(fleetDir) != first || !answers() {
		t.Fatalf("the old process does not serve on after a failed handoff (pid file %d)", servePID(fleetDir))
	}
	second := exec.Command(bin+".real", "serve", "--state-dir", home, "--port", strconv.Itoa(int(rawhttp.FreeLoopbackAddr(t).Port())))
	replaceFile(t, bin+".real", self)
	second.Env = append(os.Environ(), "FLEET_RUN_MAIN=1")
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out), "already running") {
		t.Errorf("an independent fleet serve after the failed handoff: %v %s", err, out)
	}

	replaceFile(t, bin, self)
	syscall.Kill(first, syscall.SIGUSR2)
	waitFor(t, "the handoff to the working binary", func() bool { p := servePID(fleetDir); return p != 0 && p != first })
	next = servePID(fleetDir)
	cmd.Wait()
	if !answers() {
		t.Error("the new process does not answer")
	}
}
