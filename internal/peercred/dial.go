package peercred

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
)

// ErrOtherUser says that the other end of a connection is run by another user.
var ErrOtherUser = errors.New("run by another user")

// DialOwn dials a loopback TCP address and returns the connection only when the server's socket
// is owned by this process's effective uid. A fleet client that is about to send the fleet token
// (or a console about to receive it) uses it so that the token never reaches a process of
// another user that took the port over. Use it as http.Transport.DialContext.
func DialOwn(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if err := CheckOwn(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ConnPeerUID returns the uid that owns the other end of c: a loopback TCP connection (PeerUID,
// then a check that c still holds its connection, so the answer is c's peer and not a later
// holder of the same addresses) or a unix socket (UnixPeerUID). Call it as soon as c is accepted
// or dialled.
func ConnPeerUID(c net.Conn) (uint32, error) {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn: the socket under it
		c = w.NetConn()
	}
	switch c := c.(type) {
	case *net.UnixConn:
		return UnixPeerUID(c)
	case *net.TCPConn:
		local, lerr := netip.ParseAddrPort(c.LocalAddr().String())
		remote, rerr := netip.ParseAddrPort(c.RemoteAddr().String())
		if lerr != nil || rerr != nil {
			return 0, fmt.Errorf("peercred: %v is not an IP connection", c.RemoteAddr())
		}
		uid, err := PeerUID(local, remote)
		if err != nil {
			return 0, err
		}
		if err := stillConnected(c); err != nil {
			return 0, fmt.Errorf("peercred: %w", err)
		}
		return uid, nil
	default:
		return 0, fmt.Errorf("peercred: cannot tell who is behind a %T", c)
	}
}

// CheckOwn reports an error unless the other end of c is a socket owned by this process's
// effective uid (ConnPeerUID).
func CheckOwn(c net.Conn) error {
	want := uint32(os.Geteuid())
	got, err := ConnPeerUID(c)
	if err != nil {
		return fmt.Errorf("peercred: cannot tell who runs %v: %w", c.RemoteAddr(), err)
	}
	if got != want {
		return fmt.Errorf("peercred: %v is %w (uid %d, not %d); refusing to talk to it", c.RemoteAddr(), ErrOtherUser, got, want)
	}
	return nil
}
