package reach

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
)

// The connection bounds (SPEC R6c), through a real door: raw TLS connections that each get one
// answer and are then held open, as a stranger holding connections would.

// fakeTimers stands in for time.AfterFunc in the door's idle timers: nothing fires until fire.
type fakeTimers struct {
	mu      sync.Mutex
	next    int
	pending map[int]func()
	armed   []time.Duration // every duration asked for
}

func newFakeTimers() *fakeTimers { return &fakeTimers{pending: map[int]func(){}} }

func (f *fakeTimers) afterFunc(d time.Duration, fn func()) func() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.next
	f.next++
	f.pending[id] = fn
	f.armed = append(f.armed, d)
	return func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		_, ok := f.pending[id]
		delete(f.pending, id)
		return ok
	}
}

// fire runs every timer armed and not stopped, as if its time had come.
func (f *fakeTimers) fire() {
	f.mu.Lock()
	fns := make([]func(), 0, len(f.pending))
	for id, fn := range f.pending {
		fns = append(fns, fn)
		delete(f.pending, id)
	}
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// withConns gives the door fake idle timers (and a capacity, when not zero).
func withConns(timers *fakeTimers, capacity int) func(*Config) {
	return func(c *Config) { c.conns = &connHooks{afterFunc: timers.afterFunc, capacity: capacity} }
}

// heldConn is a connection to the door that has had its answer and is kept open.
type heldConn struct {
	t    testing.TB
	name string
	conn *tls.Conn
	br   *bufio.Reader
}

// hold sends req on conn, reads its answer (which must be status) and keeps conn open.
func hold(t testing.TB, name string, conn *tls.Conn, req string, status int) *heldConn {
	t.Helper()
	h := &heldConn{t: t, name: name, conn: conn, br: bufio.NewReader(conn)}
	t.Cleanup(func() { conn.Close() })
	if got, err := h.ask(req); err != nil || got != status {
		t.Fatalf("%s: %d %v, want %d", name, got, err, status)
	}
	return h
}

// ask sends req and reads its answer's status.
func (h *heldConn) ask(req string) (int, error) {
	h.conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	if _, err := io.WriteString(h.conn, req); err != nil {
		return 0, err
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(h.br, &http.Request{Method: method})
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		return resp.StatusCode, errors.New("the door closes the connection after this answer")
	}
	return resp.StatusCode, nil
}

// closedByDoor reports whether the door has closed the connection: a read ends at once with
// an error. A read that waits until doortest.WaitLimit means it is open (the guard against a hang is
// what answers, never a measured time).
func (h *heldConn) closedByDoor() bool {
	h.t.Helper()
	h.conn.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
	_, err := h.br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	if err == nil {
		h.t.Fatalf("%s: the door sent something unasked", h.name)
	}
	return true
}

// TestConnsPerSource_R6c: 100 connections from one source — an IPv4 address, or addresses of
// one IPv6 /64 — keep the newest 64 open and served; the 36 oldest are closed by the door. A
// connection from another source is not touched.
func TestConnsPerSource_R6c(t *testing.T) {
	for _, tc := range []struct {
		name  string
		peer  func(i int) netip.Addr
		other netip.Addr
	}{
		{"R6c one IPv4 address", func(int) netip.Addr { return netip.MustParseAddr("192.0.2.7") },
			netip.MustParseAddr("192.0.2.8")},
		{"R6c one IPv4 address, some IPv4-mapped", func(i int) netip.Addr {
			if i%2 == 0 {
				return netip.MustParseAddr("::ffff:192.0.2.7")
			}
			return netip.MustParseAddr("192.0.2.7")
		}, netip.MustParseAddr("::ffff:192.0.2.8")},
		{"R6c one IPv6 /64, every address another", func(i int) netip.Addr {
			return netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2:%x::%x", i, i+1))
		}, netip.MustParseAddr("2001:db8:1:3::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers := &peerMap{m: map[int]netip.Addr{}}
			d := startTestDoor(t, withConns(newFakeTimers(), 0), func(c *Config) {
				c.wrapListener = func(ln net.Listener) net.Listener { return &peerListener{Listener: ln, peers: peers} }
			})
			get := d.req("GET", "/ca.crt")
			other := hold(t, "the other source's", d.dialFromPort(peers.reserve(tc.other)), get, http.StatusOK)
			var held []*heldConn
			for i := range 100 {
				held = append(held, hold(t, fmt.Sprint("connection ", i), d.dialFromPort(peers.reserve(tc.peer(i))), get, http.StatusOK))
			}
			for _, h := range held[:100-SourceConnLimit] {
				if !h.closedByDoor() {
					t.Errorf("%s of 100 is still open: the oldest beyond %d must be closed", h.name, SourceConnLimit)
				}
			}
			for _, h := range append(held[100-SourceConnLimit:], other) {
				if st, err := h.ask(get); err != nil || st != http.StatusOK {
					t.Errorf("%s, to be kept: %d %v, want 200", h.name, st, err)
				}
			}
			if s, devs, _ := d.door.conns.connCounts(); s != SourceConnLimit+1 || devs != 0 {
				t.Errorf("held: %d strangers' and %d devices' connections, want %d and 0", s, devs, SourceConnLimit+1)
			}
		})
	}
}

// TestConnsOverall_R6c: 1,200 connections from 20 sources (60 each, under the per-source bound)
// keep 1,024 open, the newest: the oldest are closed, a newcomer from another source is still
// served, and a paired phone's connection — older than all of them, from one of their sources —
// is never evicted and counts against neither bound. The 1,200 are bare TCP connections that
// never start TLS, as a stranger's cheapest would be: the bounds act at accept, before TLS.
func TestConnsOverall_R6c(t *testing.T) {
	d := startTestDoor(t, withConns(newFakeTimers(), 0), func(c *Config) { c.conns.serverTimeout = time.Hour })
	_, cookie := d.pair("phone")
	phone := hold(t, "the phone's", d.dialFrom("127.0.0.2", ""), d.req("GET", "/c/alpha/first", cookie), http.StatusOK)
	get := d.req("GET", "/ca.crt")
	const sources, each = 20, 60
	var bare []net.Conn
	for i := range sources * each {
		dialer := &net.Dialer{Timeout: doortest.WaitLimit, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%sources))}}
		c, err := dialer.Dial("tcp4", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		bare = append(bare, c)
	}
	// Accepted after all of them (the kernel queues connections in order), so once it is
	// answered every eviction they caused is done.
	newcomer := hold(t, "the newcomer's", d.dialFrom("127.0.0.100", ""), get, http.StatusOK)

	evicted := len(bare) + 1 - StrangerConnLimit // the newcomer made room too
	for i, c := range bare[:evicted] {
		c.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d of %d is still open (%v): the oldest beyond %d must be closed", i, len(bare), err, StrangerConnLimit)
		}
	}
	want := map[netip.AddrPort]bool{newcomer.conn.LocalAddr().(*net.TCPAddr).AddrPort(): true}
	for _, c := range bare[evicted:] {
		want[c.LocalAddr().(*net.TCPAddr).AddrPort()] = true
	}
	held := d.door.conns.strangerPeers()
	if len(held) != StrangerConnLimit {
		t.Errorf("the door holds %d strangers' connections, want %d", len(held), StrangerConnLimit)
	}
	for _, p := range held {
		if !want[p] {
			t.Errorf("the door holds a connection from %v, not one of the newest %d", p, StrangerConnLimit)
		}
	}
	// Kept connections are served: a TLS handshake and a request on some of them, oldest and newest.
	for _, i := range []int{evicted, evicted + 1, (evicted + len(bare)) / 2, len(bare) - 1} {
		tc := tls.Client(bare[i], &tls.Config{RootCAs: d.pool, ServerName: d.door.Addr().Addr().String(), NextProtos: []string{"http/1.1"}})
		h := &heldConn{t: t, name: fmt.Sprint("connection ", i), conn: tc, br: bufio.NewReader(tc)}
		if st, err := h.ask(get); err != nil || st != http.StatusOK {
			t.Errorf("%s, kept: %d %v, want 200", h.name, st, err)
		}
	}
	if st, err := newcomer.ask(get); err != nil || st != http.StatusOK {
		t.Errorf("the newcomer: %d %v, want 200", st, err)
	}
	if st, err := phone.ask(d.req("GET", "/c/alpha/again", cookie)); err != nil || st != http.StatusOK {
		t.Errorf("the phone's connection: %d %v, want 200 from its console", st, err)
	}
	last, _ := d.Alpha.Last()
	if n := d.Alpha.Count(); n != 2 || last.Path != "/again" {
		t.Errorf("the console saw %d requests, the last %q; want the phone's two", n, last.Path)
	}
	if s, devs, _ := d.door.conns.connCounts(); s != StrangerConnLimit || devs != 1 {
		t.Errorf("held: %d strangers' and %d devices' connections, want %d and 1", s, devs, StrangerConnLimit)
	}
	if !strings.Contains(d.Logs.String(), `"msg":"fleet.reach-conn-evicted"`) {
		t.Errorf("no fleet.reach-conn-evicted line: %s", d.Logs)
	}
}

// TestConnsIdle_R6c: a stranger's connection with no request in flight — after its answer, or
// without ever sending a request — is closed once StrangerIdleTimeout has passed (the door's idle
// timers are faked: fire is their time coming); a stranger's request in flight, and a paired
// device's idle connection, are not cut.
func TestConnsIdle_R6c(t *testing.T) {
	timers := newFakeTimers()
	entered, release := make(chan struct{}), make(chan struct{})
	d := startTestDoor(t, withConns(timers, 0), func(c *Config) {
		c.Pairing = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/pair/slow" {
				entered <- struct{}{}
				<-release
			}
			io.WriteString(w, "pairing page")
		})
	})
	_, cookie := d.pair("phone")
	get := d.req("GET", "/ca.crt")

	answered := hold(t, "a stranger's, answered", d.dial(""), get, http.StatusOK)
	silent := &heldConn{t: t, name: "a stranger's, silent", conn: d.dial("")} // handshake, no request
	silent.br = bufio.NewReader(silent.conn)
	phone := hold(t, "the phone's", d.dial(""), d.req("GET", "/c/alpha/x", cookie), http.StatusOK)
	inFlight := &heldConn{t: t, name: "a stranger's, in flight", conn: d.dial("")}
	inFlight.br = bufio.NewReader(inFlight.conn)
	io.WriteString(inFlight.conn, d.req("GET", "/pair/slow"))
	<-entered

	// The answered stranger's connection becomes idle just after its answer is out.
	waitConns(t, d, func(strangers, devices, idle int) bool { return strangers == 3 && devices == 1 && idle == 2 })
	timers.fire()
	for _, h := range []*heldConn{answered, silent} {
		if !h.closedByDoor() {
			t.Errorf("%s connection is still open after its idle time", h.name)
		}
	}
	if st, err := phone.ask(d.req("GET", "/c/alpha/y", cookie)); err != nil || st != http.StatusOK {
		t.Errorf("the phone's idle connection: %d %v, want 200", st, err)
	}
	close(release)
	resp, err := http.ReadResponse(inFlight.br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the stranger's request in flight: %v %v, want its answer", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	waitConns(t, d, func(strangers, _, idle int) bool { return strangers == 1 && idle == 1 })
	timers.fire()
	if !inFlight.closedByDoor() {
		t.Errorf("the stranger's connection is still open after its answer and its idle time")
	}
	timers.mu.Lock()
	defer timers.mu.Unlock()
	for _, dur := range timers.armed {
		if dur != StrangerIdleTimeout {
			t.Errorf("an idle timer of %v, want %v", dur, StrangerIdleTimeout)
		}
	}
}

// TestConnsCapacity_R6c: the door holds at most its capacity (half the soft limit on open files;
// 6 here) in connections. Past it a new connection evicts the oldest stranger's; when only
// devices' connections are held, a new one is closed before its TLS handshake, and the devices'
// connections are all still served.
func TestConnsCapacity_R6c(t *testing.T) {
	const capacity = 6
	d := startTestDoor(t, withConns(newFakeTimers(), capacity))
	_, cookie := d.pair("phone")
	get, dev := d.req("GET", "/ca.crt"), d.req("GET", "/c/alpha/x", cookie)
	var devices []*heldConn
	for i := range 2 {
		devices = append(devices, hold(t, fmt.Sprint("device connection ", i), d.dial(""), dev, http.StatusOK))
	}
	var strangers []*heldConn
	for i := range 6 {
		strangers = append(strangers, hold(t, fmt.Sprint("stranger's connection ", i), d.dial(""), get, http.StatusOK))
	}
	for _, h := range strangers[:2] {
		if !h.closedByDoor() {
			t.Errorf("%s is still open: the oldest must make room (capacity %d, 2 devices')", h.name, capacity)
		}
	}
	for _, h := range strangers[2:] {
		if st, err := h.ask(get); err != nil || st != http.StatusOK {
			t.Errorf("%s, to be kept: %d %v, want 200", h.name, st, err)
		}
	}
	for i := range capacity - 2 {
		devices = append(devices, hold(t, fmt.Sprint("device connection ", 2+i), d.dial(""), dev, http.StatusOK))
	}
	for i, h := range strangers[2:] {
		if !h.closedByDoor() {
			t.Errorf("stranger's connection %d is still open beside %d devices' connections", 2+i, capacity)
		}
	}
	conn, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	if err := tls.Client(conn, &tls.Config{RootCAs: d.pool, ServerName: d.door.Addr().Addr().String()}).Handshake(); err == nil {
		t.Errorf("a connection past the capacity, all of it devices': the handshake succeeded")
	} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("a connection past the capacity was kept waiting, not closed: %v", err)
	}
	for _, h := range devices {
		if st, err := h.ask(dev); err != nil || st != http.StatusOK {
			t.Errorf("%s: %d %v, want 200", h.name, st, err)
		}
	}
	if s, devs, _ := d.door.conns.connCounts(); s != 0 || devs != capacity {
		t.Errorf("held: %d strangers' and %d devices' connections, want 0 and %d", s, devs, capacity)
	}
}

// TestConnsRevokedDevice_R6c: a revoked device's connection is a stranger's again: the next
// request on it is refused as a stranger's (R10), and it idles out like one.
func TestConnsRevokedDevice_R6c(t *testing.T) {
	timers := newFakeTimers()
	d := startTestDoor(t, withConns(timers, 0))
	dev, cookie := d.pair("phone")
	phone := hold(t, "the phone's", d.dial(""), d.req("GET", "/c/alpha/x", cookie), http.StatusOK)
	waitConns(t, d, func(strangers, devices, _ int) bool { return strangers == 0 && devices == 1 })
	if err := d.register.Revoke(dev.ID6); err != nil {
		t.Fatal(err)
	}
	waitConns(t, d, func(strangers, devices, idle int) bool { return strangers == 1 && devices == 0 && idle == 1 })
	timers.fire()
	if !phone.closedByDoor() {
		t.Errorf("the revoked device's idle connection is still open after a stranger's idle time")
	}
}

// waitConns waits (guarded by doortest.WaitLimit) until the door's connections satisfy cond: the door
// changes them a moment after the answer a test reads.
func waitConns(t *testing.T, d *testDoor, cond func(strangers, devices, idle int) bool) {
	t.Helper()
	deadline := time.Now().Add(doortest.WaitLimit)
	for {
		s, devs, idle := d.door.conns.connCounts()
		if cond(s, devs, idle) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the door holds %d strangers', %d devices' connections, %d idle", s, devs, idle)
		}
		time.Sleep(time.Millisecond)
	}
}

// connCounts is what the table holds: strangers' and devices' connections, and of the strangers'
// how many have an idle timer running.
func (t *connTable) connCounts() (strangers, devices, idle int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := t.strangers.oldest; c != nil; c = c.all.newer {
		if c.stopIdle != nil {
			idle++
		}
	}
	return t.strangers.n, len(t.devices), idle
}

// strangerPeers are the peers of the strangers' connections the table holds, oldest first.
func (t *connTable) strangerPeers() []netip.AddrPort {
	t.mu.Lock()
	defer t.mu.Unlock()
	var peers []netip.AddrPort
	for c := t.strangers.oldest; c != nil; c = c.all.newer {
		peers = append(peers, c.RemoteAddr().(*net.TCPAddr).AddrPort())
	}
	return peers
}
