//go:build darwin

package peercred

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// xucredVersion is XUCRED_VERSION (sys/ucred.h): the only layout of struct xucred.
const xucredVersion = 0

// UnixPeerUID returns the uid of the process at the other end of a unix-socket connection
// (LOCAL_PEERCRED: the effective uid the peer had when it connected, or, for the client end,
// when the server called listen). It fails closed: no credentials, an unknown xucred version,
// or the invalid uid 4294967295, is an error.
func UnixPeerUID(c *net.UnixConn) (uint32, error) {
	if c == nil {
		return 0, errors.New("peercred: unix peer uid: nil connection")
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peercred: unix peer uid: %w", err)
	}
	var cred *unix.Xucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peercred: unix peer uid: %w", err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("peercred: unix peer uid: LOCAL_PEERCRED: %w", credErr)
	}
	if cred == nil || cred.Version != xucredVersion {
		return 0, errors.New("peercred: unix peer uid: peer has no credentials")
	}
	if cred.Uid == procNetInvalidUID {
		return 0, errors.New("peercred: unix peer uid: peer has no valid uid")
	}
	return cred.Uid, nil
}
