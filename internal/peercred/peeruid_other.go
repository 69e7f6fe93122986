//go:build !linux && !darwin

package peercred

import "net"

// UnixPeerUID returns the uid of the process at the other end of a unix-socket connection.
//
// On this platform it always fails with ErrPeerUIDUnsupported, so the caller fails closed.
func UnixPeerUID(c *net.UnixConn) (uint32, error) {
	return 0, ErrPeerUIDUnsupported
}
