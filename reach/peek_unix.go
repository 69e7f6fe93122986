//go:build unix

package reach

import (
	"net"
	"syscall"
)

// peekPending copies into buf the bytes that have arrived on raw and that nobody has read yet,
// without taking them (MSG_PEEK) and without waiting: the kernel's answer, at eviction time, to
// whether a connection's ClientHello has arrived (R6d). It never blocks a read in progress on
// raw: it takes no read lock of the runtime's, only the descriptor.
func peekPending(raw net.Conn, buf []byte) []byte {
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	n := 0
	rc.Control(func(fd uintptr) {
		m, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == nil && m > 0 {
			n = m
		}
	})
	return buf[:n]
}
