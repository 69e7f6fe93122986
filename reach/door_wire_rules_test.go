package reach

import (
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doorrules"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/pairing"
)

// TestWireRules_S3_S7_S9_R5_R6_R9: the wire rows of the attack table (Host and SNI forms,
// smuggling, pipelining, Expect, exhaustion, rate-limit evasion, the device credential
// compared), through this door's TLS listener as a paired device.
func TestWireRules_S3_S7_S9_R5_R6_R9(t *testing.T) {
	peers := &peerMap{m: map[int]netip.Addr{}}
	d := startTestDoor(t, func(c *Config) {
		c.wrapListener = func(ln net.Listener) net.Listener { return &peerListener{Listener: ln, peers: peers} }
	})
	_, cookie := d.pair("wire")
	doorrules.RunWire(t, wireDoor{rulesDoor{d, cookie}, peers})
}

type wireDoor struct {
	rulesDoor
	peers *peerMap
}

func (w wireDoor) Kind() string               { return doorrules.Reach }
func (w wireDoor) Host() string               { return w.d.Addr }
func (w wireDoor) Addr() string               { return w.d.Addr }
func (w wireDoor) Dial(t *testing.T) net.Conn { return w.d.dial("") }
func (w wireDoor) Forget()                    { w.d.clock.Advance(Window) }

func (w wireDoor) DialSNI(t *testing.T, serverName string) net.Conn { return w.d.dial(serverName) }

// DialFrom dials from src for real when it is a loopback IPv4 address; any other source is given
// to the door as the peer of the connection accepted (its real source port names it).
func (w wireDoor) DialFrom(t *testing.T, src netip.Addr) net.Conn {
	if src.Is4() && src.IsLoopback() {
		return w.d.dialFrom(src.String(), "")
	}
	return w.d.dialFromPort(w.peers.reserve(src))
}

// dialFromPort is dial from 127.0.0.1:port.
func (d *testDoor) dialFromPort(port int) *tls.Conn {
	d.t.Helper()
	dialer := &net.Dialer{Timeout: doortest.WaitLimit, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	conn, err := tls.DialWithDialer(dialer, "tcp", d.Addr, &tls.Config{RootCAs: d.pool, NextProtos: []string{"http/1.1"},
		ServerName: d.door.Addr().Addr().String()})
	if err != nil {
		d.t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	return conn
}

func (w wireDoor) Paths() []string { return w.d.Alpha.Paths() }

func (w wireDoor) Credential() string {
	_, cred, _ := strings.Cut(w.cookie, "=")
	return cred
}

// WithCredential is a request to a console presenting secret as the device credential cookie.
func (w wireDoor) WithCredential(secret string) string {
	if secret == "" {
		return w.d.req("GET", "/c/alpha/x")
	}
	return w.d.req("GET", "/c/alpha/x", "Cookie: "+pairing.CookieName+"="+secret)
}

// peerMap names the peer address the door is to see for a connection from a local port.
type peerMap struct {
	mu sync.Mutex
	m  map[int]netip.Addr
}

// reserve picks a free local port for the next connection and maps it to src.
func (p *peerMap) reserve(src netip.Addr) int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0") // a port free a moment ago
	if err != nil {
		panic(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p.mu.Lock()
	p.m[port] = src
	p.mu.Unlock()
	return port
}

func (p *peerMap) take(port int) (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.m[port]
	delete(p.m, port)
	return a, ok
}

// peerListener gives each accepted connection from a mapped local port its mapped peer address.
type peerListener struct {
	net.Listener
	peers *peerMap
}

func (l *peerListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	remote := conn.RemoteAddr().(*net.TCPAddr)
	if src, ok := l.peers.take(remote.Port); ok {
		return &peerConn{Conn: conn, remote: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, uint16(remote.Port)))}, nil
	}
	return conn, nil
}

type peerConn struct {
	net.Conn
	remote net.Addr
}

func (c *peerConn) RemoteAddr() net.Addr { return c.remote }

// Stranger is a request without the device's cookie.
func (w wireDoor) Stranger(method, target string, extra ...string) string {
	return w.d.req(method, target, extra...)
}
