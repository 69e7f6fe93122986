package supervisor

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tailscale.com/ipn"
	"tailscale.com/tailcfg"
)

// setTailscaled changes what the fake tailscaled says about prefs and Serve, then drives one
// poll of the forward watch, as the next tick would.
func (d *door) setTailscaled(t *testing.T, fn func(f *fakeTailnet)) {
	t.Helper()
	d.tailnet.set(fn)
	d.srv.verifier.forwards.poll(context.Background())
}

func (d *door) port() int {
	_, p, _ := net.SplitHostPort(d.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// tcpForward is a Serve config with one raw TCP forward on the node's port 8022 (what
// `tailscale serve --tcp=8022 tcp://TARGET` stores).
func tcpForward(target string) *ipn.ServeConfig {
	return &ipn.ServeConfig{TCP: map[uint16]*ipn.TCPPortHandler{8022: {TCPForward: target}}}
}

// TestTCPForwardable_S5e: on the TCP door, every /c/ request is 401 tcp-forwardable while
// tailscaled runs Tailscale SSH or forwards raw TCP to fleet's port, and 401 unverified while
// fleet cannot tell; the page names the unix-socket door.
func TestTCPForwardable_S5e(t *testing.T) {
	d := startDoor(t)
	port := strconv.Itoa(d.port())
	other := strconv.Itoa(d.port()%60000 + 1)
	rows := []struct {
		name   string
		set    func(f *fakeTailnet)
		req    string
		status int
		reason string
	}{
		{"S5e ssh off, no forward", func(f *fakeTailnet) {}, serveReq("GET", "/c/alpha/"), 200, ""},
		{"S5e ssh on", func(f *fakeTailnet) { f.runSSH = true }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e ssh on, index page", func(f *fakeTailnet) { f.runSSH = true }, serveReq("GET", "/"), 401, "tcp-forwardable"},
		{"S5e raw forward to 127.0.0.1:port", func(f *fakeTailnet) { f.serve = tcpForward("127.0.0.1:" + port) }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to localhost:port", func(f *fakeTailnet) { f.serve = tcpForward("localhost:" + port) }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to [::1]:port", func(f *fakeTailnet) { f.serve = tcpForward("[::1]:" + port) }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to 127.0.0.2:port", func(f *fakeTailnet) { f.serve = tcpForward("127.0.0.2:" + port) }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to 0.0.0.0:port", func(f *fakeTailnet) { f.serve = tcpForward("0.0.0.0:" + port) }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to :port", func(f *fakeTailnet) { f.serve = tcpForward(":" + port) }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to a name", func(f *fakeTailnet) { f.serve = tcpForward("sup.internal:" + port) }, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e tls-terminated raw forward", func(f *fakeTailnet) {
			f.serve = tcpForward("127.0.0.1:" + port)
			f.serve.TCP[8022].TerminateTLS = tsName
		}, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward in a Service", func(f *fakeTailnet) {
			f.serve = &ipn.ServeConfig{Services: map[tailcfg.ServiceName]*ipn.ServiceConfig{
				"svc:db": {TCP: map[uint16]*ipn.TCPPortHandler{5432: {TCPForward: "127.0.0.1:" + port}}}}}
		}, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward in a foreground session", func(f *fakeTailnet) {
			f.serve = &ipn.ServeConfig{Foreground: map[string]*ipn.ServeConfig{"session-1": tcpForward("127.0.0.1:" + port)}}
		}, serveReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to another port", func(f *fakeTailnet) { f.serve = tcpForward("127.0.0.1:" + other) }, serveReq("GET", "/c/alpha/"), 200, ""},
		{"S5e raw forward to another machine", func(f *fakeTailnet) { f.serve = tcpForward("192.0.2.7:" + port) }, serveReq("GET", "/c/alpha/"), 200, ""},
		{"S5e raw forward to a unix socket", func(f *fakeTailnet) { f.serve = tcpForward("unix:/run/db.sock") }, serveReq("GET", "/c/alpha/"), 200, ""},
		{"S5e Serve's HTTP proxy to fleet", func(f *fakeTailnet) {
			f.serve = &ipn.ServeConfig{
				TCP: map[uint16]*ipn.TCPPortHandler{443: {HTTPS: true}},
				Web: map[ipn.HostPort]*ipn.WebServerConfig{tsName + ":443": {Handlers: map[string]*ipn.HTTPHandler{"/": {Proxy: "http://127.0.0.1:" + port}}}},
			}
		}, serveReq("GET", "/c/alpha/"), 200, ""},
		{"S5e prefs unknown", func(f *fakeTailnet) { f.prefsDown = true }, serveReq("GET", "/c/alpha/"), 401, "unverified"},
		{"S5e serve-config unknown", func(f *fakeTailnet) { f.serveDown = true }, serveReq("GET", "/c/alpha/"), 401, "unverified"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.setTailscaled(t, func(f *fakeTailnet) {
				f.runSSH, f.serve, f.prefsDown, f.serveDown = false, nil, false, false
				row.set(f)
			})
			before := d.alpha.count()
			r := d.raw(row.req)
			switch {
			case row.status != 200:
				d.wantRefused(t, r, before, row.status, row.reason)
				if row.reason == "tcp-forwardable" && (!strings.Contains(r.body, "fleet serve --socket") || !strings.Contains(r.body, "tailscale serve unix:")) {
					t.Errorf("the page does not name the unix-socket door: %q", r.body)
				}
			case strings.HasPrefix(row.req, "GET / "):
				if r.status != 200 {
					t.Errorf("index: %d %q", r.status, r.reason)
				}
			default:
				d.wantForwarded(t, r, before, alice, "/")
			}
		})
	}
}

// TestForwardRemovedServedAgain_S5e: a forward that appears is refused from the next poll on;
// once it is gone, new connections are served after the next poll — but a connection opened
// while the forward was there (possibly through it) stays refused, and is closed.
func TestForwardRemovedServedAgain_S5e(t *testing.T) {
	d := startDoor(t)
	port := strconv.Itoa(d.port())
	before := d.alpha.count()
	d.wantForwarded(t, d.raw(serveReq("GET", "/c/alpha/")), before, alice, "/")

	d.setTailscaled(t, func(f *fakeTailnet) { f.serve = tcpForward("127.0.0.1:" + port) })
	// A peer opens a connection through the forward and waits, saying nothing.
	waiting := d.dial(t)
	defer waiting.Close()
	// Connections are accepted in order: once this one is answered, waiting was accepted
	// (while the forward was there).
	before = d.alpha.count()
	d.wantRefused(t, d.raw(serveReq("GET", "/c/alpha/")), before, 401, "tcp-forwardable")

	d.setTailscaled(t, func(f *fakeTailnet) { f.serve = nil })
	before = d.alpha.count()
	d.wantForwarded(t, d.raw(serveReq("GET", "/c/alpha/")), before, alice, "/")

	// The waiting connection speaks now, as bob: still refused, and closed.
	bobReq := strings.Replace(strings.Replace(serveReq("GET", "/c/alpha/late"), aliceIP, bobIP, 1), alice, bob, 1)
	logsBefore := len(d.logs.Events("fleet.rejected"))
	before = d.alpha.count()
	io.WriteString(waiting, crlf(bobReq))
	br := bufio.NewReader(waiting)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get("X-Fleet-Reason") != "tcp-forwardable" {
		t.Errorf("the connection from the forward's time: %d %q (%s), want 401 tcp-forwardable", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), body)
	}
	if n := d.alpha.count(); n != before {
		t.Errorf("the console saw %d request(s)", n-before)
	}
	if lines := d.logs.Events("fleet.rejected")[logsBefore:]; len(lines) != 1 || lines[0]["reason"] != "tcp-forwardable" {
		t.Errorf("want one fleet.rejected tcp-forwardable line, got %v", lines)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the connection stays open after the refusal (%v); it must be closed", err)
	}
}

// TestForwardAnswerTooOld_S5e: an answer older than forwardMaxAge is not used: the request asks
// tailscaled itself, and when that fails it is refused 401 unverified.
func TestForwardAnswerTooOld_S5e(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := startDoor(t, func(c *Config) { c.Now = clk.now })
	before := d.alpha.count()
	d.wantForwarded(t, d.raw(serveReq("GET", "/c/alpha/")), before, alice, "/")

	d.tailnet.set(func(f *fakeTailnet) { f.prefsDown = true })
	clk.advance(forwardMaxAge + time.Second)
	before = d.alpha.count()
	d.wantRefused(t, d.raw(serveReq("GET", "/c/alpha/")), before, 401, "unverified")

	// tailscaled answers again. A connection accepted while fleet knew nothing is refused
	// once (when no tick has polled in between, the first one here is such); then served.
	d.tailnet.set(func(f *fakeTailnet) { f.prefsDown = false })
	clk.advance(forwardMaxAge + time.Second)
	before = d.alpha.count()
	if r := d.raw(serveReq("GET", "/c/alpha/")); r.status != 200 {
		d.wantRefused(t, r, before, 401, "unverified")
		before = d.alpha.count()
		d.wantForwarded(t, d.raw(serveReq("GET", "/c/alpha/")), before, alice, "/")
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
