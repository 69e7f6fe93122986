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
	"time"

	"golang.org/x/sys/unix"
)

// procNetBackoff is how long PeerUID waits before each new read of the tables when the peer's
// socket is not (yet) listed: /proc is not read atomically, and a server's end of a fresh
// connection is listed only once the server has accepted it (before that it has no inode). About
// a quarter of a second in all, then ErrPeerUIDNotFound.
var procNetBackoff = []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 170 * time.Millisecond}

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
	for _, wait := range procNetBackoff {
		time.Sleep(wait)
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
// stillConnected reports an error unless c's own socket still holds its connection (TCP state
// ESTABLISHED or CLOSE_WAIT, from TCP_INFO). Checked after PeerUID, it proves that the peer found
// in /proc was the peer of c: while c's socket holds the address pair, no other connection can
// take it, so a peer that reset its connection cannot hand its addresses to someone else's.
func stillConnected(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var info *unix.TCPInfo
	var infoErr error
	if err := rc.Control(func(fd uintptr) {
		info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return err
	}
	if infoErr != nil {
		return infoErr
	}
	const established, closeWait = 1, 8
	if info.State != established && info.State != closeWait {
		return fmt.Errorf("the connection closed while its peer was looked up (TCP state %d)", info.State)
	}
	return nil
}

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
