package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"tailscale.com/client/local"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/internal/chromiumtest"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/supervisor"
)

// screenshotsDir is where TestBrowserOwnerAndPhone_U2_U3_U4 writes the README's two pictures
// when FLEET_SCREENSHOTS=1: the phone's index and the owner's devices.
const screenshotsDir = "../../docs/img"

// TestBrowserOwnerAndPhone_U2_U3_U4 is the owner and a phone, each in chromium at 390 × 844, as
// people would use them: the owner opens the tailnet index, types a name into Pair a phone and
// clicks it, and reads the code off the steps; the phone pairs with it and lands on its index
// (its consoles by name with health in words, itself by name and id6); the owner sees the phone
// under Devices and revokes another device by clicking Revoke; the phone clicks Forget this
// device and lands on the pairing page, its cookie gone and the register without it. Each page is
// checked as fleet's look asks (axe-core, no sideways scroll, 44 px targets) at 390 × 844 and at
// 360 px in dark mode. With FLEET_SCREENSHOTS=1 it rewrites docs/img/phone-index.png and
// docs/img/owner-devices.png.
func TestBrowserOwnerAndPhone_U2_U3_U4(t *testing.T) {
	root, cancel := context.WithTimeout(context.Background(), 2*testBudget)
	defer cancel()
	chromiumtest.Need(t)
	axe := loadAxe(t)
	f, serveURL := startOwnerFleet(t)
	browser := chromiumtest.Start(t, root, chromedp.Flag("ignore-certificate-errors-spki-list", f.leafSPKI))
	artifacts := artifactsDir(t)
	shots := os.Getenv("FLEET_SCREENSHOTS") == "1"
	if shots {
		if err := os.MkdirAll(screenshotsDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	owner := newPhoneTab(t, browser)
	var code string
	ok := t.Run("U4 the owner pairs a phone by clicking", func(t *testing.T) {
		if resp, err := chromedp.Run(owner, chromedp.NavigateResponse(serveURL+"/")); err != nil || resp.Status != 200 {
			t.Fatalf("the tailnet index: %v %v", resp, err)
		}
		if err := chromedp.Do(owner, chromedp.SendKeys(chromedp.ID("pair-name"), "Ann Pixel")); err != nil {
			t.Fatalf("typing the name: %v", err)
		}
		resp, err := chromedp.RunResponse(owner, chromedp.Click(chromedp.CSS(`#pair button[type="submit"]`)))
		if err != nil || resp.Status != 200 {
			t.Fatalf("clicking Pair a phone: %v %v", resp, err)
		}
		if code, err = chromedp.Run(owner, chromedp.Text(chromedp.CSS("span.code"))); err != nil {
			t.Fatalf("reading the code: %v", err)
		}
		n, err := chromedp.Run(owner, chromedp.Evaluate[int](`document.querySelectorAll("svg.qr").length`))
		if err != nil || n != 2 {
			t.Errorf("%d QR codes on the steps (%v), want the root's and the pairing link's", n, err)
		}
		if txt, _ := chromedp.Run(owner, chromedp.Evaluate[string](`document.querySelector("main").innerText`)); !strings.Contains(txt, f.fingerprint) {
			t.Errorf("the steps do not show the door's fingerprint %s", f.fingerprint)
		}
		saveScreenshot(t, owner, artifacts, "owner-pair-steps.png")
	})
	if !ok {
		return
	}

	phone := newPhoneTab(t, browser)
	var dev pairing.Device
	ok = t.Run("U2 the phone pairs and sees its index", func(t *testing.T) {
		dev = pairInBrowser(t, phone, f.pairingFleet, code, "Ann Pixel")
		raw, err := chromedp.Run(phone, chromedp.Evaluate[string](`JSON.stringify({
  consoles: [...document.querySelectorAll(".consoles li")].map(li => li.innerText.replace(/\s+/g, " ").trim()),
  device: document.querySelector("p.device").innerText.trim(),
  forget: document.querySelector('form[action="/pair/forget"] button').innerText.trim()})`))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Consoles []string
			Device   string
			Forget   string
		}
		json.Unmarshal([]byte(raw), &got)
		// Each console by name, its id beside it, its health in words: the reference console
		// answers its probe, nothing listens for the nightly build.
		if want := []string{"Nightly build nightly down", "Reference console ref up"}; !slices.Equal(got.Consoles, want) {
			t.Errorf("U2 the consoles read %q, want %q", got.Consoles, want)
		}
		if got.Device != "Ann Pixel "+dev.ID6 || got.Forget != "Forget this device" {
			t.Errorf("U2 the device reads %q, its button %q", got.Device, got.Forget)
		}
		if shots {
			saveScreenshot(t, phone, screenshotsDir, "phone-index.png")
		}
	})
	if !ok {
		return
	}

	other, _, err := pairing.RegisterDeviceFor(f.reachDir, "Old tablet", access.Everything, time.Now().Add(-48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ok = t.Run("U4 the owner sees the devices and revokes one by clicking", func(t *testing.T) {
		if _, err := chromedp.Run(owner, chromedp.NavigateResponse(serveURL+"/#devices")); err != nil {
			t.Fatal(err)
		}
		names, err := chromedp.Run(owner, chromedp.Evaluate[string](`[...document.querySelectorAll("#devices .device b")].map(b => b.innerText).join("|")`))
		if err != nil || names != "Old tablet|Ann Pixel" {
			t.Fatalf("the devices read %q (%v)", names, err)
		}
		if shots {
			shootSections(t, owner, filepath.Join(screenshotsDir, "owner-devices.png"))
		}
		resp, err := chromedp.RunResponse(owner, chromedp.Click(chromedp.CSS(`#devices form:has(input[value="`+other.ID6+`"]) button`)))
		if err != nil || resp.Status != 200 {
			t.Fatalf("clicking Revoke: %v %v", resp, err)
		}
		if devs, _ := pairing.ListDevices(f.reachDir); slices.ContainsFunc(devs, func(d pairing.Device) bool { return d.ID6 == other.ID6 }) {
			t.Errorf("U4 the revoked device is still in the register")
		}
		names, _ = chromedp.Run(owner, chromedp.Evaluate[string](`[...document.querySelectorAll("#devices .device b")].map(b => b.innerText).join("|")`))
		if names != "Ann Pixel" {
			t.Errorf("U4 after Revoke the devices read %q", names)
		}
	})
	if !ok {
		return
	}

	// Every page of these, as fleet's look asks, at both screens.
	for _, s := range lookScreens {
		for _, p := range []struct{ name, url string }{
			{"device-index", f.origin + "/"},
			{"owner-index", serveURL + "/"},
		} {
			t.Run("U1 "+p.name+"/"+s.name, func(t *testing.T) {
				ctx := screenTab(t, browser, s)
				if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(p.url)); err != nil {
					t.Fatal(err)
				}
				checkPage(t, ctx, axe)
				saveScreenshot(t, ctx, artifacts, "look-"+p.name+"-"+s.name+".png")
			})
		}
		t.Run("U1 owner-pair-steps/"+s.name, func(t *testing.T) {
			ctx := screenTab(t, browser, s)
			if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(serveURL+"/")); err != nil {
				t.Fatal(err)
			}
			if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#pair button[type="submit"]`))); err != nil {
				t.Fatal(err)
			}
			checkPage(t, ctx, axe)
		})
	}

	t.Run("U3 the phone forgets itself by clicking", func(t *testing.T) {
		if _, err := chromedp.Run(phone, chromedp.NavigateResponse(f.origin+"/")); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(phone, chromedp.Click(chromedp.CSS(`form[action="/pair/forget"] button`)))
		if err != nil || resp.Status != 200 || resp.URL != f.origin+pairing.PairPath {
			t.Fatalf("clicking Forget this device: %v %v; want the pairing page", resp, err)
		}
		if c := doorCookies(t, phone, f.pairingFleet); len(c) != 0 {
			t.Errorf("U3 the browser still holds %s", describeCookies(c))
		}
		devs, _ := pairing.ListDevices(f.reachDir)
		if slices.ContainsFunc(devs, func(d pairing.Device) bool { return d.ID6 == dev.ID6 }) {
			t.Errorf("U3 the forgotten device is still in the register")
		}
		// Its console links are gone with it: the door sends it to pairing.
		if resp, err := chromedp.Run(phone, chromedp.NavigateResponse(f.origin+"/c/ref/")); err != nil || resp.URL != f.origin+pairing.PairPath {
			t.Errorf("U3 a console after forgetting: %v %v; want the pairing page", resp, err)
		}
	})
}

// screenTab is a tab at screen s (viewport, scale, colour scheme), as the look test uses.
func screenTab(t *testing.T, browser context.Context, s screen) context.Context {
	t.Helper()
	ctx := chromiumtest.NewTab(t, browser, stepBudget)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(s.width, s.height, chromedp.EmulateScale(2), chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	scheme := "light"
	if s.dark {
		scheme = "dark"
	}
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}}); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// checkPage is the look test's checks of one page: fleet's stylesheet applied, nothing scrolls
// sideways, targets of 44 × 44 px, lang and headings, and axe-core.
func checkPage(t *testing.T, ctx context.Context, axe string) {
	t.Helper()
	if !stylesheetApplied(t, ctx) {
		t.Fatal("U1 fleet's stylesheet is not applied")
	}
	measureLook(t, ctx)
	runAxe(t, ctx, axe, "")
}

// shootSections writes a PNG of the owner's two sections, Devices and Pair a phone, to path.
func shootSections(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const a = document.getElementById("devices").getBoundingClientRect(), b = document.getElementById("pair").getBoundingClientRect();
  return JSON.stringify([0, a.top + scrollY - 8, document.documentElement.clientWidth, b.bottom - a.top + 16]);
})()`))
	if err != nil {
		t.Fatal(err)
	}
	var r []float64
	if err := json.Unmarshal([]byte(raw), &r); err != nil || len(r) != 4 {
		t.Fatalf("measuring the sections: %q %v", raw, err)
	}
	yes := true
	shot, err := chromedp.Call(ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatPng, CaptureBeyondViewport: &yes, FromSurface: &yes,
		Clip: &page.Viewport{X: r[0], Y: r[1], Width: r[2], Height: r[3], Scale: 1}})
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	png := shot.Data
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// ownerFleet is a pairing fleet whose machine alice owns, and the Serve stand-in's URL.
type ownerFleet struct {
	*pairingFleet
}

// startOwnerFleet is startPairingFleet on a machine that alice owns in tailscaled's status
// (ownerLocalAPI), with the loopback door behind a Serve stand-in for alice's browser.
func startOwnerFleet(t *testing.T) (*ownerFleet, string) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "state")
	if err := state.EnsureHome(home); err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close()
	if err := state.WritePrivateFile(filepath.Join(home, reach.ProfileFile),
		[]byte(fmt.Sprintf("reach:\n  mode: direct\n  listen: %s\n", addr))); err != nil {
		t.Fatal(err)
	}
	f := &pairingFleet{origin: "https://" + addr, reachDir: filepath.Join(state.FleetDir(home), "reach"), logs: &syncBuffer{}}
	if err := state.EnsureDir(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	if err := pairing.SetPassword(f.reachDir, []byte(pairingPassword)); err != nil {
		t.Fatal(err)
	}
	lapi := serveOwnerLocalAPI(t)
	door := supervisortest.Start(t, supervisor.Config{
		StateHome:     home,
		LocalAPI:      lapi,
		TailscaledUID: os.Getuid(),
		Logger:        slog.New(slog.NewJSONHandler(f.logs, nil)),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("supervisor log:\n%s", f.logs.String())
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
	serveOn(t, refLn, f.console)
	door.Register(t, supervisor.Console{ID: "ref", Addr: refLn.Addr().String(), Name: "Reference console"})
	goneLn := listen(t) // a console that is down: nothing listens at its address
	gone := goneLn.Addr().String()
	goneLn.Close()
	door.Register(t, supervisor.Console{ID: "nightly", Addr: gone, Name: "Nightly build"})
	deadline := time.Now().Add(30 * time.Second)
	for st := door.Server.ReachStatus(); !st.Open; st = door.Server.ReachStatus() {
		if time.Now().After(deadline) {
			t.Fatalf("the direct-reach door did not open: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.fingerprint = door.Server.ReachStatus().Fingerprint
	f.leafSPKI = trustDoor(t, addr, f.fingerprint)
	serveLn := listen(t)
	serveOn(t, serveLn, serveStandIn(door.Addr))
	return &ownerFleet{f}, "http://" + serveLn.Addr().String()
}

// serveOwnerLocalAPI is fakeLocalAPI on a machine that alice owns: its status names her as
// Self's user, as tailscaled's does (Self.UserID and her profile among the status's users).
func serveOwnerLocalAPI(t *testing.T) *local.Client {
	t.Helper()
	return serveLocalAPIWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/localapi/v0/status" {
			fakeLocalAPI(w, r)
			return
		}
		json.NewEncoder(w).Encode(&ipnstate.Status{
			Version:      "1.102.5",
			TUN:          true,
			BackendState: "Running",
			TailscaleIPs: []netip.Addr{netip.MustParseAddr(selfIP)},
			Self:         &ipnstate.PeerStatus{DNSName: tsName + ".", HostName: "sup", UserID: 7},
			User:         map[tailcfg.UserID]tailcfg.UserProfile{7: {ID: 7, LoginName: alice}},
		})
	}))
}

// serveLocalAPIWith serves h as tailscaled's LocalAPI on a unix socket (in a short folder) and
// returns a real LocalAPI client for it.
func serveLocalAPIWith(t *testing.T, h http.Handler) *local.Client {
	t.Helper()
	return doortest.ServeLocalAPIHandler(t, h)
}
