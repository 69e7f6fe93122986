package peercred

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"
)

// ErrOtherUser says that the other end of a connection is run by another user.
var ErrOtherUser = errors.New("run by another user")

// DialOwn dials a loopback TCP address (or a unix socket) and returns the connection only when
// the server is run by this process's effective uid. A fleet client that is about to send the
// fleet token (or a console about to receive it) uses it so that the token never reaches a
// process of another user that took the port over. Use it as http.Transport.DialContext.
//
// For TCP it judges, at every dial (no verdict is kept: another user may take a dead server's
// port at any time):
//
//   - the listening socket that holds the connection: another user's is ErrOtherUser at once;
//   - the server's end of the connection once it is accepted: the process that called accept()
//     owns it, and another user's is ErrOtherUser. DialOwn waits for the accept, polling, until
//     ctx's deadline (dialAcceptWait without one); a server still not accepting by then is judged
//     by its listener alone, so a slow server is never refused for being slow.
//
// Any lookup error fails closed; a connection that the server reset while it was judged is an
// error too. If ctx is cancelled while DialOwn waits, it returns ctx.Err().
func DialOwn(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if err := checkServer(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// dialAcceptWait bounds how long DialOwn waits for the server to accept when ctx has no
// deadline.
var dialAcceptWait = 3 * time.Second

// dialSpin is how long DialOwn looks again at once (yielding the processor between looks)
// before it sleeps between looks: a server that is not busy accepts within microseconds, and a
// sleep lasts a millisecond at least.
const dialSpin = 200 * time.Microsecond

// dialPoll is the sleep before each new look at a connection the server has not accepted yet,
// after dialSpin; the last step repeats.
var dialPoll = []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}

// checkServer is DialOwn's judgement of the server at the other end of the freshly dialled c.
func checkServer(ctx context.Context, c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return CheckOwn(c)
	}
	local, lok := AddrPort(tc.LocalAddr())
	remote, rok := AddrPort(tc.RemoteAddr())
	if !lok || !rok {
		return fmt.Errorf("peercred: %v is not an IP connection", tc.RemoteAddr())
	}
	local, remote = procNetNormalize(local), procNetNormalize(remote)
	if !remote.Addr().IsLoopback() || !local.Addr().IsLoopback() {
		return fmt.Errorf("peercred: cannot tell who runs %v: not a loopback connection", remote)
	}
	want := uint32(os.Geteuid())
	other := func(what string, uid uint32) error {
		return fmt.Errorf("peercred: %v is %w (%s of uid %d, not %d); refusing to talk to it", remote, ErrOtherUser, what, uid, want)
	}
	start := time.Now()
	stop := start.Add(dialAcceptWait)
	if dl, ok := ctx.Deadline(); ok {
		stop = dl
	}
	for slept := 0; ; {
		uid, accepted, err := acceptedOwner(local, remote)
		if err != nil {
			return fmt.Errorf("peercred: cannot tell who runs %v: %w", remote, err)
		}
		if accepted {
			if uid != want {
				return other("accepted by a process", uid)
			}
			if err := stillConnected(tc); err != nil {
				return fmt.Errorf("peercred: %v: %w", remote, err)
			}
			return nil
		}
		// Not accepted yet: the connection waits in the queue of the socket listening there.
		uid, err = listenerOwner(remote)
		if err != nil {
			return fmt.Errorf("peercred: cannot tell who listens on %v: %w", remote, err)
		}
		if uid != want {
			return other("listening socket", uid)
		}
		if err := stillConnected(tc); err != nil {
			return fmt.Errorf("peercred: %v: %w", remote, err)
		}
		left := time.Until(stop)
		if left <= 0 {
			return nil // still not accepted: the listener is this user's
		}
		if time.Since(start) < dialSpin && ctx.Err() == nil {
			runtime.Gosched()
			continue
		}
		t := time.NewTimer(min(dialPoll[min(slept, len(dialPoll)-1)], left))
		slept++
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err()
			}
			stop = time.Now() // one last look, then the listener decides
		}
	}
}

// AddrPort returns a TCP address as netip has it, an IPv4 address unmapped — what
// netip.ParseAddrPort makes of a.String(), without making the string. ok is false when a is not
// a TCP address with an IP.
func AddrPort(a net.Addr) (ap netip.AddrPort, ok bool) {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap = t.AddrPort()
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	return ap, ap.Addr().IsValid()
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
		local, lok := AddrPort(c.LocalAddr())
		remote, rok := AddrPort(c.RemoteAddr())
		if !lok || !rok {
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
