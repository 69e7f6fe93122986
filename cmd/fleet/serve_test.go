package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testdirs"
	"tailscale.com/ipn/ipnstate"
)

// notAFolder is a --state-dir that can never be used (a regular file), so that a command that
// wrongly went on past its flags fails at once (exit 1) instead of binding a port.
func notAFolder(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state-is-a-file")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostFlagRefused_S1: `fleet serve` refuses a --host flag in any spelling, with any value:
// exit 2, one stderr line naming the rule, nothing on stdout, nothing started.
func TestHostFlagRefused_S1(t *testing.T) {
	rows := []struct {
		name string
		args []string
	}{
		{"S1 --host 0.0.0.0", []string{"--host", "0.0.0.0"}},
		{"S1 --host=::", []string{"--host=::"}},
		{"S1 -host x", []string{"-host", "x"}},
		{"S1 --HOST=a", []string{"--HOST=a"}},
		{"S1 --Host", []string{"--Host"}},
		{"S1 -HOST=1", []string{"-HOST=1"}},
		{"S1 --host=127.0.0.1 (even loopback)", []string{"--host=127.0.0.1"}},
		{"S1 --host= empty", []string{"--host="}},
		{"S1 ---host", []string{"---host", "0.0.0.0"}},
		{"S1 after other flags", []string{"--port", "7421", "--host", "0.0.0.0"}},
		{"S1 before other flags", []string{"-host=0.0.0.0", "--port=7421"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			dir := notAFolder(t)
			var out, errb bytes.Buffer
			args := append([]string{"serve", "--state-dir", dir}, row.args...)
			code := run(args, &out, &errb)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "S1") {
				t.Errorf("stderr %q, want one line naming S1", errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q", out.String())
			}
		})
	}
}

// TestOtherListenFlagsRefused_S1: there is no other way to widen the listener: flags that would
// name an address are unknown (exit 2), and an argument after "--" is refused too.
func TestOtherListenFlagsRefused_S1(t *testing.T) {
	for _, row := range []struct {
		name string
		args []string
	}{
		{"S1 --listen", []string{"--listen", "0.0.0.0:7420"}},
		{"S1 --addr", []string{"--addr=0.0.0.0:7420"}},
		{"S1 --bind", []string{"--bind", "0.0.0.0"}},
		{"S1 --host after --", []string{"--", "--host", "0.0.0.0"}},
		{"S1 positional address", []string{"0.0.0.0:7420"}},
	} {
		t.Run(row.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"serve", "--state-dir", notAFolder(t)}, row.args...)
			if code := run(args, &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, errb.String())
			}
		})
	}
}

// TestPortOutOfRange_S1: --port must be 1-65535: else exit 2 with one line naming --port.
func TestPortOutOfRange_S1(t *testing.T) {
	for _, row := range []struct {
		name string
		args []string
	}{
		{"S1 --port 0", []string{"--port", "0"}},
		{"S1 --port=65536", []string{"--port=65536"}},
		{"S1 --port -1", []string{"--port", "-1"}},
		{"S1 --port 99999", []string{"--port", "99999"}},
	} {
		t.Run(row.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"serve", "--state-dir", notAFolder(t)}, row.args...)
			if code := run(args, &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "--port") {
				t.Errorf("stderr %q, want one line naming --port", errb.String())
			}
		})
	}
	t.Run("S1 --port not a number", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := run([]string{"serve", "--state-dir", notAFolder(t), "--port", "http"}, &out, &errb); code != 2 {
			t.Errorf("exit %d, want 2", code)
		}
	})
}

// TestUnusableStateDirStopsServe_F1: a state folder that cannot be used stops `fleet serve`
// before it listens: exit 1, the error names the path.
func TestUnusableStateDirStopsServe_F1(t *testing.T) {
	dir := notAFolder(t)
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--state-dir", dir, "--port", "7421"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1 (stderr %q)", code, errb.String())
	}
	if !strings.Contains(errb.String(), dir) {
		t.Errorf("stderr %q does not name %s", errb.String(), dir)
	}
}

// syncBuffer is a bytes.Buffer that a running serve and the test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runningServe is a `fleet serve` running in the test.
type runningServe struct {
	addr   string
	stderr *syncBuffer
	stop   func() int // stops it (as SIGTERM would) and returns its exit status
}

// startServe runs serve for home on a free port with the given log format and no tailscaled.
func startServe(t *testing.T, home, logFormat string) *runningServe {
	t.Helper()
	return startServeSocket(t, home, logFormat, "")
}

// startServeSocket is startServe with --socket.
func startServeSocket(t *testing.T, home, logFormat, unixSocket string) *runningServe {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan int, 1)
	errb := &syncBuffer{}
	o := serveOptions{home: home, port: 0, tailscaledUID: os.Getuid(), logFormat: logFormat, unixSocket: unixSocket,
		tailscaleSocket: filepath.Join(t.TempDir(), "no-tailscaled.sock"), ready: func(a string) { ready <- a }}
	go func() { done <- serve(ctx, o, io.Discard, errb) }()
	rs := &runningServe{stderr: errb}
	var once sync.Once
	status := -1
	rs.stop = func() int {
		once.Do(func() { cancel(); status = <-done })
		return status
	}
	t.Cleanup(func() { rs.stop() })
	select {
	case rs.addr = <-ready:
	case st := <-done:
		once.Do(func() { status = st }) // nothing left to stop
		t.Fatalf("serve ended with %d before listening: %s", st, errb)
	}
	return rs
}

// TestSecondServeOnOneFolderRefused_F: a second `fleet serve` on a state folder that a running one
// holds exits 1 at once, naming the running one's pid and address; it does not touch
// supervisor.addr. After the first stops cleanly, supervisor.addr is gone and a new serve starts.
func TestSecondServeOnOneFolderRefused_F(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	first := startServe(t, home, "json")
	addrFile := filepath.Join(state.FleetDir(home), state.AddrFile)

	st, out, errs := runFleet("serve", "--state-dir", home, "--port", strconv.Itoa(int(rawhttp.FreeLoopbackAddr(t).Port())), "--tailscaled-uid", "0")
	if st != 1 {
		t.Fatalf("second serve: exit %d, stderr %q", st, errs)
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if len(lines) != 1 || !strings.Contains(errs, first.addr) || !strings.Contains(errs, fmt.Sprintf("pid %d", os.Getpid())) ||
		!strings.Contains(errs, "--state-dir") {
		t.Errorf("second serve: stderr %q, want one line naming pid %d, %s and --state-dir", errs, os.Getpid(), first.addr)
	}
	if out != "" {
		t.Errorf("stdout %q", out)
	}
	if b, _ := os.ReadFile(addrFile); strings.TrimSpace(string(b)) != first.addr {
		t.Errorf("supervisor.addr = %q, want the running one's %s", b, first.addr)
	}

	if st := first.stop(); st != 0 {
		t.Fatalf("first serve: exit %d, stderr %s", st, first.stderr)
	}
	if _, err := os.Stat(addrFile); !os.IsNotExist(err) {
		t.Errorf("supervisor.addr left behind after a clean exit: %v", err)
	}
	second := startServe(t, home, "json")
	if b, _ := os.ReadFile(addrFile); strings.TrimSpace(string(b)) != second.addr {
		t.Errorf("supervisor.addr = %q after a restart, want %s", b, second.addr)
	}
}

// TestCleanExitKeepsAnotherAddr_F: on exit, serve removes supervisor.addr only when it still
// names its own address.
func TestCleanExitKeepsAnotherAddr_F(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	rs := startServe(t, home, "json")
	addrFile := filepath.Join(state.FleetDir(home), state.AddrFile)
	if err := state.WriteFileAtomic(addrFile, []byte("127.0.0.1:1\n")); err != nil {
		t.Fatal(err)
	}
	if st := rs.stop(); st != 0 {
		t.Fatalf("exit %d", st)
	}
	if b, _ := os.ReadFile(addrFile); string(b) != "127.0.0.1:1\n" {
		t.Errorf("supervisor.addr = %q, want the other address kept", b)
	}
}

// TestPortInUse: a port held by another program stops serve before it creates a token: exit 1,
// one line naming the port, --port and "another program"; a port held by a fleet serve of another
// state folder is named as such.
func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	home := filepath.Join(t.TempDir(), "state")
	st, _, errs := runFleet("serve", "--state-dir", home, "--port", port, "--tailscaled-uid", "0")
	if st != 1 || strings.Count(strings.TrimSpace(errs), "\n") != 0 ||
		!strings.Contains(errs, "127.0.0.1:"+port) || !strings.Contains(errs, "--port") || !strings.Contains(errs, "another program") {
		t.Fatalf("exit %d, stderr %q; want 1 and one line naming 127.0.0.1:%s, --port, another program", st, errs, port)
	}
	if _, err := os.Stat(filepath.Join(state.FleetDir(home), state.TokenFile)); !os.IsNotExist(err) {
		t.Errorf("a token was created before the port was known to be free: %v", err)
	}

	other := startServe(t, filepath.Join(t.TempDir(), "other-state"), "json")
	_, otherPort, _ := net.SplitHostPort(other.addr)
	st, _, errs = runFleet("serve", "--state-dir", home, "--port", otherPort, "--tailscaled-uid", "0")
	if st != 1 || !strings.Contains(errs, "another fleet serve") || !strings.Contains(errs, "--port") {
		t.Fatalf("port of another fleet: exit %d, stderr %q", st, errs)
	}
}

// fakeStatus is a tailscaled LocalAPI that answers status.
type fakeStatus struct{ st *ipnstate.Status }

func (f fakeStatus) StatusWithoutPeers(context.Context) (*ipnstate.Status, error) { return f.st, nil }

// TestStartupLine: serve says once where it listens, what tailscaled said and what to do next: one
// line for a person with --log-format text, one JSON line (fleet.listening) with json.
func TestStartupLine(t *testing.T) {
	t.Run("text, no tailscaled", func(t *testing.T) {
		rs := startServe(t, filepath.Join(t.TempDir(), "state"), "text")
		rs.stop()
		var line string
		for _, l := range strings.Split(rs.stderr.String(), "\n") {
			if strings.HasPrefix(l, "fleet serve: listening on") {
				line = l
			}
		}
		for _, want := range []string{"http://" + rs.addr, "tailscaled not found", "no-tailscaled.sock", "next: start tailscaled", "401 unverified"} {
			if !strings.Contains(line, want) {
				t.Errorf("start-up line %q lacks %q (stderr %s)", line, want, rs.stderr)
			}
		}
	})
	t.Run("json, tailscaled running", func(t *testing.T) {
		old := serveStatusAPI
		serveStatusAPI = func(string) interface {
			StatusWithoutPeers(context.Context) (*ipnstate.Status, error)
		} {
			return fakeStatus{&ipnstate.Status{BackendState: "Running", Self: &ipnstate.PeerStatus{DNSName: "sup.tail-scale.ts.net."}}}
		}
		defer func() { serveStatusAPI = old }()
		rs := startServe(t, filepath.Join(t.TempDir(), "state"), "json")
		rs.stop()
		var got map[string]any
		for _, l := range strings.Split(rs.stderr.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "fleet.listening" {
				got = m
			}
		}
		if got == nil || got["addr"] != rs.addr || got["tailscaled"] != "running" || got["tailscaled_detail"] != "sup.tail-scale.ts.net" ||
			!strings.Contains(fmt.Sprint(got["next"]), "tailscale serve --bg http://"+rs.addr) {
			t.Errorf("fleet.listening line %v (stderr %s)", got, rs.stderr)
		}
	})
	t.Run("text, with --socket: publish the socket", func(t *testing.T) {
		old := serveStatusAPI
		serveStatusAPI = func(string) interface {
			StatusWithoutPeers(context.Context) (*ipnstate.Status, error)
		} {
			return fakeStatus{&ipnstate.Status{BackendState: "Running", Self: &ipnstate.PeerStatus{DNSName: "sup.tail-scale.ts.net."}}}
		}
		defer func() { serveStatusAPI = old }()
		sock := filepath.Join(testdirs.Private(t), "run", "serve.sock")
		rs := startServeSocket(t, filepath.Join(t.TempDir(), "state"), "text", sock)
		rs.stop()
		want := "fleet serve: listening on http://" + rs.addr + " and unix:" + sock + " "
		if !strings.Contains(rs.stderr.String(), want) || !strings.Contains(rs.stderr.String(), "tailscaled is running (sup.tail-scale.ts.net); next: publish it with 'tailscale serve --bg unix:"+sock+"'") {
			t.Errorf("stderr %s; want %q and the unix: target", rs.stderr, want)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("the socket is left after a clean exit: %v", err)
		}
	})
	t.Run("bad --log-format", func(t *testing.T) {
		st, _, errs := runFleet("serve", "--state-dir", notAFolder(t), "--log-format", "yaml")
		if st != 2 || !strings.Contains(errs, "--log-format") {
			t.Errorf("exit %d, stderr %q", st, errs)
		}
	})
}

// TestServeRefusesTooOpenAddrFile_F1: `fleet serve` refuses a supervisor.addr that others can
// read, naming it and the chmod that fixes it, and leaves it as it was.
func TestServeRefusesTooOpenAddrFile_F1(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(state.FleetDir(home), state.AddrFile)
	if err := os.WriteFile(addrFile, []byte("127.0.0.1:7420\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(addrFile, 0o644)
	st, _, errs := runFleet("serve", "--state-dir", home, "--port", strconv.Itoa(int(rawhttp.FreeLoopbackAddr(t).Port())), "--tailscaled-uid", "0")
	if st != 1 || !strings.Contains(errs, addrFile) || !strings.Contains(errs, "chmod 600") {
		t.Fatalf("exit %d, stderr %q; want 1 naming %s and chmod 600", st, errs, addrFile)
	}
	if fi, err := os.Stat(addrFile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("supervisor.addr was changed: %v %v", fi.Mode(), err)
	}
}

// TestServeStdLogIsJSONWarning_S9: what net/http's Transport writes through the standard log
// package while serve runs ("Unsolicited response received on idle HTTP channel …", here from a
// server that answers one request twice) comes out as one JSON line at warning level
// (fleet.http-error, as the servers' own errors), never as a raw line: every line serve writes
// is JSON. Once serve returns, the standard logger is as it was.
func TestServeStdLogIsJSONWarning_S9(t *testing.T) {
	before, flags, prefix := stdlog.Writer(), stdlog.Flags(), stdlog.Prefix()
	rs := startServe(t, filepath.Join(t.TempDir(), "state"), "json")

	// A server that sends a second, unasked answer right behind the first: the Transport finds it
	// on the idle connection and says so through the log package.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		io.Copy(io.Discard, c) // until the Transport closes it
	}()
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	const said = "Unsolicited response received on idle HTTP channel"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rs.stderr.String(), said) {
		if time.Now().After(deadline) {
			t.Fatalf("the Transport's line never came (stderr %s)", rs.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stdlog.Print("a line of the log package's own") // and any other writer of the standard logger
	if st := rs.stop(); st != 0 {
		t.Fatalf("exit %d", st)
	}

	var found []string
	for _, l := range strings.Split(strings.TrimSuffix(rs.stderr.String(), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("a line that is not JSON: %q", l)
			continue
		}
		if e, _ := m["error"].(string); strings.HasPrefix(e, said) || e == "a line of the log package's own" {
			if m["level"] != "WARN" || m["msg"] != "fleet.http-error" {
				t.Errorf("standard log line %v: want level WARN, msg fleet.http-error", m)
			}
			found = append(found, e)
		}
	}
	if len(found) != 2 {
		t.Errorf("standard log lines found %q, want the Transport's and the test's (stderr %s)", found, rs.stderr)
	}
	if stdlog.Writer() != before || stdlog.Flags() != flags || stdlog.Prefix() != prefix {
		t.Errorf("the standard logger was not put back: %v %d %q", stdlog.Writer(), stdlog.Flags(), stdlog.Prefix())
	}
}
