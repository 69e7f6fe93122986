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

// CheckOwn reports an error unless the other end of c is a socket owned by this process's
// effective uid: a loopback TCP connection (looked up with PeerUID) or a unix socket
// (UnixPeerUID).
func CheckOwn(c net.Conn) error {
	want := uint32(os.Geteuid())
	var got uint32
	var err error
	switch c := c.(type) {
	case *net.UnixConn:
		got, err = UnixPeerUID(c)
	default:
		local, lerr := netip.ParseAddrPort(c.LocalAddr().String())
		remote, rerr := netip.ParseAddrPort(c.RemoteAddr().String())
		if lerr != nil || rerr != nil {
			return fmt.Errorf("peercred: %v is not an IP connection", c.RemoteAddr())
		}
		got, err = PeerUID(local, remote)
	}
	if err != nil {
		return fmt.Errorf("peercred: cannot tell who runs %v: %w", c.RemoteAddr(), err)
	}
	if got != want {
		return fmt.Errorf("peercred: %v is %w (uid %d, not %d); refusing to talk to it", c.RemoteAddr(), ErrOtherUser, got, want)
	}
	return nil
}
