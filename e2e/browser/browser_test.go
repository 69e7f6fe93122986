package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"

	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/chromiumtest"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/internal/testlog"
	"github.com/phase-console/fleet/supervisor"
)

const (
	aliceIP = "100.101.102.103"
	alice   = "alice@example.com"
	tsName  = "sup.tail1234.ts.net"
	selfIP  = "100.101.102.1"

	// testBudget bounds the whole test, browser included.
	testBudget = 100 * time.Second
	// stepBudget bounds each subtest's browser work.
	stepBudget = 20 * time.Second
)

// TestBrowser_S6_S7_S9_S12 opens the reference console through the supervisor in chromium and
// checks what the page shows, that its streams work, and what the door refuses.
func TestBrowser_S6_S7_S9_S12(t *testing.T) {
	start := time.Now()
	root, cancel := context.WithTimeout(context.Background(), testBudget)
	defer cancel()

	chromiumtest.Need(t)
	f := startFleet(t)
	browser := chromiumtest.Start(t, root)
	t.Logf("fleet and chromium up in %v", time.Since(start).Round(time.Millisecond))
	pageURL := f.serveURL + "/c/ref/"

	t.Run("S6 C4 page shows remote scope and login", func(t *testing.T) {
		ctx := chromiumtest.NewTab(t, browser, stepBudget)
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(pageURL))
		if err != nil {
			t.Fatalf("navigate %s: %v", pageURL, err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("navigate %s: status %d, want 200", pageURL, resp.Status)
		}
		scope, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("scope")))
		if err != nil {
			t.Fatalf("reading #scope: %v", err)
		}
		login, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("login")))
		if err != nil {
			t.Fatalf("reading #login: %v", err)
		}
		if scope != "remote" || login != alice {
			t.Errorf("the page shows scope %q, login %q; want %q, %q", scope, login, "remote", alice)
		}
		// The console believed the supervisor's assertion for exactly that login (S6).
		if got := f.console.find(func(r request) bool { return r.Method == "GET" && r.Path == "/" }); len(got) == 0 || got[0].Login != alice {
			t.Errorf("the console's view of GET /: %+v; want the asserted login %q", got, alice)
		}
	})

	t.Run("S9 SSE ticks arrive in the page", func(t *testing.T) {
		ctx := chromiumtest.NewTab(t, browser, stepBudget)
		if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
			t.Fatalf("navigate: %v", err)
		}
		// Every value #tick takes, recorded on each DOM change, until it has shown three numbers.
		seen, err := chromedp.Run(ctx, chromedp.PollFunction[[]string](`() => {
			const v = document.getElementById("tick").textContent;
			const seen = window.__ticks || (window.__ticks = []);
			if (seen[seen.length - 1] !== v) seen.push(v);
			return seen.filter((s) => /^[0-9]+$/.test(s)).length >= 3 ? seen : null;
		}`, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(stepBudget)))
		if err != nil {
			t.Fatalf("waiting for #tick to change: %v", err)
		}
		var nums []int
		for _, s := range seen {
			if n, err := strconv.Atoi(s); err == nil {
				nums = append(nums, n)
			}
		}
		for i := 1; i < len(nums); i++ {
			if nums[i] <= nums[i-1] {
				t.Errorf("#tick went %v; want increasing counts", seen)
			}
		}
		t.Logf("#tick showed %q", seen)
	})

	t.Run("S9 WebSocket echo in the page", func(t *testing.T) {
		ctx := chromiumtest.NewTab(t, browser, stepBudget)
		if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
			t.Fatalf("navigate: %v", err)
		}
		// The send button works once the page's socket is open; a person would wait too.
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`typeof sock !== "undefined" && sock.readyState === WebSocket.OPEN`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
			t.Fatalf("the page's WebSocket did not open: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("send"))); err != nil {
			t.Fatalf("click #send: %v", err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("echo").textContent !== ""`,
			chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(stepBudget))); err != nil {
			t.Fatalf("waiting for #echo: %v", err)
		}
		echo, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("echo")))
		if err != nil {
			t.Fatalf("reading #echo: %v", err)
		}
		if echo != "hello" {
			t.Errorf("#echo shows %q, want %q", echo, "hello")
		}
		if got := f.console.find(func(r request) bool { return r.Path == "/ws" && r.Login == alice }); len(got) == 0 {
			t.Errorf("the console saw no asserted WebSocket upgrade; it saw %+v", f.console.all())
		}
	})

	t.Run("S12 a page of another origin cannot use the tailnet identity", func(t *testing.T) {
		other := httptest.NewServer(otherOriginPage(f.serveURL + "/c/ref/"))
		defer other.Close()
		otherOrigin := other.URL // http://127.0.0.1:<port>, which is what the browser sends as Origin
		ctx := chromiumtest.NewTab(t, browser, stepBudget)
		wire := watchNetwork(ctx, "/c/ref/")
		if err := chromedp.Do(ctx, chromedp.Navigate(otherOrigin+"/")); err != nil {
			t.Fatalf("navigate to the other origin: %v", err)
		}
		results, err := chromedp.Run(ctx, chromedp.Poll[map[string]string](
			`window.results && results.cors && results.nocors && results.ws ? results : null`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget)))
		if err != nil {
			t.Fatalf("waiting for the other page's attempts: %v", err)
		}
		t.Logf("the other page saw %v; the browser saw %v", results, wire.summary())

		// What the page learnt: nothing.
		if !strings.HasPrefix(results["cors"], "blocked") {
			t.Errorf("fetch POST whoami from %s: %q; want it blocked", otherOrigin, results["cors"])
		}
		if results["ws"] == "open" {
			t.Errorf("a WebSocket from %s to the door opened", otherOrigin)
		}
		// The browser did send them (with its Origin) and the door answered 403.
		if st := wire.statuses("POST", "/c/ref/whoami"); len(st) == 0 {
			t.Errorf("the browser reported no answer to POST /c/ref/whoami: %v", wire.summary())
		} else {
			for _, s := range st {
				if s != http.StatusForbidden {
					t.Errorf("POST /c/ref/whoami from %s: status %d, want 403", otherOrigin, s)
				}
			}
		}
		// The door refused each of them as cross-origin (S11 log line) …
		want := map[string]int{"POST /c/ref/whoami": 2, "GET /c/ref/ws": 1}
		got := map[string]int{}
		for _, l := range f.logs.Events("fleet.rejected") {
			if l["reason"] == "cross-origin" && l["status"] == float64(http.StatusForbidden) {
				got[fmt.Sprintf("%v %v", l["method"], l["path"])]++
			}
		}
		for k, n := range want {
			if got[k] < n {
				t.Errorf("fleet.rejected cross-origin 403 for %s: %d lines, want %d; all refusals: %v", k, got[k], n, f.logs.Events("fleet.rejected"))
			}
		}
		// … and the console never saw them.
		if bad := f.console.find(func(r request) bool {
			return r.Origin == otherOrigin || r.Method == "POST" || r.Path == "/whoami"
		}); len(bad) > 0 {
			t.Errorf("the console saw requests from the other origin: %+v", bad)
		}
	})

	t.Run("S7 hooks are not reachable from the browser", func(t *testing.T) {
		ctx := chromiumtest.NewTab(t, browser, stepBudget)
		u := f.serveURL + "/c/ref/hooks/permission-request"
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
		if err != nil {
			t.Fatalf("navigate %s: %v", u, err)
		}
		if resp.Status != http.StatusForbidden {
			t.Errorf("navigate %s: status %d, want 403", u, resp.Status)
		}
		h1, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("h1")))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		if h1 != "403 hooks" {
			t.Errorf("the page shows %q, want %q", h1, "403 hooks")
		}
		n := 0
		for _, l := range f.logs.Events("fleet.rejected") {
			if l["reason"] == "hooks" && l["path"] == "/c/ref/hooks/permission-request" {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no fleet.rejected line with reason hooks: %v", f.logs.Events("fleet.rejected"))
		}
		if bad := f.console.find(func(r request) bool { return strings.HasPrefix(strings.ToLower(r.Path), "/hooks") }); len(bad) > 0 {
			t.Errorf("the console saw hook requests: %+v", bad)
		}
	})

	t.Run("S12 the index shows its own style, and no other site frames it", func(t *testing.T) {
		ctx := chromiumtest.NewTab(t, browser, stepBudget)
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(f.serveURL+"/"))
		if err != nil {
			t.Fatalf("navigate to the index: %v", err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("the index: status %d, want 200", resp.Status)
		}
		// Its inline <style>, allowed by its hash (default-src 'none'), is applied: body{max-width:40rem}.
		if mw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).maxWidth`)); err != nil || mw != "640px" {
			t.Errorf("the index's body has max-width %q (%v), want 640px: its style was not applied", mw, err)
		}
		if found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('a[href="/c/ref/"]') !== null`)); err != nil || !found {
			t.Errorf("the index has no link to the console (%v)", err)
		}

		// Another site frames it: chromium shows an error in the frame (frame-ancestors 'none',
		// X-Frame-Options DENY), not the operator's login.
		framer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><title>framer</title><iframe src="%s/"></iframe>`, f.serveURL)
		}))
		defer framer.Close()
		if err := chromedp.Do(ctx, chromedp.Navigate(framer.URL+"/")); err != nil {
			t.Fatalf("navigate to the other site: %v", err)
		}
		frameTree := func(ctx context.Context, tg *chromedp.Target) (*page.FrameTree, error) {
			res, err := cdp.Call(ctx, tg, page.GetFrameTree, cdp.Empty{})
			return res.FrameTree, err
		}
		deadline := time.Now().Add(stepBudget)
		for {
			tree, err := chromedp.Run(ctx, frameTree)
			if err != nil {
				t.Fatalf("reading the frame tree: %v", err)
			}
			if tree != nil && len(tree.ChildFrames) == 1 && tree.ChildFrames[0].Frame != nil {
				fr := tree.ChildFrames[0].Frame
				if fr.UnreachableURL != "" {
					t.Logf("the framed index: %s, unreachable %s", fr.URL, fr.UnreachableURL)
					break
				}
				if fr.URL == f.serveURL+"/" {
					t.Fatalf("another site framed the index: the frame shows %s", fr.URL)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the frame did not settle: %+v", tree)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		if os.Getenv("FLEET_SCREENSHOT") != "1" {
			t.Skip("set FLEET_SCREENSHOT=1 to write testdata/refconsole.png")
		}
		ctx := chromiumtest.NewTab(t, browser, stepBudget)
		if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
			t.Fatalf("navigate: %v", err)
		}
		// Show the page in use: a tick has arrived and the echo has come back.
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`/^[0-9]+$/.test(document.getElementById("tick").textContent) && sock.readyState === WebSocket.OPEN`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
			t.Fatalf("waiting for the page: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("send"))); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("echo").textContent === "hello"`,
			chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(stepBudget))); err != nil {
			t.Fatalf("waiting for #echo: %v", err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "refconsole.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote testdata/refconsole.png (%d bytes)", len(png))
	})

	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}

// fleet is a running supervisor with the reference console behind a stand-in for Tailscale Serve.
type fleet struct {
	serveURL string // http://127.0.0.1:<port> of the Serve stand-in
	logs     *syncBuffer
	console  *recorder
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	return startFleetWith(t, nil)
}

// startFleetWith is startFleet, with more, when not nil, run on the door once the reference
// console is registered (another console of the test's own).
func startFleetWith(t *testing.T, more func(door *supervisortest.Door)) *fleet {
	t.Helper()
	home := filepath.Join(t.TempDir(), "state")
	logs := &syncBuffer{}
	door := supervisortest.Start(t, supervisor.Config{
		StateHome:     home,
		LocalAPI:      serveFakeLocalAPI(t),
		TailscaledUID: os.Getuid(),
		Logger:        slog.New(slog.NewJSONHandler(logs, nil)),
	})

	v, err := console.New(console.Config{StateDir: home, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	rec := &recorder{next: refconsole.New(refconsole.Config{ID: "ref", Name: "Reference console", Verifier: v,
		Tick: 150 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})}
	refLn := listen(t)
	serveOn(t, refLn, rec)
	door.Register(t, supervisor.Console{ID: "ref", Addr: refLn.Addr().String(), Name: "Reference console"})
	if more != nil {
		more(door)
	}

	serveLn := listen(t)
	serveOn(t, serveLn, serveStandIn(door.Addr))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})
	return &fleet{serveURL: "http://" + serveLn.Addr().String(), logs: logs, console: rec}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serveOn serves h on ln until the test ends. Close, not Shutdown: streams end with the browser.
func serveOn(t *testing.T, ln net.Listener, h http.Handler) {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
}

// serveSets are the headers that Tailscale Serve writes itself and deletes from the caller's
// request (TAILNET-NOTES: "Serve, as a backend sees it").
var serveSets = []string{
	"Tailscale-User-Login", "Tailscale-User-Name", "Tailscale-User-Profile-Pic", "Tailscale-Headers-Info",
	"Tailscale-App-Capabilities", "Tailscale-Funnel-Request",
}

// serveStandIn does to a request what Tailscale Serve does for alice's browser over plain HTTP: it
// keeps the caller's Host, sets exactly one X-Forwarded-For (alice's tailnet address),
// X-Forwarded-Host and X-Forwarded-Proto, and Tailscale-User-Login, after deleting the caller's
// copies of what it sets. ReverseProxy with Rewrite has already removed the caller's
// X-Forwarded-* and the hop-by-hop headers, and forwards WebSocket upgrades and flushes SSE.
func serveStandIn(door string) http.Handler {
	target := &url.URL{Scheme: "http", Host: door}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			h := pr.Out.Header
			for _, name := range serveSets {
				h.Del(name)
			}
			h.Set("X-Forwarded-For", aliceIP)
			h.Set("X-Forwarded-Host", pr.In.Host)
			h.Set("X-Forwarded-Proto", "http")
			h.Set("Tailscale-User-Login", alice)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
}

// fakeLocalAPI is tailscaled's LocalAPI as far as the supervisor asks it: WhoIs knows alice's
// address only, and status says TUN (so S5b is skipped, as on a kernel TUN).
func fakeLocalAPI(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/localapi/v0/whois":
		if r.URL.Query().Get("addr") == aliceIP {
			json.NewEncoder(w).Encode(&apitype.WhoIsResponse{
				Node:        &tailcfg.Node{ID: 1, Name: "alice-laptop.tail1234.ts.net."},
				UserProfile: &tailcfg.UserProfile{ID: 1, LoginName: alice, DisplayName: "Alice"},
			})
			return
		}
		http.Error(w, "no match for IP:port", http.StatusNotFound)
	case "/localapi/v0/status":
		json.NewEncoder(w).Encode(&ipnstate.Status{
			Version:      "1.102.5",
			TUN:          true,
			BackendState: "Running",
			TailscaleIPs: []netip.Addr{netip.MustParseAddr(selfIP)},
			Self:         &ipnstate.PeerStatus{DNSName: tsName + ".", HostName: "sup"},
		})
	case "/localapi/v0/prefs": // S5e: no Tailscale SSH
		json.NewEncoder(w).Encode(&ipn.Prefs{})
	case "/localapi/v0/serve-config": // S5e: no raw TCP forward
		json.NewEncoder(w).Encode(&ipn.ServeConfig{})
	default:
		http.NotFound(w, r)
	}
}

// serveFakeLocalAPI serves fakeLocalAPI on a unix socket (in a short folder: socket paths are
// limited to about 100 bytes) and returns a real LocalAPI client for it.
func serveFakeLocalAPI(t *testing.T) *local.Client {
	t.Helper()
	return doortest.ServeLocalAPIHandler(t, http.HandlerFunc(fakeLocalAPI))
}

// otherOriginPage is a page of another origin whose script tries to use the tailnet identity:
// a CORS fetch, a no-cors fetch (the request is sent, the answer is opaque) and a WebSocket.
func otherOriginPage(door string) http.Handler {
	tmpl := template.Must(template.New("").Parse(`<!doctype html><title>another origin</title>
<script>
const door = {{.}};
window.results = {};
fetch(door + "whoami", {method: "POST"}).then(
  (r) => r.text().then((t) => { results.cors = "read " + r.status + " " + t; }),
  (e) => { results.cors = "blocked: " + e.name; });
fetch(door + "whoami", {method: "POST", mode: "no-cors"}).then(
  (r) => { results.nocors = "opaque " + r.type + " " + r.status; },
  (e) => { results.nocors = "blocked: " + e.name; });
const ws = new WebSocket(door.replace(/^http/, "ws") + "ws");
ws.onopen = () => { results.ws = "open"; };
ws.onclose = (e) => { results.ws = results.ws || "closed " + e.code; };
</script>`))
	var page bytes.Buffer
	if err := tmpl.Execute(&page, door); err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page.Bytes())
	})
}

// netWatch records what the browser itself reports about requests whose URL contains a string.
type netWatch struct {
	mu      sync.Mutex
	reqs    map[network.RequestID]string // id → "METHOD path"
	answers []string                     // "METHOD path status" or "METHOD path failed: …"
	status  map[string][]int             // "METHOD path" → statuses
}

func watchNetwork(ctx context.Context, contains string) *netWatch {
	w := &netWatch{reqs: map[network.RequestID]string{}, status: map[string][]int{}}
	chromedp.Listen(ctx, func(ev any) {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			if strings.Contains(ev.Request.URL, contains) {
				u, _ := url.Parse(ev.Request.URL)
				w.reqs[ev.RequestID] = ev.Request.Method + " " + u.Path
			}
		case *network.EventResponseReceived:
			if k, ok := w.reqs[ev.RequestID]; ok {
				w.status[k] = append(w.status[k], int(ev.Response.Status))
				w.answers = append(w.answers, fmt.Sprintf("%s %d", k, ev.Response.Status))
			}
		case *network.EventLoadingFailed:
			if k, ok := w.reqs[ev.RequestID]; ok {
				s := fmt.Sprintf("%s failed: %s", k, ev.ErrorText)
				if ev.CorsErrorStatus != nil {
					s += fmt.Sprintf(" (CORS %s)", ev.CorsErrorStatus.CorsError)
				}
				w.answers = append(w.answers, s)
			}
		}
	})
	return w
}

func (w *netWatch) statuses(method, path string) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.status[method+" "+path]...)
}

func (w *netWatch) summary() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.answers...)
}

// request is one request as the reference console received it (never its token).
type request struct {
	Method, Path, Origin, Login string
}

// recorder notes every request that reaches the console, then serves it.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []request
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, request{Method: r.Method, Path: r.URL.Path, Origin: r.Header.Get("Origin"),
		Login: r.Header.Get("X-Phase-Console-Fleet-Login")})
	rc.mu.Unlock()
	rc.next.ServeHTTP(w, r)
}

func (rc *recorder) all() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.reqs...)
}

func (rc *recorder) find(match func(request) bool) []request {
	var out []request
	for _, r := range rc.all() {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// syncBuffer is the test's log sink.
type syncBuffer = testlog.Buffer
