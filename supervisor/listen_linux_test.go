package supervisor

import (
	"net"
	"syscall"
	"testing"
)

// TestListenNoKeepAliveProbes: the loopback door's accepted connections have no TCP keep-alive
// (four system calls per connection saved; on loopback the kernel ends a connection when either
// process goes) and keep TCP_NODELAY (an answer written whole goes out at once).
func TestListenNoKeepAliveProbes(t *testing.T) {
	ln, err := Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var keepAlive, noDelay int
	var kerr, nerr error
	rc.Control(func(fd uintptr) {
		keepAlive, kerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		noDelay, nerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
	})
	if kerr != nil || nerr != nil {
		t.Fatal(kerr, nerr)
	}
	if keepAlive != 0 {
		t.Errorf("SO_KEEPALIVE = %d on an accepted connection, want 0", keepAlive)
	}
	if noDelay == 0 {
		t.Error("TCP_NODELAY is off on an accepted connection")
	}
}
