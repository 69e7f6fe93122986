package supervisor

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/phase-console/fleet/internal/state"
)

// This file judges listening sockets that fleet serve did not open itself — handed by systemd
// (socket activation) or by the process it takes over from (SPEC O3) — by the rules of the sockets
// it opens: the loopback door on 127.0.0.1 only (S1), the unix door's socket in a private place
// (S5e, F1). A socket that breaks one is refused with an error that names it; it is never served.

// CheckLoopbackListener accepts ln as the loopback door's TCP listener only when it listens on
// 127.0.0.1 (SPEC S1: nothing wider, ever — not 0.0.0.0, not ::, not another loopback address)
// and is a stream socket.
func CheckLoopbackListener(ln net.Listener) error {
	a, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("the TCP door's socket is a %s socket (%s), not TCP", ln.Addr().Network(), ln.Addr())
	}
	ip := a.AddrPort().Addr().Unmap()
	if !ip.Is4() || ip.As4() != [4]byte{127, 0, 0, 1} {
		return fmt.Errorf("the TCP door's socket listens on %s: fleet serves only 127.0.0.1 (rule S1); set ListenStream=127.0.0.1:%d", a, a.Port)
	}
	return nil
}

// CheckUnixListener accepts ln as the unix door's listener only when it is a unix stream socket
// at an absolute path in a place ListenUnix would accept (state.CheckSocketPlace: not below /tmp,
// nor below a folder others can write or another user owns), in a folder that is private (F1),
// and is itself a socket of this user's, mode 0600. want, when not empty, is the path --socket
// names: the socket must be that one.
func CheckUnixListener(ln net.Listener, want string) (*net.UnixListener, error) {
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		return nil, fmt.Errorf("the unix door's socket is a %s socket (%s), not a unix stream socket", ln.Addr().Network(), ln.Addr())
	}
	path := ul.Addr().String()
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("the unix door's socket %q has no path in the file system (abstract or unnamed sockets are refused)", path)
	}
	if want != "" {
		abs, err := filepath.Abs(want)
		if err != nil || filepath.Clean(abs) != filepath.Clean(path) {
			return nil, fmt.Errorf("the unix door's socket handed over is %s, but --socket names %s; make them the same", path, want)
		}
	}
	if err := state.CheckSocketPlace(path); err != nil {
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	if err := state.CheckDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("unix socket folder: %w", err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("unix socket %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("unix socket %s: not a socket", path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("unix socket %s: not this user's", path)
	}
	if st.Mode().Perm() != 0o600 {
		return nil, &state.ModeError{Path: path, Mode: st.Mode(), Why: "is not 0600 (set SocketMode=0600)", Fix: "chmod 600 " + path}
	}
	return ul, nil
}
