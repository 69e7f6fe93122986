package supervisor

// The unix-socket door: the hardened way to publish the supervisor (SPEC S1, S2, S5a).
//
// tailscaled ≥ 1.94 can proxy Serve traffic to a unix socket:
//
//	sudo tailscale serve --bg unix:/home/me/.local/state/phase-console/fleet/serve.sock
//
// Over that socket the kernel itself names the peer (SO_PEERCRED), so the supervisor needs no
// /proc/net/tcp lookup and no WhoIs of the connection (S5b: a netstack forward can only reach TCP
// ports, never a unix socket). The socket is 0600 in a 0700 folder: apart from this user, only
// root — the usual tailscaled — can connect at all, and a peer that is not tailscaled's uid is
// refused 401 unverified for every /c/… request, as on the TCP door.
//
// Serve tells a unix-socket backend "Host: localhost" and puts the name the caller used in
// X-Forwarded-Host (Go's ReverseProxy deletes a caller's copy before Serve sets it). So, on this
// door only, and only on a connection whose peer is tailscaled's uid, the supervisor takes the
// Host from that single X-Forwarded-Host before judging anything (tailnet.RestoreServeHost); the
// S10 Host check, the S12 Origin check and the hop then see what they see on the TCP door. A
// request from any other peer keeps its Host.
//
// Tailscale SSH does not reach this door (it forwards unix sockets only below the login's home,
// /tmp and /run/user/<uid>; ListenUnix refuses /tmp and folders others can write, and fleet
// doctor fails a socket in another account's home), so it is served while SSH is on.
// A raw Serve forward can name a unix socket, though (TCPForward "unix:PATH"): while one names
// this socket, its /c/ requests are 401 tcp-forwardable (SPEC S5e, package tailnet).
//
// The TCP door keeps running beside it (consoles register on 127.0.0.1:<port> and find it in
// supervisor.addr); the TCP door also runs the background work (token follower, console probes).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/phase-console/fleet/internal/state"
)

// maxUnixPath is the longest socket path the kernel takes (sun_path is 108 bytes with its NUL).
const maxUnixPath = 107

// ListenUnix listens on a unix socket at path for Tailscale Serve (`tailscale serve unix:PATH`).
//
// Its place is judged first (SPEC S5e, state.CheckSocketPlace): a path below /tmp, or below a
// folder that others can write (sticky bit or not) or that another user owns, is refused — a
// Tailscale SSH login could forward to it, or others put their own socket in its place. Its
// folder is then made private (SPEC F1: created 0700 when missing; refused, never
// re-permissioned, when it is group- or world-accessible or someone else's). A file already at
// path is removed only when it is a socket of ours that nobody answers on (a stale socket left
// by a crash); anything else there — a regular file, a folder, a live socket — is an error that
// names the path. The socket is made 0600 before the listener is returned; Close removes it.
func ListenUnix(path string) (*net.UnixListener, error) {
	if path == "" {
		return nil, errors.New("unix socket: no path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("unix socket %s: %w", path, err)
	}
	path = abs
	if len(path) > maxUnixPath {
		return nil, fmt.Errorf("unix socket %s: the path is %d bytes, the kernel takes at most %d; choose a shorter one", path, len(path), maxUnixPath)
	}
	if err := state.CheckSocketPlace(path); err != nil {
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	if err := state.EnsureDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("unix socket folder: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("unix socket %s: %w", path, err)
	}
	// The folder is 0700, so nobody but this user (and root) could reach the socket in the
	// moment between bind and chmod.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("unix socket %s: %w", path, err)
	}
	st, err := os.Lstat(path)
	if err != nil || st.Mode().Type() != fs.ModeSocket || st.Mode().Perm() != 0o600 {
		ln.Close()
		return nil, fmt.Errorf("unix socket %s: not a 0600 socket after creating it", path)
	}
	return ln, nil
}

// removeStaleSocket removes path when it is a socket of ours that nobody listens on. It is not an
// error when path does not exist.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unix socket %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("unix socket %s: something that is not a socket is in the way (%s); move it away or choose another --socket", path, st.Mode().Type())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("unix socket %s: an existing socket that is not this user's is in the way; remove it or choose another --socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("unix socket %s: another process is listening on it (a second fleet serve?); stop it or choose another --socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("unix socket %s: cannot tell whether it is stale (%v); remove it by hand if no fleet serve is running", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unix socket %s: removing the stale socket: %w", path, err)
	}
	return nil
}

// ServeUnixListener serves the door on ln (from ListenUnix) until Close, with the same timeouts
// and checks as the TCP door. Every connection's peer is judged with SO_PEERCRED (S5a, package
// tailnet); S5b does not apply to a unix socket. It returns http.ErrServerClosed after Close.
func (s *Server) ServeUnixListener(ln *net.UnixListener) error {
	srv := s.newConnServer(s.newHTTPServer(http.HandlerFunc(s.serveUnixHTTP)), s.tailnet.RestoreServeHost)
	s.unixMu.Lock()
	s.unixConns = append(s.unixConns, srv)
	s.unixMu.Unlock()
	select {
	case <-s.stop:
		ln.Close()
		return http.ErrServerClosed
	default:
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.stop:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				srv.Close()
			}
		case <-done:
		}
	}()
	s.tailnet.Watch(ln.Addr(), s.stop) // S5e, before the first connection is accepted
	s.log.Info("fleet.listening", "socket", ln.Addr().String(), "state", s.cfg.StateHome)
	return srv.Serve(ln)
}

// serveUnixHTTP restores the Host that the caller used (see the file comment) when the peer is
// tailscaled, then judges the request like the TCP door.
func (s *Server) serveUnixHTTP(w http.ResponseWriter, r *http.Request) {
	s.tailnet.RestoreServeHost(r)
	s.ServeHTTP(w, r)
}
