//go:build linux

package peercred

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// peerBackoff is how long PeerUID waits before each new look when the peer's socket is not
// (yet) owned: a server's end of a fresh connection has no inode until the server accept()s it,
// and /proc is not read atomically. About a quarter of a second in all, then an error.
var peerBackoff = []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 170 * time.Millisecond}

// procNetMaxBytes bounds how much of one /proc/net/tcp{,6} table is read (about 220,000 sockets,
// a few hundred milliseconds): past it the lookup fails closed. It is only read where netlink is
// refused. A busy machine holds tens of thousands of TIME_WAIT sockets; 4 MiB is too small there.
var procNetMaxBytes int64 = 32 << 20

// PeerUID returns the uid that owns the socket at the other end of a loopback TCP connection
// whose local address is local and remote address is remote (as seen by the server).
//
// It asks the kernel for that one socket by its addresses (netlink sock_diag), or, where this
// process may not use netlink, reads /proc/net/tcp{,6} (bounded: a table larger than 4 MiB is
// ErrProcNetTooLarge).
//
// It fails closed: local must be a loopback address (so that the peer is a socket of this
// network namespace); the socket must be live and held by a process (inode not 0), and its uid
// valid; with /proc, exactly one uid must own a matching socket. Anything else is an error,
// never a uid. IPv4-mapped IPv6 addresses match their IPv4 form.
func PeerUID(local, remote netip.AddrPort) (uint32, error) {
	local, remote = procNetNormalize(local), procNetNormalize(remote)
	if !local.IsValid() || !remote.IsValid() || local.Port() == 0 || remote.Port() == 0 {
		return 0, fmt.Errorf("peercred: peer uid of %v <- %v: invalid address", local, remote)
	}
	if !local.Addr().IsLoopback() {
		return 0, fmt.Errorf("peercred: peer uid of %v <- %v: local address is not loopback", local, remote)
	}
	why := ErrPeerUIDNotFound
	for _, wait := range peerBackoff {
		time.Sleep(wait)
		f, err := diagPeer(local, remote)
		if errors.Is(err, errNetlinkRefused) {
			return procNetPeerUID(local, remote)
		}
		if errors.Is(err, errDiagNotFound) {
			break // one hash lookup: no socket is the peer
		}
		if err != nil {
			return 0, fmt.Errorf("peercred: peer uid of %v <- %v: %w", local, remote, err)
		}
		uid, err := peerVerdict(f)
		if errors.Is(err, errNotAccepted) {
			why = err // look again
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("peercred: peer uid of %v <- %v: %w", local, remote, err)
		}
		return uid, nil
	}
	return 0, fmt.Errorf("peercred: peer uid of %v <- %v: %w", local, remote, why)
}

// peerVerdict turns what the kernel says about the peer's socket into a uid, or an error: a uid
// only for a live socket that a process holds (inode not 0), never the invalid uid; errNotAccepted
// for a connection that its server has not accepted yet.
func peerVerdict(f sockFact) (uint32, error) {
	switch {
	case f.inode != 0 && tcpLiveState(f.state) && f.uid != procNetInvalidUID:
		return f.uid, nil
	case f.inode == 0 && (f.state == tcpEstablished || f.state == tcpSynRecv || f.state == tcpNewSynRecv):
		return 0, errNotAccepted
	case f.inode != 0 && f.uid == procNetInvalidUID:
		return 0, errors.New("the peer's socket has no valid uid")
	default:
		return 0, fmt.Errorf("%w (TCP state %d, no process holds it)", ErrPeerUIDNotFound, f.state)
	}
}

// errNotAccepted says that the peer's socket exists but no process holds it yet.
var errNotAccepted = fmt.Errorf("%w: the server has not accepted the connection yet", ErrPeerUIDNotFound)

// procNetPeerUID is PeerUID from /proc/net/tcp{,6}, for a process that may not use netlink.
func procNetPeerUID(local, remote netip.AddrPort) (uint32, error) {
	for _, wait := range peerBackoff {
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

// procNetLookup searches every table in procNetFiles once for the peer of local <- remote.
func procNetLookup(local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	return procNetSearch(func(r io.Reader) (uint32, bool, error) { return parseProcNetTCP(r, local, remote) })
}

// procNetListener searches every table in procNetFiles once for the listener of addr.
func procNetListener(addr netip.AddrPort) (uid uint32, found bool, err error) {
	return procNetSearch(func(r io.Reader) (uint32, bool, error) { return parseProcNetListen(r, addr) })
}

// procNetSearch runs parse over every table in procNetFiles, each read up to procNetMaxBytes. A
// table that does not exist (tcp6 with IPv6 disabled) lists no socket and is skipped; one that
// cannot be read, or is larger than the bound, is an error; different uids across tables are
// ErrPeerUIDAmbiguous.
func procNetSearch(parse func(io.Reader) (uint32, bool, error)) (uid uint32, found bool, err error) {
	read := 0
	for _, name := range procNetFiles {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		lr := &io.LimitedReader{R: f, N: procNetMaxBytes + 1}
		u, ok, err := parse(lr)
		f.Close()
		if err == nil && lr.N <= 0 {
			err = ErrProcNetTooLarge
		}
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

// stillConnected reports an error unless c's own socket still holds its connection (TCP state
// ESTABLISHED or CLOSE_WAIT, from TCP_INFO). Checked after PeerUID, it proves that the peer found
// was the peer of c: while c's socket holds the address pair, no other connection can take it, so
// a peer that reset its connection cannot hand its addresses to someone else's.
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
	if info.State != tcpEstablished && info.State != tcpCloseWait {
		return fmt.Errorf("the connection closed while its peer was looked up (TCP state %d)", info.State)
	}
	return nil
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

// acceptedOwner returns the uid of the process that accepted the server's end of a connection
// that the client sees as local -> remote; accepted is false while no process holds that end
// (not accepted yet, or gone).
func acceptedOwner(local, remote netip.AddrPort) (uid uint32, accepted bool, err error) {
	f, err := diagPeer(local, remote)
	if errors.Is(err, errNetlinkRefused) {
		uid, found, err := procNetLookup(local, remote) // an un-accepted end is not listed
		return uid, found, err
	}
	if errors.Is(err, errDiagNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	uid, err = peerVerdict(f)
	if errors.Is(err, ErrPeerUIDNotFound) { // not accepted yet, or gone: the listener decides
		return 0, false, nil
	}
	return uid, err == nil, err
}

// listenerOwner returns the uid that owns the socket listening for connections to addr (bound
// to addr or to a wildcard address that covers it).
func listenerOwner(addr netip.AddrPort) (uint32, error) {
	f, err := diagListener(addr)
	if errors.Is(err, errNetlinkRefused) {
		uid, found, err := procNetListener(addr)
		if err == nil && !found {
			err = ErrPeerUIDNotFound
		}
		return uid, err
	}
	if errors.Is(err, errDiagNotFound) {
		return 0, ErrPeerUIDNotFound
	}
	if err != nil {
		return 0, err
	}
	if f.inode == 0 || f.uid == procNetInvalidUID {
		return 0, errors.New("the listening socket has no owner")
	}
	return f.uid, nil
}
