//go:build linux

package peercred

// What the kernel and PeerUID say about real sockets of root (this test) and of a helper process
// of another uid: guards that document each case.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/otheruser"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a helper as another uid")
	}
}

// TestPeerUIDAfterResetNamesNextOwner: PeerUID names whoever owns the 4-tuple *now*. A peer that resets
// its connection (SO_LINGER 0) leaves the server a socket whose received bytes are still readable,
// but that is no longer hashed, so a new connection from the same ip:port — by any uid — is what
// the kernel finds under those addresses. ConnPeerUID and CheckOwn therefore confirm, after the
// lookup, that the connection's own socket still holds the tuple (TCP_INFO state), and callers
// judge at Accept.
func TestPeerUIDAfterResetNamesNextOwner(t *testing.T) {
	needRoot(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := otheruser.FreePort(t)
	h := startOtherUser(t, fmt.Sprintf("rst %d %s", port, ln.Addr()), nil)
	h.Expect(t, "SENT")
	old, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	l, r := procNetAddrs(old)
	if uid, err := PeerUID(l, r); err != nil || uid != otheruser.UID {
		t.Fatalf("before the reset: %d %v, want %d", uid, err, otheruser.UID)
	}
	h.Say(t, "go")
	h.Expect(t, "RST")
	h.Wait(t)
	dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	next, err := dl.Dial("tcp4", ln.Addr().String()) // root, from the freed port
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	line, _ := bufio.NewReader(old).ReadString('\n')
	t.Logf("the reset connection still reads %q", line)
	// PeerUID alone answers for an address pair, whoever holds it now; ConnPeerUID answers for
	// the connection, and knows that it is gone.
	if uid, err := ConnPeerUID(old); err == nil {
		t.Errorf("ConnPeerUID of the reset connection = %d (the new socket's owner), want an error", uid)
	}
	if CheckOwn(old) == nil {
		t.Errorf("CheckOwn of a connection uid %d opened and reset: nil (judged as this user's)", otheruser.UID)
	}
}

// TestDialOwnBeforeAccept: a connection that the server has not accept()ed yet has no inode, so
// DialOwn judges the listening socket until the accept (see TestDialOwnSlowAcceptIsNotDown): a
// console slow to accept is not "peer socket not found", nor marked down.
func TestDialOwnBeforeAccept(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		time.Sleep(100 * time.Millisecond) // a busy server
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := DialOwn(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("DialOwn to this user's own (slow-to-accept) server: %v", err)
	}
	c.Close()
}

// ---- Guards --------------------------------------------------------------------------------------

// While this user listens on 127.0.0.1:P, another uid cannot bind P on any address that would
// take its connections — 127.0.0.1, 0.0.0.0, dual-stack [::], ::ffff:127.0.0.1 — with SO_REUSEADDR
// and SO_REUSEPORT, not even when this user's listener set SO_REUSEPORT itself (the kernel keeps
// a reuseport group to one uid). [::1]:P is a different socket address and is free to take: a
// client must dial the literal it means (see the next test).
func TestOtherUserCannotShareThePort(t *testing.T) {
	needRoot(t)
	for _, reuseport := range []bool{false, true} {
		t.Run(fmt.Sprintf("our SO_REUSEPORT=%v", reuseport), func(t *testing.T) {
			lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
				if !reuseport {
					return nil
				}
				var serr error
				c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1) })
				return serr
			}}
			ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			p := ln.Addr().(*net.TCPAddr).Port
			h := startOtherUser(t, "bind "+strconv.Itoa(p), nil)
			got := map[string]string{}
			for i := 0; i < 5; i++ {
				f := strings.Fields(h.Expect(t, "BIND "))
				got[f[1]] = f[2]
			}
			for _, a := range []string{"127.0.0.1", "0.0.0.0", "[::]", "[::ffff:127.0.0.1]"} {
				if got[a] != "refused" {
					t.Errorf("uid %d bound %s:%d beside our 127.0.0.1 listener: %s", otheruser.UID, a, p, got[a])
				}
			}
			t.Logf("[::1]:%d: %s", p, got["[::1]"])
		})
	}
}

// DialOwn refuses every server of another uid however the address is spelled: ::1 held by
// another user beside our 127.0.0.1, a v4-mapped literal, 127.0.0.2.
func TestDialOwnSpellings(t *testing.T) {
	needRoot(t)
	for _, addr := range []string{"[::1]:0", "127.0.0.1:0", "127.0.0.2:0"} {
		h := startOtherUser(t, "listen "+addr, nil)
		port := strings.TrimSpace(strings.TrimPrefix(h.Expect(t, "PORT "), "PORT "))
		host, _, _ := net.SplitHostPort(addr)
		dials := []string{net.JoinHostPort(host, port)}
		if host == "127.0.0.1" {
			dials = append(dials, "[::ffff:127.0.0.1]:"+port)
		}
		for _, d := range dials {
			c, err := DialOwn(context.Background(), "tcp", d)
			if err == nil {
				c.Close()
				t.Errorf("DialOwn(%s) to uid %d's listener: connected", d, otheruser.UID)
			} else if !errors.Is(err, ErrOtherUser) {
				t.Logf("DialOwn(%s): %v (refused, not as ErrOtherUser)", d, err)
			}
		}
	}
}

// The socket that accept() returns is owned by the process that called accept() (sock_graft
// copies the new socket inode's uid), not by whoever created the listener: a listener made by
// this user but handed to another uid's process (fd passing, socket activation) answers as that
// other uid, and DialOwn refuses it. DialOwn's promise is "the process that accepted the
// connection runs as this user".
func TestAcceptedSocketOwnerIsAcceptor(t *testing.T) {
	needRoot(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := startOtherUser(t, "servefd", func(cmd *exec.Cmd) { cmd.ExtraFiles = []*os.File{f} })
	h.Expect(t, "READY")
	addr := fmt.Sprintf("127.0.0.1:%d", filePort(t, f))
	c, err := DialOwn(context.Background(), "tcp", addr)
	if err == nil {
		c.Close()
		t.Fatalf("DialOwn to our listener accepted by uid %d: connected", otheruser.UID)
	}
	if !errors.Is(err, ErrOtherUser) {
		t.Fatalf("DialOwn to our listener accepted by uid %d: %v, want ErrOtherUser", otheruser.UID, err)
	}
}

// A peer that half-closes (shutdown SHUT_WR) keeps its uid; one that closes its socket leaves an
// orphan (inode 0) that PeerUID never reads as anyone — in particular never as the uid 0 the kernel
// prints for TIME_WAIT entries.
func TestPeerUIDHalfClosedAndOrphaned(t *testing.T) {
	needRoot(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h := startOtherUser(t, "fin "+ln.Addr().String(), nil)
	h.Expect(t, "CONNECTED")
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, r := procNetAddrs(c)
	h.Say(t, "half")
	h.Expect(t, "HALF")
	if uid, err := PeerUID(l, r); err != nil || uid != otheruser.UID {
		t.Errorf("half-closed peer: %d %v, want %d", uid, err, otheruser.UID)
	}
	h.Say(t, "close")
	h.Expect(t, "CLOSED")
	if uid, err := PeerUID(l, r); err == nil {
		t.Errorf("orphaned peer (closed, FIN_WAIT2 or TIME_WAIT): uid %d, want an error", uid)
	}
}

// ---- helpers ------------------------------------------------------------------------------------

// filePort is the port of a listening socket held as a file.
func filePort(t *testing.T, f *os.File) int {
	t.Helper()
	sa, err := syscall.Getsockname(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// startOtherUser starts TestPeerCredOtherUserHelperProcess as otheruser.UID; more, if not nil, may change
// the command first.
func startOtherUser(t *testing.T, mode string, more func(*exec.Cmd)) *otheruser.Helper {
	t.Helper()
	return otheruser.Start(t, "^TestPeerCredOtherUserHelperProcess$", "FLEET_PEERCRED_HELPER", mode, more)
}

// TestPeerCredOtherUserHelperProcess is the other-uid side of the tests above.
//
//	rst PORT ADDR: from 127.0.0.1:PORT connect to ADDR, write a line, print SENT; after a line on
//	               stdin reset the connection (SO_LINGER 0) and print RST
//	fin ADDR:      connect, print CONNECTED; on "half" shut down writing, print HALF; on "close"
//	               close, print CLOSED; wait for stdin to end
//	bind P:        try to listen on P at 127.0.0.1, 0.0.0.0, [::], [::ffff:127.0.0.1], [::1] with
//	               SO_REUSEADDR and SO_REUSEPORT; print "BIND <addr> ok|refused" for each
//	listen ADDR:   listen on ADDR, print PORT <port>, accept and hold until stdin ends
//	servefd:       accept on the listener passed as fd 3, print READY, hold until stdin ends
func TestPeerCredOtherUserHelperProcess(t *testing.T) {
	mode := os.Getenv("FLEET_PEERCRED_HELPER")
	if mode == "" {
		return
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "helper:", err); os.Exit(1) }
	f := strings.Fields(mode)
	stdin := bufio.NewReader(os.Stdin)
	hold := func(ln net.Listener) {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { io.Copy(io.Discard, c); c.Close() }()
			}
		}()
		io.Copy(io.Discard, stdin)
	}
	switch f[0] {
	case "rst":
		port, _ := strconv.Atoi(f[1])
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
		c, err := dl.Dial("tcp4", f[2])
		if err != nil {
			fail(err)
		}
		io.WriteString(c, "GET /whoami HTTP/1.1\r\n")
		fmt.Println("SENT")
		stdin.ReadString('\n')
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		fmt.Println("RST")
	case "fin":
		c, err := net.Dial("tcp4", f[1])
		if err != nil {
			fail(err)
		}
		fmt.Println("CONNECTED")
		stdin.ReadString('\n')
		c.(*net.TCPConn).CloseWrite()
		fmt.Println("HALF")
		stdin.ReadString('\n')
		c.Close()
		time.Sleep(50 * time.Millisecond)
		fmt.Println("CLOSED")
		io.Copy(io.Discard, stdin)
	case "bind":
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			c.Control(func(fd uintptr) {
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1)
			})
			return nil
		}}
		for _, a := range []struct{ network, host string }{{"tcp4", "127.0.0.1"}, {"tcp4", "0.0.0.0"}, {"tcp", "[::]"}, {"tcp6", "[::ffff:127.0.0.1]"}, {"tcp6", "[::1]"}} {
			ln, err := lc.Listen(context.Background(), a.network, a.host+":"+f[1])
			if err != nil {
				fmt.Printf("BIND %s refused\n", a.host)
				continue
			}
			fmt.Printf("BIND %s ok\n", a.host)
			ln.Close()
		}
	case "listen":
		ln, err := net.Listen("tcp", f[1])
		if err != nil {
			fail(err)
		}
		fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
		hold(ln)
	case "servefd":
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			fail(err)
		}
		fmt.Println("READY")
		hold(ln)
	}
	os.Exit(0)
}
