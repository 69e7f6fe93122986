//go:build linux

package peercred

import (
	"context"
	"net"
	"testing"
)

// benchSockets opens n extra loopback connections (2n sockets in the tables) for the test's life:
// what a busy machine's /proc/net/tcp holds.
func benchSockets(b *testing.B, n int) {
	b.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	for range n {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close(); s.Close() })
	}
}

// BenchmarkPeerUID looks up the peer of one accepted connection among 300 others: by sock_diag
// with pooled netlink sockets, with a socket per lookup, and from /proc (netlink refused).
func BenchmarkPeerUID(b *testing.B) {
	benchSockets(b, 300)
	server, _ := procNetDialPair(b, "tcp4", "127.0.0.1:0", "tcp4", "127.0.0.1")
	local, remote := procNetAddrs(server)
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := PeerUID(local, remote); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("sockdiag", run)
	b.Run("sockdiag-socket-per-lookup", func(b *testing.B) {
		diagPooling = false
		diagDrain()
		b.Cleanup(func() { diagPooling = true })
		run(b)
	})
	b.Run("sockdiag-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := PeerUID(local, remote); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("proc", func(b *testing.B) {
		refuseNetlink(b)
		run(b)
	})
}

// BenchmarkDialOwn dials a Go server (accepting in a loop) among 300 other connections: a plain
// net.Dial for reference, DialOwn with sock_diag, and DialOwn from /proc.
func BenchmarkDialOwn(b *testing.B) {
	benchSockets(b, 300)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.Read(make([]byte, 1)); c.Close() }()
		}
	}()
	addr := ln.Addr().String()
	ctx := context.Background()
	run := func(dial func(context.Context, string, string) (net.Conn, error)) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := dial(ctx, "tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT pile-up
				c.Close()
			}
		}
	}
	b.Run("net.Dial", run((&net.Dialer{}).DialContext))
	b.Run("sockdiag", run(DialOwn))
	b.Run("proc", func(b *testing.B) {
		refuseNetlink(b)
		run(DialOwn)(b)
	})
}
