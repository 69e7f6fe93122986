package reach

import (
	"net"
	"syscall"
)

// stopListening makes ln's socket stop listening for every descriptor that shares it: on Linux,
// shutdown(2) of a listening socket closes it to new connections (the kernel refuses them),
// whereas closing one descriptor leaves the socket listening while another is open. Elsewhere it
// does what the system does (nothing, where shutdown of a listening socket is refused).
func stopListening(ln net.Listener) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RD) })
}
