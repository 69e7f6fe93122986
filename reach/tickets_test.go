package reach

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/pairing"
)

// A resumed TLS session tied to the device (SPEC R6d) and the bound on a device's connections
// (R6e), through a real door over real TLS.

// phoneAddr stands for the address a paired phone shares with strangers (a home router's IPv4,
// an IPv6 /64): the door bounds connections per source, and every loopback alias is a source.
const phoneAddr = "127.0.0.2"

// sessionClient is a TLS client that keeps its sessions, as a phone's browser does: its
// connections after the first resume.
type sessionClient struct {
	d   *testDoor
	src string
	cfg *tls.Config
}

func (d *testDoor) sessionClient(src string) *sessionClient {
	return &sessionClient{d: d, src: src, cfg: &tls.Config{RootCAs: d.pool, NextProtos: []string{"http/1.1"},
		ServerName: d.door.Addr().Addr().String(), ClientSessionCache: tls.NewLRUClientSessionCache(8),
		MinVersion: tls.VersionTLS13}}
}

// dial opens a connection; err is whatever kept it from completing its handshake.
func (s *sessionClient) dial() (*tls.Conn, error) {
	dialer := &net.Dialer{Timeout: doortest.WaitLimit, LocalAddr: &net.TCPAddr{IP: net.ParseIP(s.src)}}
	raw, err := dialer.Dial("tcp", s.d.Addr)
	if err != nil {
		return nil, err
	}
	raw.SetDeadline(time.Now().Add(doortest.WaitLimit))
	conn := tls.Client(raw, s.cfg)
	if err := conn.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// dialAtOnce opens a connection as dial does, but connects only when the ClientHello is ready
// to go and has the kernel send it right behind the handshake's last ACK (dialSending), as a
// phone's kernel does. Go's client computes its key shares between its connect and its hello;
// and in a test whose flood runs in the same process, the scheduler can hold the phone between
// its connect and its write for milliseconds, while the flood's connections from the same
// address push its hello-less connection to the front of the source's bound: a delay of the
// test's, not of the network's.
func (s *sessionClient) dialAtOnce() (*tls.Conn, error) {
	dialer := &net.Dialer{Timeout: doortest.WaitLimit, LocalAddr: &net.TCPAddr{IP: net.ParseIP(s.src)}}
	src := netip.AddrPortFrom(netip.MustParseAddr(s.src), 0)
	raw := &connectOnWrite{
		dialSending: func(first []byte) (net.Conn, bool, error) {
			return dialSending(src, netip.MustParseAddrPort(s.d.Addr), first)
		},
		dial: func() (net.Conn, error) { return dialer.Dial("tcp", s.d.Addr) },
	}
	raw.SetDeadline(time.Now().Add(doortest.WaitLimit))
	conn := tls.Client(raw, s.cfg)
	if err := conn.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// connectOnWrite is a net.Conn that connects on its first Write and sends that write at once:
// with the handshake when dialSending can, else right after it (dial).
type connectOnWrite struct {
	net.Conn
	dialSending func(first []byte) (conn net.Conn, ok bool, err error)
	dial        func() (net.Conn, error)
	deadline    time.Time
}

func (c *connectOnWrite) Write(p []byte) (int, error) {
	if c.Conn == nil {
		if conn, ok, err := c.dialSending(p); ok {
			if err != nil {
				return 0, err
			}
			conn.SetDeadline(c.deadline)
			c.Conn = conn
			return len(p), nil
		}
		conn, err := c.dial()
		if err != nil {
			return 0, err
		}
		conn.SetDeadline(c.deadline)
		c.Conn = conn
	}
	return c.Conn.Write(p)
}

func (c *connectOnWrite) Read(p []byte) (int, error) {
	if c.Conn == nil {
		return 0, net.ErrClosed
	}
	return c.Conn.Read(p)
}

func (c *connectOnWrite) Close() error {
	if c.Conn == nil {
		return nil
	}
	return c.Conn.Close()
}

func (c *connectOnWrite) SetDeadline(t time.Time) error {
	c.deadline = t
	if c.Conn == nil {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

// get sends one request on conn and reads its answer (status 0 on any error); the answer's
// reading also takes in the session ticket the door sent after the handshake.
func get(conn *tls.Conn, req string) (status int, resp *http.Response) {
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "GET"})
	if err != nil {
		return 0, nil
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp
}

// firstSession gives s a session established on a connection where the phone showed its cookie.
func (s *sessionClient) firstSession(t *testing.T, cookie string) {
	t.Helper()
	conn, err := s.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if st, _ := get(conn, s.d.req("GET", "/c/alpha/first", cookie)); st != http.StatusOK {
		t.Fatalf("the phone's first request: %d, want 200", st)
	}
}

// clientHello is a complete ClientHello record, as a client sends it first on a connection.
func clientHello(t *testing.T) []byte {
	t.Helper()
	return clientHelloWith(t, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true})
}

// clientHelloWith is the ClientHello record of a client with cfg: with a session in cfg's cache
// for its server, one that offers to resume it.
func clientHelloWith(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, cfg).Handshake()
	b.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// TestHelloScan_R6d: a ClientHello is whole only once its last byte has arrived, however its
// bytes come; anything else than a handshake record never is.
func TestHelloScan_R6d(t *testing.T) {
	hello := clientHello(t)
	for _, step := range []int{1, 3, 5, 7, 64, len(hello)} {
		var s helloScan
		for i := 0; i < len(hello); i += step {
			end := min(i+step, len(hello))
			if got := s.feed(hello[i:end]); got != (end == len(hello)) {
				t.Fatalf("step %d: whole %v after %d of %d bytes", step, got, end, len(hello))
			}
		}
	}
	var s helloScan
	if s.feed([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) || !s.bad {
		t.Errorf("an HTTP request is a ClientHello")
	}
	var h helloState
	if a, _ := h.arrivedWith(hello[:len(hello)-1]); a {
		t.Errorf("arrivedWith: whole without its last byte")
	}
	if a, fresh := h.arrivedWith(hello); !a || !fresh {
		t.Errorf("arrivedWith: not judged on what arrived")
	}
}

// TestHelloReadClaims_R6d: a connection whose ClientHello offers a live device's session is
// claimed as soon as the door has read the hello's last byte, in one read or in several — not
// only when its handshake opens the ticket, after the door's key-share work, during which a
// flood can turn a full source bound over. A hello that offers no session, or a revoked
// device's, leaves its connection a stranger's.
func TestHelloReadClaims_R6d(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("phone")
	phone := d.sessionClient(phoneAddr)
	phone.firstSession(t, cookie)
	resuming := clientHelloWith(t, phone.cfg.Clone())
	if helloTicket(resuming) == nil {
		t.Fatal("the phone's hello offers no session (nothing tested)")
	}
	table := d.door.conns
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name    string
		hello   []byte
		pieces  int
		before  func()
		claimed bool
	}{
		{"the phone's session, in one read", resuming, 1, nil, true},
		{"the phone's session, in three reads", resuming, 3, nil, true},
		{"no session", clientHello(t), 2, nil, false},
		{"a revoked device's session", resuming, 2, func() {
			if err := d.register.Revoke(dev.ID6); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			client := doortest.Dial(t, "tcp", ln.Addr().String())
			raw, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c, _, _ := table.admit(raw)
			defer c.Close()
			state := func() (connKind, int) {
				table.mu.Lock()
				defer table.mu.Unlock()
				return c.kind, table.claims[dev.ID6]
			}
			buf := make([]byte, len(tc.hello))
			read := 0
			for i := range tc.pieces {
				end := len(tc.hello) * (i + 1) / tc.pieces
				if _, err := client.Write(tc.hello[read:end]); err != nil {
					t.Fatal(err)
				}
				for read < end {
					n, err := c.Read(buf[read:end])
					if err != nil {
						t.Fatal(err)
					}
					read += n
				}
				if kind, _ := state(); end < len(tc.hello) && kind != strangerConn {
					t.Fatalf("after %d of the hello's %d bytes: kind %d, want a stranger's", end, len(tc.hello), kind)
				}
			}
			kind, claims := state()
			if want := map[bool]connKind{true: claimedConn, false: strangerConn}[tc.claimed]; kind != want || !c.helloIn.Load() {
				t.Errorf("with the hello read whole: kind %d (hello in: %v), want %d", kind, c.helloIn.Load(), want)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.claimed]; claims != want {
				t.Errorf("the device's claims: %d, want %d", claims, want)
			}
			c.Close()
			if _, claims := state(); claims != 0 {
				t.Errorf("a closed connection's claim outlives it: %d", claims)
			}
		})
	}
}

// floodPhone runs flood from phoneAddr on workers goroutines while the phone opens new
// connections, one request each, until the flood has run for floodFor. It returns how many of
// the phone's connections offered to resume its session (SPEC R6d's "resumed connections": the
// phone held a ticket when it dialled), how many of those were answered 200, and how many
// connections it made in all. Every answered request reached the console.
func floodPhone(t *testing.T, d *testDoor, phone *sessionClient, cookie string, flood func(stop <-chan struct{})) (answered, offered, made int) {
	t.Helper()
	const workers, floodFor = 4, 8 * time.Second
	cache := &offerWatch{ClientSessionCache: phone.cfg.ClientSessionCache}
	phone.cfg.ClientSessionCache = cache
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() { defer wg.Done(); flood(stop) }()
	}
	before := d.Alpha.Count()
	end := time.Now().Add(floodFor)
	all := 0
	for time.Now().Before(end) {
		made++
		cache.offered = false
		conn, err := phone.dialAtOnce()
		if cache.offered {
			offered++
		}
		if err != nil {
			t.Logf("the phone's connection %d (offered its session: %v) failed its handshake: %v", made, cache.offered, err)
			continue
		}
		if st, _ := get(conn, d.req("GET", "/c/alpha/flood", cookie)); st == http.StatusOK {
			all++
			if cache.offered {
				answered++
			}
		}
		conn.Close()
	}
	close(stop)
	wg.Wait()
	if got := d.Alpha.Count() - before; got != all {
		t.Errorf("the console saw %d of the phone's requests, the phone had %d answers", got, all)
	}
	return answered, offered, made
}

// offerWatch is a session cache that notes whether the client's last handshake found a session
// to offer: Go's client asks its cache once per handshake.
type offerWatch struct {
	tls.ClientSessionCache
	offered bool
}

func (o *offerWatch) Get(key string) (*tls.ClientSessionState, bool) {
	s, ok := o.ClientSessionCache.Get(key)
	o.offered = ok && s != nil
	return s, ok
}

// evictedBySource is how many connections the door evicted for the per-source bound since its
// last log line; reading it starts the next count.
func (d *testDoor) evictedBySource() int {
	t := d.door.conns
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.evicted.source
	t.evicted.source = 0
	return n
}

// TestFloodFromPhoneAddress_R6d: strangers on the phone's own address flood the door for 8 s —
// with bare TCP connections, then with connections that send a whole ClientHello and stall —
// and at least 99 % of the phone's resumed connections are answered: each is the phone's from
// its handshake on (its session's handle), and among strangers' connections those still
// waiting for their ClientHello go first.
func TestFloodFromPhoneAddress_R6d(t *testing.T) {
	if testing.Short() {
		t.Skip("an 8 s flood")
	}
	// The phone is another machine: its handshakes are not queued behind the flood's goroutines
	// in this process's run queue, only in the door's. More processors than the machine has
	// make the kernel share the cores between them, as between two machines' clients.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 6)
	hello := clientHello(t)
	for _, tc := range []struct {
		name  string
		flood func(conn net.Conn)
	}{
		{"bare TCP connections", func(net.Conn) {}},
		{"a whole ClientHello, then nothing", func(conn net.Conn) { conn.Write(hello) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startTestDoor(t)
			_, cookie := d.pair("phone")
			phone := d.sessionClient(phoneAddr)
			phone.firstSession(t, cookie)
			d.evictedBySource()
			var floods atomic.Int64
			answered, offered, made := floodPhone(t, d, phone, cookie, func(stop <-chan struct{}) {
				// Each worker keeps its last 64 connections open (the door evicts them before),
				// and closes older ones so that the test's own descriptors stay few.
				var held []net.Conn
				defer func() {
					for _, c := range held {
						c.Close()
					}
				}()
				dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(phoneAddr)}}
				for {
					select {
					case <-stop:
						return
					default:
					}
					conn, err := dialer.Dial("tcp", d.Addr)
					if err != nil {
						continue
					}
					floods.Add(1)
					tc.flood(conn)
					held = append(held, conn)
					if len(held) > 64 {
						held[0].Close()
						held = held[1:]
					}
				}
			})
			evicted := d.evictedBySource()
			t.Logf("%d flood connections, %d evicted by the source bound; the phone: %d of its %d resumed connections answered (%d connections in all)",
				floods.Load(), evicted, answered, offered, made)
			if evicted < SourceConnLimit {
				t.Fatalf("the flood evicted %d connections: it never filled the source's bound", evicted)
			}
			least := 20 // the phone's requests the 8 s must hold for the share to mean something
			if raceEnabled {
				least = 5
			}
			if offered < least || answered*100 < offered*99 {
				t.Errorf("the phone had %d of its %d resumed connections answered, want at least 99 %%", answered, offered)
			}
			// A connection that did not offer the session (Go's client drops its ticket after a
			// handshake that failed) is a stranger's until it shows its cookie (R6c); few may be.
			if made-offered > made/100+1 {
				t.Errorf("%d of the phone's %d connections had no session to offer", made-offered, made)
			}
		})
	}
}

// TestRevokedTicket_R6d: a resumed connection is the device's from its handshake, before any
// request, yet its handle admits nothing: a request on it without the cookie is a stranger's.
// Once the device is revoked its ticket neither protects (a resumed connection is a stranger's,
// evicted by the source's bound like any) nor admits (the cookie is refused and cleared, R10;
// the console sees nothing).
func TestRevokedTicket_R6d(t *testing.T) {
	timers := newFakeTimers()
	d := startTestDoor(t, withConns(timers, 0))
	dev, cookie := d.pair("phone")
	phone := d.sessionClient(phoneAddr)
	phone.firstSession(t, cookie)
	waitConns(t, d, func(strangers, devices, _ int) bool { return strangers == 0 && devices == 0 })

	resumed, err := phone.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if !resumed.ConnectionState().DidResume {
		t.Fatal("the phone's second connection did not resume its session")
	}
	waitConns(t, d, func(strangers, devices, _ int) bool { return strangers == 0 && devices == 1 })
	before := d.Alpha.Count()
	if st, resp := get(resumed, d.req("GET", "/c/alpha/no-cookie")); st != http.StatusSeeOther ||
		resp.Header.Get("Location") != PairPath {
		t.Errorf("a resumed connection without its cookie: %d, want 303 to %s (a handle admits nothing)", st, PairPath)
	}
	if d.Alpha.Count() != before {
		t.Errorf("the console saw a request that showed no cookie")
	}

	if err := d.register.Revoke(dev.ID6); err != nil {
		t.Fatal(err)
	}
	revoked, err := phone.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer revoked.Close()
	if !revoked.ConnectionState().DidResume {
		t.Fatal("the revoked phone's connection did not resume (nothing tested)")
	}
	waitConns(t, d, func(strangers, devices, _ int) bool { return devices == 0 && strangers == 2 })
	st, resp := get(revoked, d.req("GET", "/c/alpha/revoked", cookie))
	if st != http.StatusSeeOther || !clearsCookie(resp) {
		t.Errorf("the revoked phone's cookie on its resumed connection: %d, want 303 with the cookie cleared (R10)", st)
	}
	if d.Alpha.Count() != before {
		t.Errorf("the console saw the revoked phone's request")
	}
	// Not protected: strangers from the phone's address evict it like any stranger's.
	held := heldConn{t: t, name: "the revoked phone's resumed", conn: revoked, br: bufio.NewReader(revoked)}
	var strangers []net.Conn
	for range SourceConnLimit {
		c := doortest.Dial(t, "tcp", d.Addr) // from 127.0.0.1: another source, nothing evicted
		strangers = append(strangers, c)
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(phoneAddr)}}
		s, err := dialer.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		strangers = append(strangers, s)
		// A stranger's connection that has shown nothing, or stalls in its handshake, is
		// evicted before the phone's: each of these completes its handshake, as the phone's did.
		hs := tls.Client(s, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err := hs.Handshake(); err != nil {
			t.Fatal(err)
		}
		// and the door has read its end of the handshake: until then it is stalled after the
		// door's answer, and the next stranger's room would rightly be made with it instead.
		waitNoneStalled(t, d)
	}
	defer func() {
		for _, c := range strangers {
			c.Close()
		}
	}()
	if !held.closedByDoor() {
		t.Errorf("the revoked phone's resumed connection survived %d strangers from its address", SourceConnLimit)
	}
}

// waitNoneStalled waits until the door holds no connection stalled after its handshake's answer.
func waitNoneStalled(t *testing.T, d *testDoor) {
	t.Helper()
	deadline := time.Now().Add(doortest.WaitLimit)
	for {
		d.door.conns.mu.Lock()
		n := d.door.conns.stalled.n
		d.door.conns.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the door still holds %d connections stalled in their handshake", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func clearsCookie(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	for _, line := range resp.Header.Values("Set-Cookie") {
		if line == pairing.ClearCookie {
			return true
		}
	}
	return false
}

// TestDeviceConnLimit_R6e: one device opens 400 connections, each with an answered request and
// then idle: the door holds its newest 256 and closed its 144 oldest, and a second device is
// served at once. With 256 busy connections of its own, the device's next one is closed and the
// busy ones are untouched.
func TestDeviceConnLimit_R6e(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("greedy")
	_, other := d.pair("other")
	greedy := d.sessionClient("127.0.0.1")
	const opened = 400
	held := make([]*heldConn, 0, opened)
	for i := range opened {
		conn, err := greedy.dial()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, hold(t, "greedy", conn, d.req("GET", "/c/alpha/x", cookie), http.StatusOK))
	}
	waitConns(t, d, func(strangers, devices, _ int) bool { return strangers == 0 && devices == DeviceConnLimit })
	closed := 0
	for i, h := range held {
		h.conn.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
		isClosed := h.closedByDoorNow()
		if isClosed {
			closed++
		}
		if isClosed != (i < opened-DeviceConnLimit) {
			t.Errorf("connection %d of %d: closed %v, want the %d oldest closed", i, opened, isClosed, opened-DeviceConnLimit)
			break
		}
	}
	if closed != opened-DeviceConnLimit {
		t.Errorf("%d connections closed, want %d", closed, opened-DeviceConnLimit)
	}
	if res := d.ExchangeOn(d.dial(""), d.req("GET", "/c/alpha/other", other)); res.Status != http.StatusOK {
		t.Errorf("another device beside the greedy one: %d, want 200", res.Status)
	}
	if res := d.ExchangeOn(d.dial(""), d.req("GET", "/c/alpha/stranger")); res.Status != http.StatusSeeOther {
		t.Errorf("a stranger beside the greedy device: %d, want 303", res.Status)
	}
}

// closedByDoorNow is closedByDoor without waiting: a closed connection's read ends at once, an
// open one's at once too (a short deadline), as nothing is sent on it.
func (h *heldConn) closedByDoorNow() bool {
	h.t.Helper()
	h.conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := h.br.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	if err == nil {
		h.t.Fatalf("%s: the door sent something unasked", h.name)
	}
	return !strings.Contains(err.Error(), "timeout")
}

// TestDeviceConnLimitAllBusy_R6e: a device holding DeviceConnLimit connections, each with a
// stream in flight, opens one more: that one is closed without an answer, and the busy ones
// are untouched (each still gets its stream's next event).
func TestDeviceConnLimitAllBusy_R6e(t *testing.T) {
	d := startTestDoor(t)
	_, cookie := d.pair("greedy")
	greedy := d.sessionClient("127.0.0.1")
	type stream struct {
		conn *tls.Conn
		br   *bufio.Reader
	}
	streams := make([]stream, 0, DeviceConnLimit)
	for i := range DeviceConnLimit {
		conn, err := greedy.dial()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		io.WriteString(conn, d.req("GET", "/c/alpha/sse", cookie))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %v", i, err)
		}
		streams = append(streams, stream{conn, br})
	}
	waitConns(t, d, func(strangers, devices, _ int) bool { return devices == DeviceConnLimit })
	before := d.Alpha.Count()
	if conn, err := greedy.dial(); err == nil {
		if st, _ := get(conn, d.req("GET", "/c/alpha/one-more", cookie)); st != 0 {
			t.Errorf("the device's connection past its bound, all of its others busy: %d, want closed", st)
		}
		conn.Close()
	}
	if d.Alpha.Count() != before {
		t.Errorf("the console saw the request on the connection past the device's bound")
	}
	d.Alpha.Tick()
	for i, s := range streams {
		s.conn.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
		for {
			line, err := s.br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v: a busy connection was closed", i, err)
			}
			if strings.Contains(line, "tick") {
				break
			}
		}
	}
}
