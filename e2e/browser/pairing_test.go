package browser

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/device"

	"github.com/phase-console/fleet/ca"
	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/chromiumtest"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/supervisor"
)

// pairingPassword is the pairing password the test sets; nothing secret, it lives only as long
// as the test's state folder.
const pairingPassword = "correct horse battery staple"

// TestBrowserPairing_R7_R8_R9 pairs a phone-sized headless chromium with the direct-reach door
// as a person would: it opens the link `fleet reach pair` prints (the code in the #fragment),
// sees the pairing page with the root's fingerprint and the code already in the form, types the
// password and a device name, lands on the device's index, opens the console, which shows the
// device's login and scope remote, and opens its WebSocket. Then the device is revoked from
// another "process" (the files under reach/, as `fleet reach revoke` does): the page's socket
// closes, and the next load through the door is the pairing page again.
//
// The browser trusts the door by the leaf's public key pinned on its command line
// (--ignore-certificate-errors-spki-list), computed from a connection verified against the
// door's root, itself checked against the fingerprint the supervisor reports: no blanket
// --ignore-certificate-errors. Screenshots of the pairing page and of the device's index go to
// $FLEET_ARTIFACTS if set, else to a temporary folder; the test logs where.
func TestBrowserPairing_R7_R8_R9(t *testing.T) {
	start := time.Now()
	root, cancel := context.WithTimeout(context.Background(), testBudget)
	defer cancel()

	chromiumtest.Need(t)
	f := startPairingFleet(t)
	browser := chromiumtest.Start(t, root, chromedp.Flag("ignore-certificate-errors-spki-list", f.leafSPKI))
	artifacts := artifactsDir(t)
	t.Logf("fleet and chromium up in %v; screenshots in %s", time.Since(start).Round(time.Millisecond), artifacts)

	var dev pairing.Device
	ok := t.Run("R7 R8 pair from a phone with the link's code", func(t *testing.T) {
		ctx := newPhoneTab(t, browser)
		link := f.origin + pairing.PairPath + "#" + f.code
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(link))
		if err != nil {
			t.Fatalf("navigate %s: %v", link, err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("navigate %s: status %d, want 200", link, resp.Status)
		}
		// The page's script has moved the code from the #fragment into the form, and dropped
		// it from the address bar.
		code, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("code").value || null`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget)))
		if err != nil {
			t.Fatalf("waiting for the code in the form: %v", err)
		}
		if code != f.code {
			t.Errorf("the code field holds %q, want the link's %q", code, f.code)
		}
		if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != f.origin+pairing.PairPath {
			t.Errorf("the address bar shows %q after the script; want %q, without the code", loc, f.origin+pairing.PairPath)
		}
		fp, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".fingerprint code")))
		if err != nil {
			t.Fatalf("reading the fingerprint: %v", err)
		}
		if fp != f.fingerprint {
			t.Errorf("the page shows the fingerprint %q, want the root's %q", fp, f.fingerprint)
		}
		if _, err := chromedp.Run(ctx, chromedp.Query(chromedp.CSS(`a[href="/ca.crt"]`))); err != nil {
			t.Errorf("no link to /ca.crt on the page: %v", err)
		}
		saveScreenshot(t, ctx, artifacts, "pairing-page.png")

		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("password"), pairingPassword)); err != nil {
			t.Fatalf("typing the password: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("name"), "Test Phone")); err != nil {
			t.Fatalf("typing the name: %v", err)
		}
		resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
		if err != nil {
			t.Fatalf("submitting the form: %v", err)
		}
		if resp.Status != http.StatusOK || resp.URL != f.origin+"/" {
			t.Fatalf("after pairing: status %d at %s, want 200 at the device's index %s/", resp.Status, resp.URL, f.origin)
		}
		devs, err := pairing.ListDevices(f.reachDir)
		if err != nil || len(devs) != 1 || devs[0].Slug != "test-phone" {
			t.Fatalf("the register holds %+v (%v); want the one device test-phone", devs, err)
		}
		dev = devs[0]
		// The browser keeps the credential as R8 says: one Secure, HttpOnly, SameSite=Strict
		// cookie, which the page's scripts cannot read.
		jar, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{f.origin + "/"}})
		if err != nil {
			t.Fatalf("reading the browser's cookies: %v", err)
		}
		if c := jar.Cookies; len(c) != 1 || c[0].Name != pairing.CookieName || !c[0].Secure || !c[0].HTTPOnly ||
			c[0].SameSite != network.CookieSameSiteStrict || c[0].Path != "/" {
			t.Errorf("the browser holds for the door %s; want the one cookie %s, Secure, HttpOnly, SameSite=Strict, Path=/",
				describeCookies(c), pairing.CookieName)
		}
		if dc, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); dc != "" {
			t.Errorf("the page's script reads document.cookie %q; want nothing", dc)
		}
		who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("p")))
		if err != nil {
			t.Fatalf("reading the index: %v", err)
		}
		if want := "This device: " + dev.Login(); who != want {
			t.Errorf("the index says %q, want %q", who, want)
		}
		if _, err := chromedp.Run(ctx, chromedp.Query(chromedp.CSS(`a[href="/c/ref/"]`))); err != nil {
			t.Errorf("the index has no link to the console: %v", err)
		}
		saveScreenshot(t, ctx, artifacts, "device-index.png")
	})
	if !ok {
		return
	}

	t.Run("R9 R8 the console asserts the device; revocation closes its socket", func(t *testing.T) {
		ctx := newPhoneTab(t, browser)
		if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(f.origin+"/")); err != nil {
			t.Fatalf("navigate to the index: %v", err)
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`a[href="/c/ref/"]`)))
		if err != nil {
			t.Fatalf("opening the console from the index: %v", err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("the console's page: status %d, want 200", resp.Status)
		}
		scope, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("scope")))
		if err != nil {
			t.Fatalf("reading #scope: %v", err)
		}
		login, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("login")))
		if err != nil {
			t.Fatalf("reading #login: %v", err)
		}
		if scope != "remote" || login != dev.Login() {
			t.Errorf("the console shows scope %q, login %q; want %q, %q", scope, login, "remote", dev.Login())
		}

		// The page's WebSocket opens and echoes; a close is recorded in the page for later.
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`typeof sock !== "undefined" && sock.readyState === WebSocket.OPEN`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
			t.Fatalf("the page's WebSocket did not open: %v", err)
		}
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](
			`sock.addEventListener("close", (e) => { window.__closed = "code " + e.code; })`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("send"))); err != nil {
			t.Fatalf("click #send: %v", err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("echo").textContent === "hello"`,
			chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(stepBudget))); err != nil {
			t.Fatalf("waiting for the echo: %v", err)
		}
		if got := f.console.find(func(r request) bool { return r.Path == "/ws" && r.Login == dev.Login() }); len(got) == 0 {
			t.Errorf("the console saw no WebSocket upgrade asserted as %s; it saw %+v", dev.Login(), f.console.all())
		}
		if f.cookieForwarded.Load() {
			t.Errorf("the console received the device's credential cookie %s", pairing.CookieName)
		}

		// Revoke as `fleet reach revoke` does: another writer of the register's files. The
		// supervisor's register sees it at its next refresh and the door closes the socket.
		if err := pairing.RevokeDevice(f.reachDir, dev.ID6); err != nil {
			t.Fatalf("revoking %s: %v", dev.ID6, err)
		}
		closed, err := chromedp.Run(ctx, chromedp.Poll[string](`window.__closed || null`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget)))
		if err != nil {
			t.Fatalf("the page's WebSocket stayed open after the revocation: %v", err)
		}
		t.Logf("the page's WebSocket closed after the revocation (%s)", closed)
		// Its server-sent events too: the stream is cut, and the EventSource's reconnection
		// (after the console's retry: 3 s) is sent to the pairing page, which ends it for good.
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`es.readyState === EventSource.CLOSED`,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
			t.Errorf("the page's EventSource did not end after the revocation: %v", err)
		}

		// The next load through the door is the pairing page.
		resp, err = chromedp.RunResponse(ctx, chromedp.Reload())
		if err != nil {
			t.Fatalf("reloading the console's page: %v", err)
		}
		if resp.Status != http.StatusOK || resp.URL != f.origin+pairing.PairPath {
			t.Errorf("reloading the console's page after the revocation: status %d at %s, want the pairing page %s",
				resp.Status, resp.URL, f.origin+pairing.PairPath)
		}
		h1, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("h1")))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		if h1 != "Pair this device" {
			t.Errorf("after the revocation the door shows %q, want the pairing page", h1)
		}
	})

	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}

// pairingFleet is a running supervisor with its direct-reach door open on loopback, a pairing
// password, one outstanding code and the reference console "ref".
type pairingFleet struct {
	origin          string // https://127.0.0.1:<port>, the door
	reachDir        string // <stateHome>/fleet/reach
	code            string // XXXX-XXXX
	fingerprint     string // the root's, as the supervisor reports it
	leafSPKI        string // base64 SHA-256 of the door's leaf's SubjectPublicKeyInfo
	console         *recorder
	cookieForwarded atomic.Bool // the console received the device's credential cookie
	logs            *syncBuffer // the supervisor's log
}

// startPairingFleet builds what `fleet demo` runs: a state folder whose machine profile opens the
// door on a free loopback port, the supervisor (which opens the door from the profile), a
// pairing password, a code and the reference console registered.
func startPairingFleet(t *testing.T) *pairingFleet {
	t.Helper()
	home := filepath.Join(t.TempDir(), "state")
	if err := state.EnsureHome(home); err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close() // a free port for the door, which binds it again (if taken meanwhile, the wait below says so)
	profile := fmt.Sprintf("reach:\n  mode: direct\n  listen: %s\n", addr)
	if err := state.WritePrivateFile(filepath.Join(home, reach.ProfileFile), []byte(profile)); err != nil {
		t.Fatal(err)
	}
	f := &pairingFleet{origin: "https://" + addr, reachDir: filepath.Join(state.FleetDir(home), "reach")}
	if err := state.EnsureDir(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	if err := pairing.SetPassword(f.reachDir, []byte(pairingPassword)); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	f.logs = logs
	door := supervisortest.Start(t, supervisor.Config{
		StateHome:     home,
		LocalAPI:      serveFakeLocalAPI(t),
		TailscaledUID: os.Getuid(),
		Logger:        slog.New(slog.NewJSONHandler(logs, nil)),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})

	v, err := console.New(console.Config{StateDir: home, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	f.console = &recorder{next: refconsole.New(refconsole.Config{ID: "ref", Name: "Reference console", Verifier: v,
		Tick: 150 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})}
	refLn := listen(t)
	serveOn(t, refLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := r.Cookie(pairing.CookieName); err == nil {
			f.cookieForwarded.Store(true)
		}
		f.console.ServeHTTP(w, r)
	}))
	door.Register(t, supervisor.Console{ID: "ref", Addr: refLn.Addr().String(), Name: "Reference console"})

	// The supervisor opens the door from the profile on its own, in the background.
	deadline := time.Now().Add(30 * time.Second)
	for st := door.Server.ReachStatus(); !st.Open; st = door.Server.ReachStatus() {
		if time.Now().After(deadline) {
			t.Fatalf("the direct-reach door did not open: %+v\n%s", st, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.fingerprint = door.Server.ReachStatus().Fingerprint
	f.leafSPKI = trustDoor(t, addr, f.fingerprint)
	f.code, err = pairing.IssueCode(f.reachDir, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// trustDoor does what the pairing page asks of a person: it fetches the door's root from
// /ca.crt, checks it against the fingerprint the machine shows, and then trusts only that root.
// It returns the pin chromium is given: the SPKI hash of the leaf the door serves, from a
// connection verified against the root.
func trustDoor(t *testing.T, addr, fingerprint string) string {
	t.Helper()
	insecure := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // checked below, by fingerprint
	resp, err := insecure.Get("https://" + addr + "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("/ca.crt: %s, not a PEM certificate: %q", resp.Status, body)
	}
	if got := ca.FormatFingerprint(sha256.Sum256(block.Bytes)); got != fingerprint {
		t.Fatalf("/ca.crt has the fingerprint %s, the supervisor reports %s", got, fingerprint)
	}
	rootCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(rootCert)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("the door's leaf does not verify against its root: %v", err)
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// newPhoneTab is chromiumtest.NewTab with the viewport, scale, touch and user agent of a phone (390×844).
func newPhoneTab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx := chromiumtest.NewTab(t, browser, stepBudget)
	if err := chromedp.Do(ctx, chromedp.Emulate(device.IPhone13)); err != nil {
		t.Fatalf("emulating a phone: %v", err)
	}
	return ctx
}

// artifactsDir is where the test's screenshots go: $FLEET_ARTIFACTS (created if need be) or a
// temporary folder.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FLEET_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// saveScreenshot writes a PNG of the whole page to dir/name.
func saveScreenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// describeCookies lists cookies by name and attributes, never their values (a credential).
func describeCookies(cs []*network.Cookie) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s(path %s, secure %v, httponly %v, samesite %q)", c.Name, c.Path, c.Secure, c.HTTPOnly, c.SameSite))
	}
	return fmt.Sprintf("%d cookies %v", len(out), out)
}
