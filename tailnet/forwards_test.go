package tailnet

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/net/socks5"
	"tailscale.com/tailcfg"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

func (d *door) port() int {
	_, p, _ := net.SplitHostPort(d.Addr)
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
		set    func(f *doortest.FakeTailscaled)
		req    string
		status int
		reason string
	}{
		{"S5e ssh off, no forward", func(f *doortest.FakeTailscaled) {}, doortest.ServeReq("GET", "/c/alpha/"), 200, ""},
		{"S5e ssh on", func(f *doortest.FakeTailscaled) { f.RunSSH = true }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to 127.0.0.1:port", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("127.0.0.1:" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to localhost:port", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("localhost:" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to [::1]:port", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("[::1]:" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to 127.0.0.2:port", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("127.0.0.2:" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to 0.0.0.0:port", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("0.0.0.0:" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to :port", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward(":" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to a name", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("sup.internal:" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e tls-terminated raw forward", func(f *doortest.FakeTailscaled) {
			f.Serve = tcpForward("127.0.0.1:" + port)
			f.Serve.TCP[8022].TerminateTLS = doortest.TSName
		}, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward in a Service", func(f *doortest.FakeTailscaled) {
			f.Serve = &ipn.ServeConfig{Services: map[tailcfg.ServiceName]*ipn.ServiceConfig{
				"svc:db": {TCP: map[uint16]*ipn.TCPPortHandler{5432: {TCPForward: "127.0.0.1:" + port}}}}}
		}, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward in a foreground session", func(f *doortest.FakeTailscaled) {
			f.Serve = &ipn.ServeConfig{Foreground: map[string]*ipn.ServeConfig{"session-1": tcpForward("127.0.0.1:" + port)}}
		}, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e raw forward to another port", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("127.0.0.1:" + other) }, doortest.ServeReq("GET", "/c/alpha/"), 200, ""},
		{"S5e raw forward to another machine", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("192.0.2.7:" + port) }, doortest.ServeReq("GET", "/c/alpha/"), 200, ""},
		{"S5e raw forward to a unix socket", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("unix:/run/db.sock") }, doortest.ServeReq("GET", "/c/alpha/"), 200, ""},
		{"S5e Serve's HTTP proxy to fleet", func(f *doortest.FakeTailscaled) {
			f.Serve = &ipn.ServeConfig{
				TCP: map[uint16]*ipn.TCPPortHandler{443: {HTTPS: true}},
				Web: map[ipn.HostPort]*ipn.WebServerConfig{doortest.TSName + ":443": {Handlers: map[string]*ipn.HTTPHandler{"/": {Proxy: "http://127.0.0.1:" + port}}}},
			}
		}, doortest.ServeReq("GET", "/c/alpha/"), 200, ""},
		{"S5e prefs unknown", func(f *doortest.FakeTailscaled) { f.PrefsDown = true }, doortest.ServeReq("GET", "/c/alpha/"), 401, "unverified"},
		{"S5e serve-config unknown", func(f *doortest.FakeTailscaled) { f.ServeDown = true }, doortest.ServeReq("GET", "/c/alpha/"), 401, "unverified"},
		// tailscaled's outbound proxies dial 127.0.0.1 for whoever reaches them.
		{"S5e socks5 proxy", func(f *doortest.FakeTailscaled) { f.Args = []string{"tailscaled", "--socks5-server=localhost:1055"} }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e http proxy", func(f *doortest.FakeTailscaled) {
			f.Args = []string{"/usr/sbin/tailscaled", "-tun=userspace-networking", "-outbound-http-proxy-listen", "localhost:1055"}
		}, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
		{"S5e proxy flag empty", func(f *doortest.FakeTailscaled) { f.Args = []string{"tailscaled", "--socks5-server="} }, doortest.ServeReq("GET", "/c/alpha/"), 200, ""},
		{"S5e command line unreadable", func(f *doortest.FakeTailscaled) { f.ArgsDown = true }, doortest.ServeReq("GET", "/c/alpha/"), 401, "tcp-forwardable"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.setTailscaled(t, func(f *doortest.FakeTailscaled) {
				f.RunSSH, f.Serve, f.PrefsDown, f.ServeDown, f.Args, f.ArgsDown = false, nil, false, false, nil, false
				row.set(f)
			})
			before := d.Alpha.Count()
			r := d.Raw(row.req)
			switch {
			case row.status != 200:
				d.WantRefused(t, r, before, row.status, row.reason)
				if row.reason == "tcp-forwardable" && (!strings.Contains(r.Body, "fleet serve --socket") || !strings.Contains(r.Body, "tailscale serve unix:")) {
					t.Errorf("the page does not name the unix-socket door: %q", r.Body)
				}
			default:
				d.WantForwarded(t, r, before, doortest.Alice, "/")
			}
		})
	}
}

// TestForwardableSetUpOnlyInLog_S5e: a 401 tcp-forwardable page answers whoever sent the
// request — S5e is judged before S5c, so a Funnel visitor from the internet and a tagged node
// too — so it names the fix (the unix-socket door) and nothing of this machine's set-up: not
// which of tailscaled's features carries a peer's bytes (on the TCP door the page is the same
// whatever the cause), not tailscaled's flags and listen addresses, a forward's target, the
// error reading tailscaled's command line or the door's socket path (which names its owner).
// Those go to the fleet.rejected line's "why", for the operator.
// The same holds for S5e's 401 unverified while tailscaled's prefs cannot be read.
func TestForwardableSetUpOnlyInLog_S5e(t *testing.T) {
	d := startDoor(t)
	sock := d.serveUnix(t)
	port := strconv.Itoa(d.port())
	funnel := doortest.ServeReq("GET", "/c/alpha/", "Tailscale-Funnel-Request: ?1")
	tagged := strings.Replace(strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, doortest.TaggedIP, 1),
		"Tailscale-User-Login: "+doortest.Alice+"\n", "", 1)
	rows := []struct {
		name   string
		set    func(f *doortest.FakeTailscaled)
		unix   bool
		req    string
		reason string
		hidden []string // on this machine only: in the log line's why, never on the page
	}{
		{"S5e outbound proxy, a Funnel visitor", func(f *doortest.FakeTailscaled) {
			f.Args = []string{"tailscaled", "--tun=userspace-networking", "--socks5-server=100.101.102.1:1055"}
		}, false, funnel, "tcp-forwardable", []string{"--socks5-server", "1055"}},
		{"S5e outbound proxy, a tagged node", func(f *doortest.FakeTailscaled) {
			f.Args = []string{"tailscaled", "--tun=userspace-networking", "--socks5-server=100.101.102.1:1055"}
		}, false, tagged, "tcp-forwardable", []string{"--socks5-server", "1055"}},
		{"S5e http proxy", func(f *doortest.FakeTailscaled) {
			f.Args = []string{"/usr/sbin/tailscaled", "-outbound-http-proxy-listen", "127.0.0.1:8081"}
		}, false, funnel, "tcp-forwardable", []string{"-outbound-http-proxy-listen 127.0.0.1:8081"}},
		{"S5e command line unreadable", func(f *doortest.FakeTailscaled) { f.ArgsDown = true }, false, funnel, "tcp-forwardable",
			[]string{"/proc/4242/cmdline: permission denied"}},
		{"S5e Tailscale SSH", func(f *doortest.FakeTailscaled) { f.RunSSH = true }, false, funnel, "tcp-forwardable", []string{"Tailscale SSH is on"}},
		{"S5e raw forward", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("sup.internal:" + port) }, false, funnel, "tcp-forwardable",
			[]string{"sup.internal:" + port}},
		{"S5e raw forward to the unix door's socket", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("unix:" + sock) }, true,
			strings.Replace(unixServeReq, "\n\n", "\nTailscale-Funnel-Request: ?1\n\n", 1), "tcp-forwardable",
			[]string{sock, filepath.Dir(sock)}},
		{"S5e prefs unreadable", func(f *doortest.FakeTailscaled) { f.PrefsDown = true }, false, funnel, "unverified", []string{"prefs unavailable"}},
	}
	tcpPage := ""
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.setTailscaled(t, func(f *doortest.FakeTailscaled) {
				f.RunSSH, f.Serve, f.PrefsDown, f.ServeDown, f.Args, f.ArgsDown = false, nil, false, false, nil, false
				row.set(f)
			})
			before := d.Alpha.Count()
			var r doortest.Response
			if row.unix {
				r = d.rawUnix(t, sock, row.req)
			} else {
				r = d.Raw(row.req)
			}
			d.WantRefused(t, r, before, http.StatusUnauthorized, row.reason)
			lines := d.Logs.Events("fleet.rejected")
			if len(lines) == 0 {
				t.Fatal("no fleet.rejected line")
			}
			line := lines[len(lines)-1]
			why, _ := line["why"].(string)
			detail, _ := line["detail"].(string)
			for _, h := range row.hidden {
				if strings.Contains(r.Body, h) || strings.Contains(r.Body, html.EscapeString(h)) {
					t.Errorf("the page shows %q of this machine's set-up: %q", h, r.Body)
				}
				if strings.Contains(detail, h) {
					t.Errorf("the log line's detail (the page's sentence) has %q: %q", h, detail)
				}
				if !strings.Contains(why, h) {
					t.Errorf("the log line's why should keep %q for the operator: %q", h, why)
				}
			}
			// The answer is JSON to a caller without Accept, the page to a browser (U5).
			var asJSON struct{ Detail string }
			json.Unmarshal([]byte(r.Body), &asJSON)
			if detail == "" || (!strings.Contains(r.Body, html.EscapeString(detail)) && asJSON.Detail != detail) {
				t.Errorf("the log line's detail %q is not what the page says: %q", detail, r.Body)
			}
			if row.reason != "tcp-forwardable" {
				return
			}
			if !strings.Contains(r.Body, "tailscale serve unix:PATH") {
				t.Errorf("the page does not name the fix: %q", r.Body)
			}
			if !row.unix {
				if !strings.Contains(r.Body, "fleet serve --socket PATH") {
					t.Errorf("the page does not name the unix-socket door: %q", r.Body)
				}
				if tcpPage == "" {
					tcpPage = r.Body
				} else if r.Body != tcpPage {
					t.Errorf("the page tells the causes apart:\n%q\n%q", r.Body, tcpPage)
				}
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
	before := d.Alpha.Count()
	d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, doortest.Alice, "/")

	d.setTailscaled(t, func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("127.0.0.1:" + port) })
	// A peer opens a connection through the forward and waits, saying nothing.
	waiting := d.Dial()
	defer waiting.Close()
	// Connections are accepted in order: once this one is answered, waiting was accepted
	// (while the forward was there).
	before = d.Alpha.Count()
	d.WantRefused(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, 401, "tcp-forwardable")

	d.setTailscaled(t, func(f *doortest.FakeTailscaled) { f.Serve = nil })
	before = d.Alpha.Count()
	d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, doortest.Alice, "/")

	// The waiting connection speaks now, as bob: still refused, and closed.
	bobReq := strings.Replace(strings.Replace(doortest.ServeReq("GET", "/c/alpha/late"), doortest.AliceIP, doortest.BobIP, 1), doortest.Alice, doortest.Bob, 1)
	logsBefore := len(d.Logs.Events("fleet.rejected"))
	before = d.Alpha.Count()
	io.WriteString(waiting, rawhttp.CRLF(bobReq))
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
	if n := d.Alpha.Count(); n != before {
		t.Errorf("the console saw %d request(s)", n-before)
	}
	if lines := d.Logs.Events("fleet.rejected")[logsBefore:]; len(lines) != 1 || lines[0]["reason"] != "tcp-forwardable" {
		t.Errorf("want one fleet.rejected tcp-forwardable line, got %v", lines)
	} else if why, _ := lines[0]["why"].(string); !strings.Contains(why, "127.0.0.1:"+port) {
		t.Errorf("the log line should name the forward fleet saw when the connection was opened: why %q", why)
	}
	if strings.Contains(string(body), "127.0.0.1:"+port) {
		t.Errorf("the page shows the forward's target: %s", body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the connection stays open after the refusal (%v); it must be closed", err)
	}
}

// TestForwardAnswerTooOld_S5e: an answer older than forwardMaxAge is not used: the request asks
// tailscaled itself, and when that fails it is refused 401 unverified.
func TestForwardAnswerTooOld_S5e(t *testing.T) {
	clk := &wallClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := startDoor(t, func(c *Config) { c.Now = clk.now })
	before := d.Alpha.Count()
	d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, doortest.Alice, "/")

	d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.PrefsDown = true })
	clk.advance(forwardMaxAge + time.Second)
	before = d.Alpha.Count()
	d.WantRefused(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, 401, "unverified")

	// tailscaled answers again. A connection accepted while fleet knew nothing is refused
	// once (when no tick has polled in between, the first one here is such); then served.
	d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.PrefsDown = false })
	clk.advance(forwardMaxAge + time.Second)
	before = d.Alpha.Count()
	if r := d.Raw(doortest.ServeReq("GET", "/c/alpha/")); r.Status != 200 {
		d.WantRefused(t, r, before, 401, "unverified")
		before = d.Alpha.Count()
		d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, doortest.Alice, "/")
	}
}

// TestUnixDoorForwardable_S5e: the unix-socket door is not reached by Tailscale SSH, so it is
// served while SSH is on; but a raw TCP forward can name a unix socket, and while one names this
// door's socket (however spelled), its /c/ requests are 401 tcp-forwardable.
func TestUnixDoorForwardable_S5e(t *testing.T) {
	d := startDoor(t)
	sock := d.serveUnix(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Dir(sock), link); err != nil {
		t.Fatal(err)
	}
	rows := []struct {
		name   string
		set    func(f *doortest.FakeTailscaled)
		status int
		reason string
	}{
		{"S5e unix door, ssh off", func(f *doortest.FakeTailscaled) {}, 200, ""},
		{"S5e unix door, ssh on", func(f *doortest.FakeTailscaled) { f.RunSSH = true }, 200, ""},
		{"S5e unix door, raw forward to the TCP door", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward(d.Addr) }, 200, ""},
		{"S5e unix door, raw forward to another socket", func(f *doortest.FakeTailscaled) {
			f.Serve = tcpForward("unix:" + filepath.Join(filepath.Dir(sock), "other.sock"))
		}, 200, ""},
		{"S5e unix door, Serve's HTTP proxy to it", func(f *doortest.FakeTailscaled) {
			f.Serve = &ipn.ServeConfig{
				TCP: map[uint16]*ipn.TCPPortHandler{443: {HTTPS: true}},
				Web: map[ipn.HostPort]*ipn.WebServerConfig{doortest.TSName + ":443": {Handlers: map[string]*ipn.HTTPHandler{"/": {Proxy: "unix:" + sock}}}},
			}
		}, 200, ""},
		{"S5e unix door, raw forward to its socket", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("unix:" + sock) }, 401, "tcp-forwardable"},
		{"S5e unix door, raw forward to its socket, uncleaned path", func(f *doortest.FakeTailscaled) {
			f.Serve = tcpForward("unix:" + filepath.Dir(sock) + "/./" + filepath.Base(sock))
		}, 401, "tcp-forwardable"},
		{"S5e unix door, raw forward to its socket through a symlink", func(f *doortest.FakeTailscaled) {
			f.Serve = tcpForward("unix:" + filepath.Join(link, filepath.Base(sock)))
		}, 401, "tcp-forwardable"},
		{"S5e unix door, raw forward to a relative path of its name", func(f *doortest.FakeTailscaled) { f.Serve = tcpForward("unix:" + filepath.Base(sock)) }, 401, "tcp-forwardable"},
		{"S5e unix door, raw forward to its socket in a Service", func(f *doortest.FakeTailscaled) {
			f.Serve = &ipn.ServeConfig{Services: map[tailcfg.ServiceName]*ipn.ServiceConfig{
				"svc:fleet": {TCP: map[uint16]*ipn.TCPPortHandler{443: {TCPForward: "unix:" + sock, TerminateTLS: "fleet." + doortest.TSName}}}}}
		}, 401, "tcp-forwardable"},
		{"S5e unix door, prefs unknown", func(f *doortest.FakeTailscaled) { f.PrefsDown = true }, 401, "unverified"},
		{"S5e unix door, serve-config unknown", func(f *doortest.FakeTailscaled) { f.ServeDown = true }, 401, "unverified"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.setTailscaled(t, func(f *doortest.FakeTailscaled) {
				f.RunSSH, f.Serve, f.PrefsDown, f.ServeDown = false, nil, false, false
				row.set(f)
			})
			before := d.Alpha.Count()
			r := d.rawUnix(t, sock, unixServeReq)
			if row.status == 200 {
				d.WantForwarded(t, r, before, doortest.Alice, "/")
				return
			}
			d.WantRefused(t, r, before, row.status, row.reason)
			if row.reason == "tcp-forwardable" && !strings.Contains(r.Body, "tailscale serve unix:") {
				t.Errorf("the page does not name the fix: %q", r.Body)
			}
		})
	}
}

// TestForwardTargets_S5e: which TCPForward targets may reach the TCP door on port 7420.
func TestForwardTargets_S5e(t *testing.T) {
	for target, want := range map[string]bool{
		"127.0.0.1:7420": true, "localhost:7420": true, "[::1]:7420": true, "127.1.2.3:7420": true,
		"0.0.0.0:7420": true, "[::]:7420": true, ":7420": true, "[::ffff:127.0.0.1]:7420": true,
		"LOCALHOST:7420": true, "box.example:7420": true, "127.0.0.1:07420": true,
		"nonsense": true, "127.0.0.1:no-such-service": true,
		"127.0.0.1:7421": false, "192.0.2.1:7420": false, "[fd7a:115c:a1e0::1]:7420": false,
		"unix:/run/fleet.sock": false,
	} {
		if got := tcpTargetReaches(target, 7420); got != want {
			t.Errorf("S5e target %q: reaches 7420 = %v, want %v", target, got, want)
		}
	}
}

// gatedAPI counts LocalAPI calls; WhoIs of a bare address waits until release is closed.
type gatedAPI struct {
	LocalAPI
	release chan struct{}

	mu                   sync.Mutex
	bare, conns, statuss int
}

func (g *gatedAPI) WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error) {
	if _, err := netip.ParseAddrPort(addr); err == nil {
		resp, err := g.LocalAPI.WhoIs(ctx, addr)
		g.mu.Lock()
		g.conns++
		g.mu.Unlock()
		return resp, err
	}
	g.mu.Lock()
	g.bare++
	g.mu.Unlock()
	<-g.release
	return g.LocalAPI.WhoIs(ctx, addr)
}

func (g *gatedAPI) StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error) {
	g.mu.Lock()
	g.statuss++
	g.mu.Unlock()
	return g.LocalAPI.StatusWithoutPeers(ctx)
}

func (g *gatedAPI) counts() (bare, conns, statuss int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bare, g.conns, g.statuss
}

// TestParallelFirstRequestsShareLookups_S11: 20 parallel first requests of one caller make one
// WhoIs of its address and one status call, not one each.
func TestParallelFirstRequestsShareLookups_S11(t *testing.T) {
	const n = 20
	g := &gatedAPI{release: make(chan struct{})}
	d := startDoor(t, func(c *Config) { g.LocalAPI = c.LocalAPI; c.LocalAPI = g })
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", d.Addr)
			if err != nil {
				return
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
			io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/")))
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				statuses[i] = resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	// Let the callers' WhoIs go once every connection has been judged (S5a/b), so that all 20
	// requests are on their way to it together.
	waitUntil(func() bool { _, conns, _ := g.counts(); return conns == n })
	close(g.release)
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Errorf("request %d: %d, want 200", i, st)
		}
	}
	if bare, _, statuss := g.counts(); bare != 1 || statuss != 1 {
		t.Errorf("%d WhoIs calls of the caller's address and %d status calls for %d parallel first requests, want 1 and 1", bare, statuss, n)
	}
}

// TestPeerLookupsBounded_S9: the peer-uid lookups of accepted connections are bounded; a
// connection that finds no free slot in time is refused 401 unverified, never forwarded.
func TestPeerLookupsBounded_S9(t *testing.T) {
	d := startDoor(t)
	for range cap(d.v.lookups) {
		d.v.lookups <- struct{}{} // every slot taken
	}
	before := d.Alpha.Count()
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha/"))
	d.WantRefused(t, r, before, 401, "unverified")
	if !strings.Contains(r.Body, "too many connections") {
		t.Errorf("the page does not say why: %q", r.Body)
	}
	for range cap(d.v.lookups) {
		<-d.v.lookups
	}
	before = d.Alpha.Count()
	d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, doortest.Alice, "/")
}

// TestTailscaledOutboundProxyRefused_S5e: tailscaled's uid proves that tailscaled opened a
// connection, not that Serve's HTTP proxy did (SPEC S5e). Besides Tailscale SSH and raw Serve
// forwards, tailscaled has a third way to carry bytes someone else wrote to 127.0.0.1:PORT: its
// outbound proxies, `tailscaled --socks5-server=localhost:1055` and
// `--outbound-http-proxy-listen=localhost:1055` (the documented set-up for userspace networking;
// TS_SOCKS5_SERVER / TS_OUTBOUND_HTTP_PROXY_LISTEN in the official container). They take no
// credential, and dial a loopback destination as tailscaled itself (cmd/tailscaled/proxy.go:
// Dialer: dialer.UserDial; net/tsdial/tsdial.go: a non-tailnet address goes to SystemDial, a
// plain dial for localhost, net/netns/netns_linux.go:90) without registering the connection with
// netstack's proxy mapper, so WhoIs(RemoteAddr) says "not found" (S5b passes). Who reaches the
// proxy: every local process of any user, and — with userspace networking — every tailnet peer
// the policy lets reach port 1055 (netstack forwards it to 127.0.0.1:1055; S5b sees only the
// proxy's own connection). Neither shows in prefs nor in the Serve config.
//
// Here the test process is tailscaled (TailscaledUID is its uid) running Tailscale's own SOCKS5
// server with the dial tailscaled uses for 127.0.0.1; the fake LocalAPI says what real tailscaled
// says: userspace networking, SSH off, no raw forward, WhoIs(ip:port) not found; and its
// command line names --socks5-server, which is how fleet knows (forwards.go): 401
// tcp-forwardable, nothing forwarded.
func TestTailscaledOutboundProxyRefused_S5e(t *testing.T) {
	d := startDoor(t)
	d.setTailscaled(t, func(f *doortest.FakeTailscaled) {
		f.Args = []string{"/usr/sbin/tailscaled", "--tun=userspace-networking", "--socks5-server=localhost:1055"}
	})
	proxyLn, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxyLn.Close() })
	go (&socks5.Server{Logf: func(string, ...any) {}, Dialer: new(net.Dialer).DialContext}).Serve(proxyLn)

	// Anyone who reaches the proxy: SOCKS5, no auth, CONNECT 127.0.0.1:<the door's port>.
	conn, err := net.Dial("tcp", proxyLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	door := netip.MustParseAddrPort(d.Addr)
	ip4 := door.Addr().As4()
	hello := []byte{5, 1, 0, 5, 1, 0, 1, ip4[0], ip4[1], ip4[2], ip4[3], byte(door.Port() >> 8), byte(door.Port())}
	if _, err := conn.Write(hello); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var head [6]byte // method choice (2), then VER REP RSV ATYP
	if _, err := io.ReadFull(br, head[:]); err != nil || head[1] != 0 || head[3] != 0 {
		t.Fatalf("SOCKS5 handshake: %v %v", head, err)
	}
	skip := 4 + 2 // IPv4 address and port
	if head[5] == 4 {
		skip = 16 + 2
	}
	if _, err := br.Discard(skip); err != nil {
		t.Fatal(err)
	}

	// The bytes the proxy's user writes: bob's tailnet address, as Serve would send it.
	forged := "GET /c/alpha/ HTTP/1.1\nHost: " + doortest.TSName + "\nX-Forwarded-For: " + doortest.BobIP +
		"\nX-Forwarded-Host: " + doortest.TSName + "\nX-Forwarded-Proto: https\nTailscale-User-Login: " + doortest.Bob + "\n\n"
	before := d.Alpha.Count()
	if _, err := io.WriteString(conn, rawhttp.CRLF(forged)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if d.Alpha.Count() == before {
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Fleet-Reason") != "tcp-forwardable" {
			t.Errorf("through tailscaled's SOCKS5 proxy: %d %q, want 401 tcp-forwardable", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
		}
		return
	}
	s, _ := d.Alpha.Last()
	t.Errorf("a request written by whoever reached tailscaled's SOCKS5 proxy got %d %q and reached the console as %q: "+
		"fleet cannot tell tailscaled's outbound proxy from Serve's HTTP proxy",
		resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), s.Header.Get("X-Phase-Console-Fleet-Login"))
}

// TestUnixForwardRelativePath_S5e: "while the Serve config forwards raw TCP to the unix
// door's own socket (compare resolved paths), that door's /c/ requests are 401 tcp-forwardable".
// A relative TCPForward "unix:PATH" is dialled by tailscaled relative to its working folder — "/"
// for the systemd service — which fleet cannot know, so any relative PATH counts as this socket
// (comparing only its last element would pass a symlink to the socket, spelled relative to "/",
// for some other socket). So does a missing PATH that others could make a link to the socket
// before tailscaled's next dial (below /tmp).
func TestUnixForwardRelativePath_S5e(t *testing.T) {
	d := startDoor(t)
	sock := d.serveUnix(t)
	link := filepath.Join(filepath.Dir(sock), "tcp-in.sock")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{
		"unix:" + link[1:], // what tailscaled, in "/", dials: the door's socket
		"unix:" + sock[1:], // the socket's own name, relative to "/"
		"unix:" + filepath.Base(sock),
		"unix:/tmp/fleet-missing-" + strconv.Itoa(os.Getpid()) + ".sock", // anyone may make it a link
	} {
		t.Run(target, func(t *testing.T) {
			d.setTailscaled(t, func(f *doortest.FakeTailscaled) { f.Serve = tcpForward(target) })
			before := d.Alpha.Count()
			r := d.rawUnix(t, sock, unixServeReq)
			if r.Status != http.StatusUnauthorized || r.Reason != "tcp-forwardable" {
				t.Errorf("raw forward %q, which reaches the door's socket from tailscaled's working folder: got %d %q, want 401 tcp-forwardable (console saw %d new)",
					target, r.Status, r.Reason, d.Alpha.Count()-before)
			}
		})
	}
}
