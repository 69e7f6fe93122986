//go:build !linux

package peercred

import (
	"net"
	"net/netip"
)

// PeerUID returns the uid that owns the socket at the other end of a loopback TCP connection
// whose local address is local and remote address is remote (as seen by the server).
//
// On this platform it always fails with ErrPeerUIDUnsupported, so the caller fails closed.
func PeerUID(local, remote netip.AddrPort) (uint32, error) {
	return 0, ErrPeerUIDUnsupported
}

func stillConnected(c *net.TCPConn) error { return ErrPeerUIDUnsupported }

func acceptedOwner(local, remote netip.AddrPort) (uint32, bool, error) {
	return 0, false, ErrPeerUIDUnsupported
}

func listenerOwner(addr netip.AddrPort) (uint32, error) { return 0, ErrPeerUIDUnsupported }
