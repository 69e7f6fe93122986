//go:build linux

package peercred

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"syscall"
)

// procNetAttempts is how often PeerUID reads the tables before it says ErrPeerUIDNotFound:
// a read of /proc/net/tcp is not atomic and may miss an entry while sockets come and go.
const procNetAttempts = 3

// PeerUID returns the uid that owns the socket at the other end of a loopback TCP connection
// whose local address is local and remote address is remote (as seen by the server).
//
// It fails closed: local must be a loopback address (so that the peer is a socket of this
// network namespace, listed in /proc/net/tcp{,6}); exactly one uid must own a live socket whose
// addresses are the connection's, mirrored; anything else is an error, never a uid. IPv4-mapped
// IPv6 addresses match their IPv4 form.
func PeerUID(local, remote netip.AddrPort) (uint32, error) {
	local, remote = procNetNormalize(local), procNetNormalize(remote)
	if !local.IsValid() || !remote.IsValid() || local.Port() == 0 || remote.Port() == 0 {
		return 0, fmt.Errorf("peercred: peer uid of %v <- %v: invalid address", local, remote)
	}
	if !local.Addr().IsLoopback() {
		return 0, fmt.Errorf("peercred: peer uid of %v <- %v: local address is not loopback", local, remote)
	}
	for range procNetAttempts {
		uid, found, err := procNetLookup(local, remote)
		if err != nil {
			return 0, fmt.Errorf("peercred: peer uid of %v <- %v: %w", local, remote, err)
		}
		if found {
			return uid, nil
		}
	}
	return 0, fmt.Errorf("peercred: peer uid of %v <- %v: %w", local, remote, ErrPeerUIDNotFound)
}

// procNetLookup searches every table in procNetFiles once. A table that does not exist (tcp6
// with IPv6 disabled) lists no socket and is skipped; one that cannot be read is an error.
func procNetLookup(local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	read := 0
	for _, name := range procNetFiles {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		u, ok, err := parseProcNetTCP(f, local, remote)
		f.Close()
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", name, err)
		}
		read++
		if !ok {
			continue
		}
		if found && u != uid {
			return 0, false, ErrPeerUIDAmbiguous
		}
		uid, found = u, true
	}
	if read == 0 {
		return 0, false, fmt.Errorf("none of %v could be read", procNetFiles)
	}
	return uid, found, nil
}

// UnixPeerUID returns the uid of the process at the other end of a unix-socket connection
// (SO_PEERCRED: the credentials the peer had when it connected). It fails closed: no
// credentials, or the invalid uid 4294967295, is an error.
func UnixPeerUID(c *net.UnixConn) (uint32, error) {
	if c == nil {
		return 0, errors.New("peercred: unix peer uid: nil connection")
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peercred: unix peer uid: %w", err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peercred: unix peer uid: %w", err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("peercred: unix peer uid: SO_PEERCRED: %w", credErr)
	}
	if cred == nil || cred.Uid == procNetInvalidUID {
		return 0, errors.New("peercred: unix peer uid: peer has no credentials")
	}
	return cred.Uid, nil
}
