package tailnet

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
	"tailscale.com/tstest/integration/testcontrol"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/doctor"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/internal/tailnettest"
	"github.com/phase-console/fleet/supervisor"
)

var verbose = flag.Bool("verbose-tailnet", false, "print the logs of control, DERP, the tsnet nodes and the supervisor")

const (
	magicDNSDomain = "tail-scale.ts.net"
	robotTag       = "tag:robot"
	// testBudget bounds the whole test: every wait below is bounded by it.
	testBudget = 3 * time.Minute
)

func TestMain(m *testing.M) {
	flag.Parse()
	tailnettest.Prepare()
	os.Exit(m.Run())
}

// A node is one tsnet node of the test tailnet.
type node struct {
	name  string
	srv   *tsnet.Server
	lc    *local.Client
	ip    netip.Addr // its Tailscale IPv4
	login string     // WhoIs's login for it, as sup sees it
}

func startNode(t *testing.T, ctx context.Context, control *testcontrol.Server, name string, tags ...string) *node {
	t.Helper()
	n := tailnettest.StartNode(t, ctx, *verbose, control, name, tags...)
	return &node{name: n.Name, srv: n.Srv, lc: n.LC, ip: n.IP}
}

// seen is one request as it reached the echo console.
type seen struct {
	method string
	path   string
	header http.Header
}

// echoConsole records everything that reaches it, by path, and answers with X-Echo: its name.
type echoConsole struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[string][]seen
}

func newEchoConsole(t *testing.T, name string) *echoConsole {
	e := &echoConsole{seen: map[string][]seen{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen[r.URL.Path] = append(e.seen[r.URL.Path], seen{method: r.Method, path: r.URL.Path, header: r.Header.Clone()})
		e.mu.Unlock()
		w.Header().Set("X-Echo", name)
		io.WriteString(w, name+" saw "+r.URL.Path)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *echoConsole) at(path string) []seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]seen(nil), e.seen[path]...)
}

// directAPI is sup's LocalAPI, except that WhoIs recognises the ip:port of connections named in
// direct as the tailnet peer asIP: what real tailscaled answers for a netstack direct forward
// under userspace networking (S5b), which tsnet cannot produce.
type directAPI struct {
	*local.Client
	asIP   netip.Addr
	mu     sync.Mutex
	direct map[string]bool
}

func (d *directAPI) WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error) {
	d.mu.Lock()
	hit := d.direct[addr]
	d.mu.Unlock()
	if hit {
		return d.Client.WhoIs(ctx, d.asIP.String())
	}
	return d.Client.WhoIs(ctx, addr)
}

func (d *directAPI) markDirect(addr string) {
	d.mu.Lock()
	d.direct[addr] = true
	d.mu.Unlock()
}

// logLines keeps the supervisor's JSON log lines (slog's handler writes each line in one Write).
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *logLines) Write(p []byte) (int, error) {
	var line map[string]any
	if json.Unmarshal(p, &line) == nil {
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
	return len(p), nil
}

// rejected is the fleet.rejected lines logged for a request of path.
func (l *logLines) rejected(path string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range l.lines {
		if line["msg"] == "fleet.rejected" && line["path"] == path {
			out = append(out, line)
		}
	}
	return out
}

// countingListener counts the connections the supervisor accepts. It hands out the accepted
// *net.TCPConn itself, so the supervisor judges the real connection.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// fixture is the whole tailnet with fleet on it.
type fixture struct {
	ctx     context.Context
	control *testcontrol.Server
	door    *supervisortest.Door
	sup     *node
	supFQDN string
	alice   *node
	bob     *node
	robot   *node
	console *echoConsole
	api     *directAPI
	ln      *countingListener
	logs    *logLines
	home    string
	port    int
}

func startFixture(t *testing.T) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), testBudget)
	t.Cleanup(cancel)
	began := time.Now()

	f := &fixture{ctx: ctx, control: tailnettest.StartControl(t, *verbose, magicDNSDomain, func(c *testcontrol.Server) {
		c.TagOwners = map[string][]string{robotTag: nil} // robotTag may be claimed by a node at sign-up
		// Lets a node turn Tailscale SSH on (S5e); the empty policy lets no SSH login in.
		c.SSHPolicy = &tailcfg.SSHPolicy{}
	})}
	f.sup = startNode(t, ctx, f.control, "sup")
	f.alice = startNode(t, ctx, f.control, "alice")
	f.bob = startNode(t, ctx, f.control, "bob")
	f.robot = startNode(t, ctx, f.control, "robot", robotTag)

	st, err := f.sup.lc.StatusWithoutPeers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.supFQDN = strings.TrimSuffix(st.Self.DNSName, ".")
	if st.TUN {
		t.Fatalf("tsnet reports TUN:true; the S5b checks below need userspace networking")
	}

	// sup must know every client before Serve can name it: wait until WhoIs of each answers.
	for _, n := range []*node{f.alice, f.bob, f.robot} {
		who := tailnettest.WaitWhoIs(t, ctx, f.sup.lc, n.ip)
		n.login = who.UserProfile.LoginName
		if tagged := who.Node.IsTagged(); tagged != (n == f.robot) {
			t.Fatalf("node %s: IsTagged = %v", n.name, tagged)
		}
	}
	if f.alice.login == f.bob.login || !strings.HasSuffix(f.alice.login, "@fake-control.example.net") {
		t.Fatalf("logins %q and %q: want two different testcontrol users", f.alice.login, f.bob.login)
	}

	// The console and the supervisor, as fleet serve would run them.
	f.console = newEchoConsole(t, "alpha")
	f.home = filepath.Join(t.TempDir(), "state")
	f.api = &directAPI{Client: f.sup.lc, asIP: f.alice.ip, direct: map[string]bool{}}
	f.logs = new(logLines)
	var logOut io.Writer = f.logs
	if *verbose {
		logOut = io.MultiWriter(f.logs, os.Stderr)
	}
	raw, err := supervisor.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	f.ln = &countingListener{Listener: raw}
	f.port = raw.Addr().(*net.TCPAddr).Port
	f.door = supervisortest.StartOn(t, supervisor.Config{
		StateHome:     f.home,
		LocalAPI:      f.api,
		TailscaledUID: os.Getuid(), // tsnet runs in this process: its backend connections are ours
		// and its command line is this process's (no outbound proxy; tsnet's LocalAPI has no
		// socket to find a process by).
		TailscaledArgs: func(context.Context) ([]string, error) { return os.Args, nil },
		Logger:         slog.New(slog.NewJSONHandler(logOut, nil)),
	}, f.ln)
	f.door.Register(t, supervisor.Console{ID: "alpha", Addr: f.console.srv.Listener.Addr().String(), Name: "Alpha"})

	// Publish it: tailscale serve --http=80 http://127.0.0.1:<port>.
	if err := f.sup.lc.SetServeConfig(ctx, f.serveConfig()); err != nil {
		t.Fatal(err)
	}
	// Every client must reach Serve before the checks start: retry one request each until
	// fleet answers it (any answer that carries fleet's reason header or the console's).
	for _, n := range []*node{f.alice, f.bob, f.robot} {
		f.waitReach(t, n)
	}
	t.Logf("tailnet with 4 nodes, Serve and fleet up in %v", time.Since(began).Round(time.Millisecond))
	return f
}

func (f *fixture) serveConfig() *ipn.ServeConfig {
	return &ipn.ServeConfig{
		TCP: map[uint16]*ipn.TCPPortHandler{80: {HTTP: true}},
		Web: map[ipn.HostPort]*ipn.WebServerConfig{
			ipn.HostPort(f.supFQDN + ":80"): {Handlers: map[string]*ipn.HTTPHandler{
				"/": {Proxy: "http://127.0.0.1:" + strconv.Itoa(f.port)},
			}},
		},
	}
}

func (f *fixture) waitReach(t *testing.T, n *node) {
	t.Helper()
	for {
		resp, err := f.get(n, "/c/alpha/ready", nil)
		if err == nil && (resp.Header.Get("X-Fleet-Reason") != "" || resp.Header.Get("X-Echo") != "") {
			return
		}
		select {
		case <-f.ctx.Done():
			t.Fatalf("node %s never reached fleet through Serve: %v (last: %v)", n.name, f.ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// get sends a request from node n to sup's Serve, by address with sup's name as Host (Serve
// picks its handler by Host), with extra headers written exactly as given.
func (f *fixture) get(n *node, path string, extra [][2]string) (*http.Response, error) {
	return f.do(n, http.MethodGet, path, extra)
}

func (f *fixture) do(n *node, method, path string, extra [][2]string) (*http.Response, error) {
	resp, _, err := f.doRead(n, method, path, extra)
	return resp, err
}

// doRead is do, returning the answer's body too (at most 1 MiB).
func (f *fixture) doRead(n *node, method, path string, extra [][2]string) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+f.sup.ip.String()+path, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Host = f.supFQDN
	for _, h := range extra {
		req.Header[h[0]] = append(req.Header[h[0]], h[1]) // no canonicalising: the bytes as given
	}
	resp, err := n.srv.HTTPClient().Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, err
	}
	return resp, body, nil
}

func (f *fixture) mustDo(t *testing.T, n *node, method, path string, extra ...[2]string) *http.Response {
	t.Helper()
	resp, err := f.do(n, method, path, extra)
	if err != nil {
		t.Fatalf("%s %s from %s: %v", method, path, n.name, err)
	}
	return resp
}

func wantRefused(t *testing.T, resp *http.Response, status int, reason string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("X-Fleet-Reason") != reason {
		t.Fatalf("got %d %q, want %d %q", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), status, reason)
	}
}

// forwarded checks that exactly one request reached the console alpha at path, asserted as login
// from ip, and returns it.
func (f *fixture) forwarded(t *testing.T, resp *http.Response, path, login string, ip netip.Addr) seen {
	t.Helper()
	return forwardedTo(t, f.console, "alpha", resp, path, login, ip)
}

// forwardedTo is forwarded for the console c registered as id.
func forwardedTo(t *testing.T, c *echoConsole, id string, resp *http.Response, path, login string, ip netip.Addr) seen {
	t.Helper()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Echo") != id {
		t.Fatalf("%s: got %d %q, want 200 from the console %s", path, resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), id)
	}
	got := c.at(strings.TrimPrefix(path, "/c/"+id))
	if len(got) != 1 {
		t.Fatalf("%s: the console saw it %d times, want once", path, len(got))
	}
	s := got[0]
	if v := s.header.Values(contract.HeaderFleetLogin); len(v) != 1 || v[0] != login {
		t.Errorf("%s: %s = %q, want [%q]", path, contract.HeaderFleetLogin, v, login)
	}
	if v := s.header.Values(contract.HeaderFleet); len(v) != 1 || v[0] == "" {
		t.Errorf("%s: the fleet token was not asserted", path)
	}
	if v := s.header.Values("X-Forwarded-For"); len(v) != 1 || v[0] != ip.String() {
		t.Errorf("%s: X-Forwarded-For = %q, want [%q]", path, v, ip)
	}
	return s
}

// waitReason repeats a GET from n through Serve until fleet answers it with reason ("": the
// console answered), for at most 20 s. Only the last answer matters: fleet reflects a change of
// tailscaled's Serve config within 5 s, not at once.
func (f *fixture) waitReason(t *testing.T, n *node, path, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	for {
		resp, err := f.get(n, path, nil)
		if err == nil {
			got := resp.Header.Get("X-Fleet-Reason")
			if got == reason && (reason != "" || resp.Header.Get("X-Echo") == "alpha") {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s from %s never answered with reason %q: %v (last: %v)", path, n.name, reason, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// throughForward opens a connection from n to sup's port (a raw TCP forward in Serve), writes
// req as it is, and returns the status and reason of the answer.
func (f *fixture) throughForward(t *testing.T, n *node, port uint16, req string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	c, err := n.srv.Dial(ctx, "tcp", netip.AddrPortFrom(f.sup.ip, port).String())
	if err != nil {
		t.Fatalf("dialling sup:%d from %s: %v", port, n.name, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer through the forward: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Fleet-Reason")
}

func (f *fixture) notForwarded(t *testing.T, path string) {
	t.Helper()
	notForwardedTo(t, f.console, "alpha", path)
}

// notForwardedTo checks that nothing reached the console c, registered as id, at path.
func notForwardedTo(t *testing.T, c *echoConsole, id, path string) {
	t.Helper()
	if got := c.at(strings.TrimPrefix(path, "/c/"+id)); len(got) != 0 {
		t.Fatalf("%s reached the console %s %d times; it must never", path, id, len(got))
	}
}

// pollUntil asks cond every 100 ms until it holds (true) or 20 s have passed (false): a bound on
// how long tailscaled or fleet may take to reflect a change, never an assertion about speed.
func (f *fixture) pollUntil(cond func() bool) bool {
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// supSeesCapability reports whether sup's WhoIs of n's address answers, and whether its answer
// carries the app capability name as want says: whether a change of the tailnet's grants has
// reached sup's netmap. A WhoIs that fails is neither answer.
func (f *fixture) supSeesCapability(n *node, name tailcfg.PeerCapability, want bool) bool {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	who, err := f.sup.lc.WhoIs(ctx, n.ip.String())
	if err != nil {
		return false
	}
	_, ok := who.CapMap[name]
	return ok == want
}

// served reports whether a GET from n of path reached the console id.
func (f *fixture) served(n *node, id, path string) bool {
	resp, err := f.get(n, path, nil)
	return err == nil && resp.StatusCode == http.StatusOK && resp.Header.Get("X-Echo") == id
}

// indexIDs is the JSON index as n sees it through Serve: the caller's login and the console ids.
func (f *fixture) indexIDs(t *testing.T, n *node) (string, []string) {
	t.Helper()
	resp, body, err := f.doRead(n, "GET", "/", [][2]string{{"Accept", "application/json"}})
	if err != nil {
		t.Fatalf("index from %s: %v", n.name, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("index from %s: %d %q", n.name, resp.StatusCode, resp.Header.Get("X-Fleet-Reason"))
	}
	var idx struct {
		Login    string `json:"login"`
		Consoles []struct {
			ID string `json:"id"`
		} `json:"consoles"`
	}
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatalf("index JSON %q: %v", body, err)
	}
	ids := []string{}
	for _, c := range idx.Consoles {
		ids = append(ids, c.ID)
	}
	return idx.Login, ids
}

// TestTailnet brings one tailnet up and proves each rule on it; the subtests share it and run in
// order.
func TestTailnet(t *testing.T) {
	f := startFixture(t)

	t.Run("S5_user_login_asserted", func(t *testing.T) {
		for _, n := range []*node{f.alice, f.bob} {
			path := "/c/alpha/s5/" + n.name
			f.forwarded(t, f.mustDo(t, n, "GET", path), path, n.login, n.ip)
		}
	})

	t.Run("S5_two_users_one_backend_connection", func(t *testing.T) {
		before := f.ln.accepted.Load()
		order := []*node{f.alice, f.bob, f.alice, f.bob}
		for i, n := range order {
			path := fmt.Sprintf("/c/alpha/s5-shared/%d-%s", i, n.name)
			f.forwarded(t, f.mustDo(t, n, "GET", path), path, n.login, n.ip)
		}
		// tailscaled keeps one backend connection to the supervisor and sends every user's
		// requests over it; the logins above were still told apart, request by request.
		if opened := f.ln.accepted.Load() - before; opened > 1 {
			t.Errorf("Serve opened %d backend connections for %d sequential requests; want them on one (this test is about sharing it)", opened, len(order))
		} else {
			t.Logf("%d requests of 2 users over %d new backend connection(s) (0: the one already open)", len(order), opened)
		}
	})

	t.Run("S5c_tagged_node_refused", func(t *testing.T) {
		path := "/c/alpha/s5c/robot"
		wantRefused(t, f.mustDo(t, f.robot, "GET", path), http.StatusForbidden, "tagged-node")
		f.notForwarded(t, path)
		// A tagged node cannot borrow a user's login by writing Serve's header itself.
		path = "/c/alpha/s5c/robot-forged"
		wantRefused(t, f.mustDo(t, f.robot, "GET", path, [2]string{"Tailscale-User-Login", f.alice.login}), http.StatusForbidden, "tagged-node")
		f.notForwarded(t, path)
	})

	t.Run("S4_forged_identity_headers_stripped", func(t *testing.T) {
		path := "/c/alpha/s4/forged"
		resp := f.mustDo(t, f.alice, "GET", path,
			[2]string{"Tailscale-User-Login", f.bob.login},
			[2]string{"Tailscale-User-Name", "Bob"},
			[2]string{"X-Forwarded-For", f.bob.ip.String()},
			[2]string{"Tailscale_User_Login", f.bob.login},
			[2]string{"X_Forwarded_For", f.bob.ip.String()},
			[2]string{"X-Real-Ip", f.bob.ip.String()},
			[2]string{"Forwarded", "for=" + f.bob.ip.String()},
			[2]string{"X-Forwarded-Host", "evil.example"},
			[2]string{"X-Webauth-User", f.bob.login},
		)
		s := f.forwarded(t, resp, path, f.alice.login, f.alice.ip)
		for name, vals := range s.header {
			folded := contract.FoldName(name)
			if strings.HasPrefix(folded, "tailscale-") || folded == "x-real-ip" || folded == "forwarded" || strings.HasPrefix(folded, "x-webauth-") {
				t.Errorf("the console saw %s: %q", name, vals)
			}
			for _, v := range vals {
				if strings.Contains(v, f.bob.login) || strings.Contains(v, f.bob.ip.String()) || strings.Contains(v, "evil.example") {
					t.Errorf("the console saw the forged %s: %q", name, v)
				}
			}
		}
		if v := s.header.Values("X-Forwarded-Host"); len(v) != 1 || v[0] != f.supFQDN {
			t.Errorf("X-Forwarded-Host = %q, want [%q]", v, f.supFQDN)
		}
	})

	t.Run("S3_assertion_headers_refused", func(t *testing.T) {
		for i, h := range [][2]string{
			{"X-Phase-Console-Fleet-Login", f.bob.login},
			{"X-Phase-Console-Fleet", "guess"},
			{"x_phase_console_fleet_login", f.bob.login},
			{"X-Phase-Console-Fleet-Login", ""},
		} {
			path := fmt.Sprintf("/c/alpha/s3/%d", i)
			wantRefused(t, f.mustDo(t, f.alice, "GET", path, h), http.StatusBadRequest, "assertion-sent")
			f.notForwarded(t, path)
		}
	})

	t.Run("S5_own_address_refused", func(t *testing.T) {
		// The node itself asks its own Serve: WhoIs names the node's owner, but any process on
		// the machine could have sent this, so fleet refuses it (403 self).
		path := "/c/alpha/self"
		resp, err := f.do(f.sup, "GET", path, nil)
		if err != nil {
			t.Skipf("tsnet cannot reach its own Serve from the node itself here: %v", err)
		}
		wantRefused(t, resp, http.StatusForbidden, "self")
		f.notForwarded(t, path)
	})

	t.Run("S7_hooks_refused", func(t *testing.T) {
		for _, m := range []string{"GET", "POST"} {
			for _, path := range []string{"/c/alpha/hooks", "/c/alpha/hooks/permission-request", "/c/alpha/Hooks/x"} {
				wantRefused(t, f.mustDo(t, f.alice, m, path), http.StatusForbidden, "hooks")
				f.notForwarded(t, path)
			}
		}
	})

	t.Run("S5b_direct_connection_refused", func(t *testing.T) {
		// A connection to the supervisor that tailscaled's WhoIs recognises as a tailnet peer —
		// a netstack forward straight to 127.0.0.1 — is refused, whatever it claims.
		raw := func(path string, direct bool) (int, string) {
			t.Helper()
			d := net.Dialer{}
			c, err := d.DialContext(f.ctx, "tcp4", "127.0.0.1:"+strconv.Itoa(f.port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			if direct {
				f.api.markDirect(c.LocalAddr().String())
			}
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nX-Forwarded-For: %s\r\nTailscale-User-Login: %s\r\nConnection: close\r\n\r\n",
				path, f.supFQDN, f.alice.ip, f.alice.login)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("X-Fleet-Reason")
		}
		path := "/c/alpha/s5b/direct"
		if st, reason := raw(path, true); st != http.StatusUnauthorized || reason != "unverified" {
			t.Fatalf("direct connection: %d %q, want 401 unverified", st, reason)
		}
		f.notForwarded(t, path)
		// The control: the same bytes from the same uid on a connection that WhoIs does not
		// recognise pass — so it was S5b that refused the first.
		path = "/c/alpha/s5b/control"
		if st, reason := raw(path, false); st != http.StatusOK {
			t.Fatalf("control connection: %d %q, want 200", st, reason)
		}
		if got := f.console.at(strings.TrimPrefix(path, "/c/alpha")); len(got) != 1 || got[0].header.Get(contract.HeaderFleetLogin) != f.alice.login {
			t.Fatalf("control: the console saw %v", got)
		}
	})

	t.Run("S5e_raw_tcp_forward_refused", func(t *testing.T) {
		// A raw TCP forward (`tailscale serve --tcp=8022 tcp://127.0.0.1:<fleet port>`) is dialled
		// by tailscaled (here: this process, tsnet) like Serve's own proxy, but carries the bytes
		// a peer wrote. Through it alice claims to be bob with X-Forwarded-For; fleet must refuse
		// every /c/ request on the TCP door while the forward exists, and serve again once it
		// is gone.
		const fwdPort = 8022
		withForward := f.serveConfig()
		withForward.TCP[fwdPort] = &ipn.TCPPortHandler{TCPForward: "127.0.0.1:" + strconv.Itoa(f.port)}
		if err := f.sup.lc.SetServeConfig(f.ctx, withForward); err != nil {
			t.Fatal(err)
		}
		restored := false
		t.Cleanup(func() {
			if !restored {
				f.sup.lc.SetServeConfig(f.ctx, f.serveConfig())
			}
		})

		// fleet learns the Serve config within 5 s: wait (bounded) until Serve's own requests are
		// refused, then prove the forward itself is.
		f.waitReason(t, f.alice, "/c/alpha/s5e/wait-refused", "tcp-forwardable")
		path := "/c/alpha/s5e/serve-while-forward"
		wantRefused(t, f.mustDo(t, f.alice, "GET", path), http.StatusUnauthorized, "tcp-forwardable")
		f.notForwarded(t, path)

		path = "/c/alpha/s5e/forged-bob"
		st, reason := f.throughForward(t, f.alice, fwdPort,
			fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nX-Forwarded-For: %s\r\nTailscale-User-Login: %s\r\nConnection: close\r\n\r\n",
				path, f.supFQDN, f.bob.ip, f.bob.login))
		if st != http.StatusUnauthorized || reason != "tcp-forwardable" {
			t.Errorf("alice through the raw forward, claiming bob: %d %q, want 401 tcp-forwardable", st, reason)
		}
		if got := f.console.at(strings.TrimPrefix(path, "/c/alpha")); len(got) != 0 {
			t.Fatalf("the console was told the caller is %q: a forged X-Forwarded-For through a raw forward got in", got[0].header.Get(contract.HeaderFleetLogin))
		}

		// The forward removed: Serve's requests are served again (within the poll interval).
		if err := f.sup.lc.SetServeConfig(f.ctx, f.serveConfig()); err != nil {
			t.Fatal(err)
		}
		restored = true
		f.waitReason(t, f.alice, "/c/alpha/s5e/wait-served", "")
		path = "/c/alpha/s5e/served-again"
		f.forwarded(t, f.mustDo(t, f.alice, "GET", path), path, f.alice.login, f.alice.ip)
	})

	t.Run("S5e_tailscale_ssh_on_refused", func(t *testing.T) {
		// With Tailscale SSH on, any SSH login can forward a port to fleet's (ssh -L) and write
		// any request: the TCP door refuses every /c/ request until SSH is off again.
		if _, err := f.sup.lc.EditPrefs(f.ctx, &ipn.MaskedPrefs{RunSSHSet: true, Prefs: ipn.Prefs{RunSSH: true}}); err != nil {
			t.Skipf("tsnet does not turn Tailscale SSH on here: %v", err)
		}
		off := func() {
			f.sup.lc.EditPrefs(f.ctx, &ipn.MaskedPrefs{RunSSHSet: true, Prefs: ipn.Prefs{RunSSH: false}})
		}
		t.Cleanup(off)
		f.waitReason(t, f.alice, "/c/alpha/s5e/ssh-wait-refused", "tcp-forwardable")
		path := "/c/alpha/s5e/ssh-on"
		wantRefused(t, f.mustDo(t, f.alice, "GET", path), http.StatusUnauthorized, "tcp-forwardable")
		f.notForwarded(t, path)
		off()
		f.waitReason(t, f.alice, "/c/alpha/s5e/ssh-wait-served", "")
		path = "/c/alpha/s5e/ssh-off"
		f.forwarded(t, f.mustDo(t, f.alice, "GET", path), path, f.alice.login, f.alice.ip)
	})

	t.Run("G1_app_capability_grant", func(t *testing.T) {
		// The tailnet policy grants every user the console alpha only, as the app capability
		// (testcontrol's global app caps: a grant from every source to every node). sup's netmap
		// carries it, WhoIs hands it to fleet, and fleet opens alpha to alice and nothing else.
		// Withdrawn, alice opens every console again (mode tailnet, the default).
		const capName tailcfg.PeerCapability = "phase-console.dev/cap/fleet" // as SPEC G1 and docs/access.md name it
		if capName != access.CapabilityName {
			t.Fatalf("fleet reads the capability %q, the policy grants %q", access.CapabilityName, capName)
		}
		build := newEchoConsole(t, "build-1")
		f.door.Register(t, supervisor.Console{ID: "build-1", Addr: build.srv.Listener.Addr().String(), Name: "Build 1"})

		withdraw := func() bool {
			f.control.SetGlobalAppCaps(nil)
			return f.pollUntil(func() bool { return f.supSeesCapability(f.alice, capName, false) }) &&
				f.pollUntil(func() bool { return f.served(f.alice, "build-1", "/c/build-1/g1/wait-withdrawn") })
		}
		withdrawn := false
		t.Cleanup(func() {
			// Later subtests must not run under the grant: sup's netmap and fleet's WhoIs cache
			// both without it.
			if !withdrawn && !withdraw() {
				t.Errorf("the grant could not be withdrawn: later subtests may run under it")
			}
		})

		f.control.SetGlobalAppCaps(tailcfg.PeerCapMap{capName: {`{"consoles":["alpha"]}`}})
		if !f.pollUntil(func() bool { return f.supSeesCapability(f.alice, capName, true) }) {
			t.Fatalf("sup's WhoIs of alice never carried %s", capName)
		}
		// fleet keeps a WhoIs answer for up to 5 s: wait (bounded) until it answers from the new one.
		if !f.pollUntil(func() bool {
			resp, err := f.get(f.alice, "/c/build-1/g1/wait-granted", nil)
			return err == nil && resp.Header.Get("X-Fleet-Reason") == "not-granted"
		}) {
			t.Fatalf("fleet never refused build-1 to alice under the grant")
		}

		path := "/c/alpha/g1/granted"
		forwardedTo(t, f.console, "alpha", f.mustDo(t, f.alice, "GET", path), path, f.alice.login, f.alice.ip)
		for _, path := range []string{"/c/build-1/g1/not-granted", "/c/build-1/", "/c/BUILD-1/g1/case"} {
			wantRefused(t, f.mustDo(t, f.alice, "GET", path), http.StatusForbidden, "not-granted")
			notForwardedTo(t, build, "build-1", strings.Replace(path, "BUILD-1", "build-1", 1))
			if lines := f.logs.rejected(path); len(lines) != 1 || lines[0]["reason"] != "not-granted" || lines[0]["status"] != float64(http.StatusForbidden) {
				t.Errorf("%s: fleet.rejected lines %v, want one with reason not-granted, status 403", path, lines)
			}
		}
		// A console that does not exist gets the same answer: the door is no oracle of ids.
		wantRefused(t, f.mustDo(t, f.alice, "GET", "/c/nope/g1"), http.StatusForbidden, "not-granted")
		if login, ids := f.indexIDs(t, f.alice); login != f.alice.login || !slices.Equal(ids, []string{"alpha"}) {
			t.Errorf("index under the grant: login %q, consoles %q; want %q, [alpha]", login, ids, f.alice.login)
		}

		// The grant withdrawn: within the WhoIs cache's life, alice opens both again.
		if withdrawn = withdraw(); !withdrawn {
			t.Fatalf("alice never opened build-1 again after the grant was withdrawn")
		}
		path = "/c/alpha/g1/after"
		forwardedTo(t, f.console, "alpha", f.mustDo(t, f.alice, "GET", path), path, f.alice.login, f.alice.ip)
		path = "/c/build-1/g1/after"
		forwardedTo(t, build, "build-1", f.mustDo(t, f.alice, "GET", path), path, f.alice.login, f.alice.ip)
		if _, ids := f.indexIDs(t, f.alice); !slices.Equal(ids, []string{"alpha", "build-1"}) {
			t.Errorf("index after the grant: consoles %q, want [alpha build-1]", ids)
		}
	})

	// tsnet's LocalAPI has no socket to find tailscaled's process by: its command line is this
	// process's, as the supervisor is told (startFixture).
	tsArgs := func(context.Context) ([]string, error) { return os.Args, nil }
	t.Run("doctor_healthy_serve_config", func(t *testing.T) {
		checks := doctor.Run(f.ctx, doctor.Config{StateHome: f.home, LocalAPI: f.sup.lc, Port: f.port, TailscaledArgs: tsArgs})
		var report strings.Builder
		for _, c := range checks {
			report.WriteString(c.String() + "\n")
		}
		t.Logf("fleet doctor against sup's LocalAPI:\n%s", report.String())
		wantStatus := map[string]doctor.Status{
			"tailscaled":       doctor.OK,
			"tailscaled mode":  doctor.Warn, // tsnet is userspace networking
			"tailscale serve":  doctor.OK,
			"tailscaled proxy": doctor.OK,
			"funnel":           doctor.OK,
			"state folder":     doctor.OK,
			"fleet.token":      doctor.OK,
			"metrics.token":    doctor.OK,
			"supervisor":       doctor.OK,
		}
		for _, c := range checks {
			if w, ok := wantStatus[c.Name]; ok {
				if c.Status != w {
					t.Errorf("%s: %v, want %v", c.Name, c.Status, w)
				}
				delete(wantStatus, c.Name)
			}
		}
		for name := range wantStatus {
			t.Errorf("no %q check", name)
		}
		wantServe := fmt.Sprintf("http://%s/ → http://127.0.0.1:%d", f.supFQDN, f.port)
		if !strings.Contains(report.String(), wantServe) {
			t.Errorf("the serve line does not say %q", wantServe)
		}
		if doctor.Failed(checks) {
			t.Errorf("doctor failed a healthy set-up")
		}
	})

	t.Run("doctor_serve_removed", func(t *testing.T) {
		if err := f.sup.lc.SetServeConfig(f.ctx, &ipn.ServeConfig{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.sup.lc.SetServeConfig(f.ctx, f.serveConfig()) })
		checks := doctor.Run(f.ctx, doctor.Config{StateHome: f.home, LocalAPI: f.sup.lc, Port: f.port, TailscaledArgs: tsArgs})
		var report strings.Builder
		for _, c := range checks {
			report.WriteString(c.String() + "\n")
		}
		t.Logf("fleet doctor with no Serve config:\n%s", report.String())
		if !doctor.Failed(checks) || !strings.Contains(report.String(), "FAIL tailscale serve: nothing proxies to http://127.0.0.1:"+strconv.Itoa(f.port)) {
			t.Errorf("want a FAIL for the missing Serve config")
		}
	})
}
