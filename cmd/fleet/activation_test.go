package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/testdirs"
)

// lockedWriter is a bytes.Buffer that a process writes while the test reads it.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// socketActivate starts fleet serve (this test binary as fleet) under Debian's
// systemd-socket-activate, which listens on listen and hands the sockets over (LISTEN_FDS, with
// the names in fdnames when not empty) once the first connection comes.
func socketActivate(t *testing.T, home string, listen []string, fdnames string, serveArgs ...string) (*exec.Cmd, *lockedWriter) {
	t.Helper()
	sa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate is not installed (Debian's systemd package; .ci/run installs it)")
	}
	args := []string{}
	for _, l := range listen {
		args = append(args, "-l", l)
	}
	if fdnames != "" {
		args = append(args, "--fdname="+fdnames)
	}
	args = append(args, "-E", "FLEET_RUN_MAIN=1", "-E", "HOME", "-E", "PATH", "--", os.Args[0], "serve", "--state-dir", home,
		"--tailscaled-uid", "0", "--tailscale-socket", filepath.Join(t.TempDir(), "none.sock"), "--log-format", "json")
	args = append(args, serveArgs...)
	cmd := exec.Command(sa, args...)
	out := &lockedWriter{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, out
}

// askFleet sends GET /fleet/v1/consoles with the fleet token over c and returns the status.
func askFleet(t *testing.T, c net.Conn, token string) int {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET /fleet/v1/consoles HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", token)
	b, err := io.ReadAll(c)
	if err != nil && len(b) == 0 {
		t.Fatalf("no answer on the handed socket: %v", err) // the caller prints the log
	}
	var st int
	fmt.Sscanf(string(b), "HTTP/1.1 %d", &st)
	return st
}

// TestSocketActivation_O3a: fleet serve under systemd-socket-activate serves on the sockets it
// is handed — the one named tcp as the TCP door, the one named unix as the unix door, one
// without a name as the TCP door — and answers the connection that was waiting in the socket's
// queue before it started. It opens no socket of its own there. Handed over (SIGUSR2), the new
// process serves on the same sockets.
func TestSocketActivation_O3a(t *testing.T) {
	for _, named := range []bool{true, false} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "state")
			token, err := state.LoadOrCreateToken(state.FleetDir(home))
			if err != nil {
				t.Fatal(err)
			}
			tcp := rawhttp.FreeLoopbackAddr(t).String()
			listen := []string{tcp}
			fdnames := ""
			var sock string
			var serveArgs []string
			if named {
				dir := filepath.Join(testdirs.Private(t), "run")
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				sock = filepath.Join(dir, "serve.sock")
				listen = append(listen, sock)
				fdnames = "tcp:unix"
				serveArgs = []string{"--socket", sock}
			}
			// --port names another port: the handed socket is the TCP door, whatever --port says.
			other := rawhttp.FreeLoopbackAddr(t).Port()
			serveArgs = append(serveArgs, "--port", fmt.Sprint(other))
			_, out := socketActivate(t, home, listen, fdnames, serveArgs...)
			if named {
				// systemd-socket-activate binds it 0644; SocketMode=0600 makes it 0600 under
				// systemd (fleet serve refuses anything else: the row below the loop).
				waitFor(t, "the unix socket", func() bool { return os.Chmod(sock, 0o600) == nil })
			}
			var c net.Conn
			waitFor(t, "systemd-socket-activate to listen", func() bool {
				c, err = net.Dial("tcp", tcp)
				return err == nil
			})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("fleet serve said:\n%s", out)
				}
			})
			if st := askFleet(t, c, token); st != http.StatusOK {
				t.Fatalf("the queued connection on the handed TCP socket: %d, want 200\n%s", st, out)
			}
			if named {
				uc, err := net.Dial("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				if st := askFleet(t, uc, token); st != http.StatusOK {
					t.Fatalf("the handed unix socket: %d, want 200\n%s", st, out)
				}
			}
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", other), time.Second); err == nil {
				c.Close()
				t.Errorf("fleet serve opened --port %d beside the handed socket", other)
			}
			b, _ := os.ReadFile(filepath.Join(state.FleetDir(home), state.AddrFile))
			if strings.TrimSpace(string(b)) != tcp {
				t.Errorf("supervisor.addr = %q, want the handed socket's %s", b, tcp)
			}

			// Handed over (SIGUSR2): the new process serves on systemd's sockets, and the socket
			// file, systemd's, stays.
			fleetDir := state.FleetDir(home)
			old := servePID(fleetDir)
			if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the handoff", func() bool { p := servePID(fleetDir); return p != 0 && p != old })
			next := servePID(fleetDir)
			t.Cleanup(func() { syscall.Kill(next, syscall.SIGKILL) }) // before the Wait for the first
			waitFor(t, "the old process to exit", func() bool { return gone(old) })
			c, err = net.Dial("tcp", tcp)
			if err != nil {
				t.Fatalf("the TCP door after the handoff: %v", err)
			}
			if st := askFleet(t, c, token); st != http.StatusOK {
				t.Fatalf("the TCP door after the handoff: %d", st)
			}
			if named {
				if st, err := os.Lstat(sock); err != nil || st.Mode().Perm() != 0o600 {
					t.Fatalf("systemd's socket file after the handoff: %v %v", st, err)
				}
				uc, err := net.Dial("unix", sock)
				if err != nil {
					t.Fatalf("the unix door after the handoff: %v", err)
				}
				if st := askFleet(t, uc, token); st != http.StatusOK {
					t.Fatalf("the unix door after the handoff: %d", st)
				}
			}
		})
	}
}

// TestSocketActivationRefused_S1: a TCP socket handed on anything but 127.0.0.1 — every address,
// another loopback address — or a unix socket too open, is refused: fleet serve exits 1 with a
// line naming the rule, and serves nothing.
func TestSocketActivationRefused_S1(t *testing.T) {
	ln, err := net.Listen("tcp4", "0.0.0.0:0") // a port free on every address
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	rows := []struct {
		name   string
		listen string
		want   string
	}{
		{"S1 every address", fmt.Sprintf("0.0.0.0:%d", port), "rule S1"},
		{"S1 another loopback address", fmt.Sprintf("127.0.0.2:%d", port), "rule S1"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "state")
			if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
				t.Fatal(err)
			}
			cmd, out := socketActivate(t, home, []string{r.listen}, "tcp")
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("fleet serve said:\n%s", out)
				}
			})
			host := strings.Replace(r.listen, "0.0.0.0", "127.0.0.1", 1)
			waitFor(t, "systemd-socket-activate to listen", func() bool {
				c, err := net.Dial("tcp", host)
				if err == nil {
					c.Close()
				}
				return err == nil
			})
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
					t.Errorf("exit: %v, want status 1\n%s", err, out)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("fleet serve still runs on a refused socket\n%s", out)
			}
			if !strings.Contains(out.String(), r.want) {
				t.Errorf("output does not name %q:\n%s", r.want, out)
			}
			if _, err := os.Stat(filepath.Join(state.FleetDir(home), state.AddrFile)); err == nil {
				t.Errorf("supervisor.addr written for a refused socket")
			}
		})
	}
}
