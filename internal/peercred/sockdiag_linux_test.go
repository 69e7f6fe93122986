//go:build linux

package peercred

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/otheruser"

	"golang.org/x/sys/unix"
)

// refuseNetlink makes every lookup find NETLINK_SOCK_DIAG refused (as under a systemd unit
// without AF_NETLINK) until the test ends.
func refuseNetlink(t testing.TB) {
	t.Helper()
	oldOpen, oldPooling := diagOpen, diagPooling
	diagOpen = func() (int, error) { return -1, unix.EAFNOSUPPORT }
	diagPooling = false
	diagDrain()
	t.Cleanup(func() { diagOpen, diagPooling = oldOpen, oldPooling })
}

func diagDrain() {
	for {
		select {
		case fd := <-diagPool:
			unix.Close(fd)
		default:
			return
		}
	}
}

// sockInode is the inode of the socket behind c (what sock_diag and /proc report for it).
func sockInode(t testing.TB, c syscall.Conn) uint64 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	var serr error
	rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) })
	if serr != nil {
		t.Fatal(serr)
	}
	return st.Ino
}

// procNetDialPair is procNetAcceptPair that also returns the client's end.
func procNetDialPair(t testing.TB, listenNet, listenAddr, dialNet, dialHost string) (server, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen(listenNet, listenAddr)
	if err != nil {
		t.Skipf("cannot listen on %s %s: %v", listenNet, listenAddr, err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial(dialNet, net.JoinHostPort(dialHost, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		t.Skipf("cannot dial %s: %v", dialNet, err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// waitState waits (bounded) until the socket local -> remote is in TCP state st, as the kernel
// moves a closed connection along; it fails the test if it never is.
func waitState(t *testing.T, local, remote netip.AddrPort, st uint8) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if f, err := diagPeer(remote, local); err == nil && f.state == st {
			return
		}
	}
	t.Fatalf("socket %v -> %v never reached TCP state %d", local, remote, st)
}

// The peer of a loopback connection is found by its exact addresses, in both families and across
// them (a v4 connection on a dual-stack socket is v4-mapped on one side only), and is the very
// socket the other end holds (same inode). Asked in the other family (v4 as v4-mapped AF_INET6),
// the kernel finds the same socket.
func TestSockDiagPeerIsTheSocketAtTheOtherEnd(t *testing.T) {
	euid := uint32(os.Geteuid())
	for _, tt := range []struct {
		name                           string
		listenNet, listenAddr, dialNet string
		dialHost                       string
	}{
		{"v4", "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1"},
		{"v6", "tcp6", "[::1]:0", "tcp6", "::1"},
		{"v4 to a dual-stack listener (mapped server end)", "tcp", "[::]:0", "tcp4", "127.0.0.1"},
		{"dual-stack client to a v4 listener (mapped client end)", "tcp4", "127.0.0.1:0", "tcp", "::ffff:127.0.0.1"},
		{"v4 to a 0.0.0.0 listener", "tcp4", "0.0.0.0:0", "tcp4", "127.0.0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			server, client := procNetDialPair(t, tt.listenNet, tt.listenAddr, tt.dialNet, tt.dialHost)
			local, remote := procNetAddrs(server)
			f, err := diagPeer(local, remote)
			if err != nil || f.uid != euid || f.inode != sockInode(t, client) || f.state != tcpEstablished {
				t.Fatalf("diagPeer(%v, %v) = %+v, %v; want the client's socket (inode %d, uid %d)", local, remote, f, err, sockInode(t, client), euid)
			}
			if uid, err := PeerUID(local, remote); err != nil || uid != euid {
				t.Fatalf("PeerUID = %d, %v; want %d", uid, err, euid)
			}
			// And the other way round: the client finds the server's accepted end.
			cl, cr := procNetAddrs(client)
			if f, err := diagPeer(cl, cr); err != nil || f.inode != sockInode(t, server) {
				t.Fatalf("diagPeer from the client = %+v, %v; want the server's socket (inode %d)", f, err, sockInode(t, server))
			}
			if n := procNetNormalize(remote); n.Addr().Is4() {
				f6, _, _, err := diagLookup(unix.AF_INET6, n, procNetNormalize(local))
				if err != nil || f6.inode != f.inode {
					t.Fatalf("asked as v4-mapped AF_INET6: %+v, %v; want inode %d", f6, err, f.inode)
				}
			}
		})
	}
}

// Fail closed: a socket that no process holds is nobody's, whatever uid the kernel reports.
func TestSockDiagNoOwnerIsNoUID(t *testing.T) {
	t.Run("peer reset before the lookup: no socket", func(t *testing.T) {
		server, client := procNetDialPair(t, "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1")
		local, remote := procNetAddrs(server)
		client.SetLinger(0)
		client.Close()
		if f, err := diagPeer(local, remote); !errors.Is(err, errDiagNotFound) {
			t.Fatalf("diagPeer after a reset = %+v, %v; want errDiagNotFound", f, err)
		}
		if uid, err := PeerUID(local, remote); !errors.Is(err, ErrPeerUIDNotFound) {
			t.Fatalf("PeerUID after a reset = %d, %v; want ErrPeerUIDNotFound", uid, err)
		}
	})
	t.Run("peer closed: orphaned FIN_WAIT2", func(t *testing.T) {
		server, client := procNetDialPair(t, "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1")
		local, remote := procNetAddrs(server)
		client.Close()
		waitState(t, remote, local, tcpFinWait2)
		if uid, err := PeerUID(local, remote); err == nil {
			t.Fatalf("PeerUID of an orphan = %d; want an error", uid)
		}
	})
	t.Run("TIME_WAIT", func(t *testing.T) {
		server, client := procNetDialPair(t, "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1")
		local, remote := procNetAddrs(server)
		client.Close()
		waitState(t, remote, local, tcpFinWait2)
		server.Close()
		waitState(t, remote, local, tcpTimeWait)
		if uid, err := PeerUID(local, remote); err == nil {
			t.Fatalf("PeerUID of a TIME_WAIT socket = %d (the kernel reports uid 0); want an error", uid)
		}
	})
	t.Run("not accepted yet: no uid until accept", func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cl, cr := procNetAddrs(c)
		f, err := diagPeer(cl, cr)
		if err != nil || f.inode != 0 {
			t.Fatalf("server end before accept = %+v, %v; want a socket without inode", f, err)
		}
		if uid, err := peerVerdict(f); !errors.Is(err, errNotAccepted) {
			t.Fatalf("verdict before accept = %d, %v; want errNotAccepted", uid, err)
		}
	})
}

// peerVerdict gives a uid only for a live socket that a process holds.
func TestSockDiagVerdictFailsClosed(t *testing.T) {
	for _, tt := range []struct {
		name string
		f    sockFact
		ok   bool
	}{
		{"established, owned", sockFact{tcpEstablished, 1000, 7}, true},
		{"close-wait, owned", sockFact{tcpCloseWait, 1000, 7}, true},
		{"root, owned", sockFact{tcpEstablished, 0, 7}, true},
		{"inode 0 established (not accepted)", sockFact{tcpEstablished, 1000, 0}, false},
		{"TIME_WAIT uid 0 inode 0", sockFact{tcpTimeWait, 0, 0}, false},
		{"orphan FIN_WAIT1", sockFact{tcpFinWait1, 0, 0}, false},
		{"invalid uid", sockFact{tcpEstablished, procNetInvalidUID, 7}, false},
		{"a listener is no peer", sockFact{tcpListen, 1000, 7}, false},
		{"SYN_RECV", sockFact{tcpNewSynRecv, 0, 0}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			uid, err := peerVerdict(tt.f)
			if tt.ok != (err == nil) || (tt.ok && uid != tt.f.uid) || (!tt.ok && uid != 0) {
				t.Fatalf("peerVerdict(%+v) = %d, %v; want ok=%v", tt.f, uid, err, tt.ok)
			}
		})
	}
}

// The listener of an address is the socket that would accept a connection to it: bound to the
// address or to a wildcard covering it, never a v6-only socket for a v4 address.
func TestSockDiagListenerCoversWildcards(t *testing.T) {
	for _, tt := range []struct {
		name, network, listen, ask string
		found                      bool
	}{
		{"127.0.0.1", "tcp4", "127.0.0.1:0", "127.0.0.1", true},
		{"0.0.0.0 serves 127.0.0.1", "tcp4", "0.0.0.0:0", "127.0.0.1", true},
		{"0.0.0.0 serves 127.0.0.2", "tcp4", "0.0.0.0:0", "127.0.0.2", true},
		{"dual-stack :: serves 127.0.0.1", "tcp", "[::]:0", "127.0.0.1", true},
		{"dual-stack :: serves ::ffff:127.0.0.1", "tcp", "[::]:0", "::ffff:127.0.0.1", true},
		{"dual-stack :: serves ::1", "tcp", "[::]:0", "::1", true},
		{"::1", "tcp6", "[::1]:0", "::1", true},
		{"v6-only :: does not serve 127.0.0.1", "tcp6", "[::]:0", "127.0.0.1", false},
		{"127.0.0.1 does not serve ::1", "tcp4", "127.0.0.1:0", "::1", false},
		{"127.0.0.1 does not serve 127.0.0.2", "tcp4", "127.0.0.1:0", "127.0.0.2", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen(tt.network, tt.listen)
			if err != nil {
				t.Skipf("cannot listen: %v", err)
			}
			defer ln.Close()
			addr := netip.AddrPortFrom(netip.MustParseAddr(tt.ask), uint16(ln.Addr().(*net.TCPAddr).Port))
			f, err := diagListener(addr)
			if !tt.found {
				if !errors.Is(err, errDiagNotFound) {
					t.Fatalf("diagListener(%v) = %+v, %v; want errDiagNotFound", addr, f, err)
				}
				return
			}
			if err != nil || f.inode != sockInode(t, ln.(*net.TCPListener)) || f.uid != uint32(os.Geteuid()) || f.state != tcpListen {
				t.Fatalf("diagListener(%v) = %+v, %v; want the listener (inode %d)", addr, f, err, sockInode(t, ln.(*net.TCPListener)))
			}
		})
	}
	t.Run("no listener", func(t *testing.T) {
		addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(otheruser.FreePort(t)))
		if f, err := diagListener(addr); !errors.Is(err, errDiagNotFound) {
			t.Fatalf("diagListener(%v) = %+v, %v; want errDiagNotFound", addr, f, err)
		}
	})
}

// Lookups run at once from many goroutines each get their own connection's peer (netlink
// sockets are not shared between concurrent lookups; replies are matched by sequence number),
// and no more than diagPoolSize netlink sockets stay open.
func TestSockDiagConcurrentLookups(t *testing.T) {
	type pair struct {
		local, remote netip.AddrPort
		inode         uint64
	}
	var pairs []pair
	for range 8 {
		server, client := procNetDialPair(t, "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1")
		l, r := procNetAddrs(server)
		pairs = append(pairs, pair{l, r, sockInode(t, client)})
	}
	diagDrain()
	before := openFDs(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				p := pairs[(g+i)%len(pairs)]
				f, err := diagPeer(p.local, p.remote)
				if err != nil || f.inode != p.inode {
					errs <- fmt.Errorf("diagPeer(%v, %v) = %+v, %v; want inode %d", p.local, p.remote, f, err, p.inode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if after := openFDs(t); after > before+diagPoolSize {
		t.Errorf("%d open files after the lookups, %d before: netlink sockets leak", after, before)
	}
}

// Where netlink is refused (EAFNOSUPPORT: RestrictAddressFamilies=; EPERM: seccomp), PeerUID
// reads /proc instead: the answer below exists only in the sample tables. Any other netlink
// error fails closed and does not fall back.
func TestPeerUIDProcFallbackOnlyWhenNetlinkRefused(t *testing.T) {
	procNetSkipBigEndian(t)
	for _, errno := range []unix.Errno{unix.EAFNOSUPPORT, unix.EPERM, unix.EPROTONOSUPPORT, unix.EACCES} {
		t.Run(errno.Error(), func(t *testing.T) {
			procNetUseFiles(t, procNetSampleV4, procNetHeader6)
			diagOpen = func() (int, error) { return -1, errno }
			if uid, err := PeerUID(procNetServer4, procNetClient4); err != nil || uid != 997 {
				t.Fatalf("PeerUID = %d, %v; want 997 from /proc", uid, err)
			}
		})
	}
	for _, errno := range []unix.Errno{unix.EMFILE, unix.ENOBUFS} {
		t.Run(errno.Error()+" fails closed", func(t *testing.T) {
			procNetUseFiles(t, procNetSampleV4, procNetHeader6)
			diagOpen = func() (int, error) { return -1, errno }
			if uid, err := PeerUID(procNetServer4, procNetClient4); err == nil || !errors.Is(err, errno) {
				t.Fatalf("PeerUID = %d, %v; want the netlink error, not /proc's answer", uid, err)
			}
		})
	}
	t.Run("real connection, real /proc", func(t *testing.T) {
		refuseNetlink(t)
		server, _ := procNetDialPair(t, "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1")
		local, remote := procNetAddrs(server)
		if uid, err := PeerUID(local, remote); err != nil || uid != uint32(os.Geteuid()) {
			t.Fatalf("PeerUID = %d, %v; want %d", uid, err, os.Geteuid())
		}
	})
}

// The /proc fallback reads at most procNetMaxBytes of a table: past it, an error (never a uid
// from a partial read).
func TestPeerUIDProcFallbackIsBounded(t *testing.T) {
	procNetSkipBigEndian(t)
	old := procNetMaxBytes
	t.Cleanup(func() { procNetMaxBytes = old })
	procNetMaxBytes = int64(len(procNetSampleV4))

	procNetUseFiles(t, procNetSampleV4, procNetHeader6)
	if uid, err := PeerUID(procNetServer4, procNetClient4); err != nil || uid != 997 {
		t.Fatalf("a table of exactly the bound: PeerUID = %d, %v; want 997", uid, err)
	}
	procNetUseFiles(t, procNetSampleV4+procNetPeerLine4("0A", "1", "1"), procNetHeader6)
	if uid, err := PeerUID(procNetServer4, procNetClient4); !errors.Is(err, ErrProcNetTooLarge) {
		t.Fatalf("a table one line past the bound: PeerUID = %d, %v; want ErrProcNetTooLarge", uid, err)
	}
	procNetUseFiles(t, procNetHeader4, procNetSampleV6+procNetPeerLine4("0A", "1", "1"))
	if _, _, err := procNetListener(procNetServer6); !errors.Is(err, ErrProcNetTooLarge) {
		t.Fatalf("listener lookup past the bound: %v; want ErrProcNetTooLarge", err)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
