//go:build linux

package reach

import (
	"net"
	"net/netip"
	"os"
	"syscall"
)

// dialSending connects from src to dst and sends first, the way the kernel sends it: the
// socket's first data goes out right behind the handshake's last ACK, in the same segment,
// with no return to this process in between (TCP Fast Open's client side, RFC 7413: without a
// cookie from the server the data follows the handshake at once). The door, another machine's
// peer, then never sees the connection without its ClientHello for longer than the network
// takes. ok is false when the kernel does not offer it (then dial, then write).
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
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: src.Addr().As4()}); err != nil {
		syscall.Close(fd)
		return nil, true, err
	}
	// Blocking: the kernel waits for the handshake inside the call and sends first as soon as
	// it completes, delaying its ACK to go with it.
	to := &syscall.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	if err := syscall.Sendto(fd, first, syscall.MSG_FASTOPEN, to); err != nil {
		syscall.Close(fd)
		if err == syscall.EOPNOTSUPP {
			return nil, false, nil
		}
		return nil, true, err
	}
	f := os.NewFile(uintptr(fd), "phone")
	defer f.Close()
	conn, err = net.FileConn(f)
	return conn, true, err
}
