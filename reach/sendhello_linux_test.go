//go:build linux

package reach

import (
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// dialSending connects from src to dst and sends first, the way the kernel sends it: the
// socket's first data goes out right behind the handshake's last ACK, in the same segment,
// with no return to this process in between (TCP Fast Open's client side, RFC 7413: without a
// cookie from the server the data follows the handshake at once). The door, another machine's
// peer, then does not see the connection without its ClientHello for longer than the network
// takes. (The kernel holds that ACK back only until its delayed-ACK timer fires: a phone whose
// thread this machine's scheduler holds longer still sends its hello behind a bare ACK, rarely.)
// ok is false when the kernel does not offer it (then dial, then write).
func dialSending(src, dst netip.AddrPort, first []byte) (conn net.Conn, ok bool, err error) {
	if !src.Addr().Is4() || !dst.Addr().Is4() {
		return nil, false, nil
	}
	// A signal that interrupts the kernel's wait for the connection leaves the socket half
	// connected (a restarted call fails): that is the test's process, not the network, so the
	// phone starts again on a new socket.
	for range 3 {
		conn, ok, err = sendOnConnect(src, dst, first)
		if !ok || err == nil {
			break
		}
	}
	return conn, ok, err
}

// sendOnConnect is one attempt of dialSending's.
func sendOnConnect(src, dst netip.AddrPort, first []byte) (conn net.Conn, ok bool, err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.Addr().As4()}); err != nil {
		unix.Close(fd)
		return nil, true, err
	}
	// Blocking: the kernel waits for the handshake inside the call and sends first as soon as
	// it completes, delaying its ACK to go with it.
	to := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	n, err := unix.SendmsgN(fd, first, nil, to, unix.MSG_FASTOPEN)
	if err != nil {
		unix.Close(fd)
		if err == unix.EOPNOTSUPP {
			return nil, false, nil
		}
		return nil, true, err
	}
	f := os.NewFile(uintptr(fd), "phone")
	defer f.Close()
	if conn, err = net.FileConn(f); err != nil {
		return nil, true, err
	}
	if n < len(first) { // a signal cut the send short
		if _, err := conn.Write(first[n:]); err != nil {
			conn.Close()
			return nil, true, err
		}
	}
	return conn, true, nil
}
