package nodeconsole

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"tailscale.com/client/local"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"

	"github.com/phase-console/fleet/ca"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/supervisor"
)

const (
	chromiumPath    = "/usr/bin/chromium"
	pairingPassword = "correct horse battery staple" // lives only as long as the test's state folder
	stepBudget      = 20 * time.Second
)

// TestNodeConsoleThroughDirectReach_R9_C4 is a console written with the Node library, published
// by the real supervisor, seen by a real chromium through the direct-reach door: the Node
// reference console registers itself with the supervisor (through supervisor.addr, as at any
// start-up), a phone-sized headless chromium pairs with the door (the link's code, the password,
// a device name), opens /c/noderef/ and sees scope remote as the device's login, device:…; its
// WebSocket echoes through the door; and the device cannot change reach settings (C7).
func TestNodeConsoleThroughDirectReach_R9_C4(t *testing.T) {
	node := needNode(t)
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is missing (%v): .ci/run installs chromium", chromiumPath, err)
		}
		t.Skipf("%s not found (%v); the Node console is not checked through a browser", chromiumPath, err)
	}
	root, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()

	// The state folder, the machine profile that opens the door on a free loopback port, the
	// pairing password, the supervisor.
	home := filepath.Join(t.TempDir(), "state")
	if err := state.EnsureHome(home); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	doorAddr := ln.Addr().String()
	ln.Close()
	if err := state.WritePrivateFile(filepath.Join(home, reach.ProfileFile), []byte(fmt.Sprintf("reach:\n  mode: direct\n  listen: %s\n", doorAddr))); err != nil {
		t.Fatal(err)
	}
	if err := state.EnsureDir(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	reachDir := filepath.Join(state.FleetDir(home), "reach")
	if err := pairing.SetPassword(reachDir, []byte(pairingPassword)); err != nil {
		t.Fatal(err)
	}
	door := supervisortest.Start(t, supervisor.Config{
		StateHome:     home,
		LocalAPI:      serveFakeLocalAPI(t),
		TailscaledUID: os.Getuid(),
		Logger:        slog.New(slog.DiscardHandler),
	})

	// The Node console finds the supervisor and registers itself.
	nodeConsole(t, node, home)
	tok, err := state.ReadToken(filepath.Join(state.FleetDir(home), state.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	waitRegistered(t, door.Addr, tok, "noderef")

	deadline := time.Now().Add(30 * time.Second)
	for !door.Server.ReachStatus().Open {
		if time.Now().After(deadline) {
			t.Fatalf("the direct-reach door did not open: %+v", door.Server.ReachStatus())
		}
		time.Sleep(20 * time.Millisecond)
	}
	origin := "https://" + doorAddr
	spki := trustDoor(t, doorAddr, door.Server.ReachStatus().Fingerprint)
	code, err := pairing.IssueCode(reachDir, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}

	alloc, cancelAlloc := chromedp.NewExecAllocator(root,
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki))
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	ctx, cancelStep := context.WithTimeout(browser, 3*stepBudget)
	defer cancelStep()

	// Pair as a person would: the link with the code in its #fragment, the password, a name.
	if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(origin+pairing.PairPath+"#"+code)); err != nil {
		t.Fatalf("open the pairing link: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("code").value || null`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
		t.Fatalf("the code did not reach the form: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("password"), pairingPassword)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("name"), "Node Phone")); err != nil {
		t.Fatal(err)
	}
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("pairing: %v %+v", err, resp)
	}
	devs, err := pairing.ListDevices(reachDir)
	if err != nil || len(devs) != 1 {
		t.Fatalf("the register holds %+v (%v); want one device", devs, err)
	}
	login := devs[0].Login()

	// The Node console, through the door.
	resp, err = chromedp.Run(ctx, chromedp.NavigateResponse(origin+"/c/noderef/"))
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("the Node console's page through the door: %v %+v", err, resp)
	}
	scope, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("scope")))
	if err != nil {
		t.Fatal(err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("login")))
	if err != nil {
		t.Fatal(err)
	}
	if scope != "remote" || shown != login || !strings.HasPrefix(shown, "device:") {
		t.Errorf("the Node console shows scope %q, login %q; want remote, %q", scope, shown, login)
	}
	who, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch("whoami").then((r) => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	var caller struct{ Scope, Login string }
	if json.Unmarshal([]byte(who), &caller) != nil || caller.Scope != "remote" || caller.Login != login {
		t.Errorf("GET whoami through the door: %s; want remote %s", who, login)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`typeof sock !== "undefined" && sock.readyState === WebSocket.OPEN`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
		t.Fatalf("the page's WebSocket did not open through the door: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("send"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("echo").textContent === "hello"`,
		chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(stepBudget))); err != nil {
		t.Fatalf("no echo through the door: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`Number(document.getElementById("tick").textContent) >= 1`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
		t.Errorf("no server-sent event through the door: %v", err)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[float64](
		`fetch("settings/reach", {method: "POST", headers: {"Content-Type": "application/json"}, body: '{"mode":"direct"}'}).then((r) => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusForbidden {
		t.Errorf("the device's POST settings/reach: %v, want 403 (C7)", status)
	}
}

// waitRegistered polls the supervisor's console list until id is in it.
func waitRegistered(t *testing.T, addr, tok, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+addr+"/fleet/v1/consoles", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `"`+id+`"`) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("console %s did not register with the supervisor at %s (%v)", id, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// trustDoor fetches the door's root from /ca.crt, checks it against the fingerprint the supervisor
// reports, and returns the SPKI pin of the leaf the door serves, from a connection verified
// against that root: chromium trusts that key alone.
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
	if block == nil {
		t.Fatalf("/ca.crt: not PEM: %q", body)
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
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("the door's leaf does not verify against its root: %v", err)
	}
	defer conn.Close()
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// serveFakeLocalAPI is tailscaled's LocalAPI as far as the supervisor asks it here: nobody is a
// tailnet peer, status says TUN, no Tailscale SSH, no raw TCP forward.
func serveFakeLocalAPI(t *testing.T) *local.Client {
	t.Helper()
	return doortest.ServeLocalAPIHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/localapi/v0/status":
			json.NewEncoder(w).Encode(&ipnstate.Status{Version: "1.102.5", TUN: true, BackendState: "Running",
				TailscaleIPs: []netip.Addr{netip.MustParseAddr("100.101.102.1")},
				Self:         &ipnstate.PeerStatus{DNSName: "sup.tail1234.ts.net.", HostName: "sup"}})
		case "/localapi/v0/prefs":
			json.NewEncoder(w).Encode(&ipn.Prefs{})
		case "/localapi/v0/serve-config":
			json.NewEncoder(w).Encode(&ipn.ServeConfig{})
		default:
			http.Error(w, "no match for IP:port", http.StatusNotFound)
		}
	}))
}
