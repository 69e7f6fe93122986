package browser

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/phase-console/fleet/internal/chromiumtest"
	"github.com/phase-console/fleet/pairing"
)

// TestBrowserPairsAgainAfterRevocation_R10: a phone is paired, revoked, reloads its page and
// the pairing page a dozen times, and pairs again at once with a fresh code. The door clears the
// refused credential in the answer that refuses it, so the browser stops sending it, and the
// pairing page, its assets and /ca.crt never count a refused credential: no load is 429. Were
// the revoked cookie counted on the redirect and on every asset of the pairing page, a revoked
// phone would be 429 within two loads and could not pair again for ten minutes. The browser
// trusts the door once (its leaf's key pinned at start) and meets no certificate error after.
func TestBrowserPairsAgainAfterRevocation_R10(t *testing.T) {
	root, cancel := context.WithTimeout(context.Background(), testBudget)
	defer cancel()
	chromiumtest.Need(t)
	f := startPairingFleet(t)
	browser := chromiumtest.Start(t, root, chromedp.Flag("ignore-certificate-errors-spki-list", f.leafSPKI))
	ctx := newPhoneTab(t, browser)
	wire := watchNetwork(ctx, f.origin)

	first := pairInBrowser(t, ctx, f, f.code, "Old Phone")
	if err := pairing.RevokeDevice(f.reachDir, first.ID6); err != nil {
		t.Fatalf("revoking %s: %v", first.ID6, err)
	}
	resp, err := chromedp.RunResponse(ctx, chromedp.Reload())
	if err != nil {
		t.Fatalf("reloading the index after the revocation: %v", err)
	}
	if resp.Status != http.StatusOK || resp.URL != f.origin+pairing.PairPath {
		t.Fatalf("reloading the index after the revocation: status %d at %s, want the pairing page", resp.Status, resp.URL)
	}
	if jar := doorCookies(t, ctx, f); len(jar) != 0 {
		t.Errorf("after the refusal the browser still holds %s; want the credential cleared (R10)", describeCookies(jar))
	}
	ctx = newPhoneTab(t, browser) // each tab has stepBudget
	reloads := watchNetwork(ctx, f.origin)
	if _, err := chromedp.Run(ctx, chromedp.NavigateResponse(f.origin+pairing.PairPath)); err != nil {
		t.Fatalf("opening the pairing page: %v", err)
	}
	for i := range 12 { // each load is three requests: the page and its two assets
		resp, err := chromedp.RunResponse(ctx, chromedp.Reload())
		if err != nil {
			t.Fatalf("reload %d of the pairing page: %v", i+1, err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("reload %d of the pairing page: status %d, want 200 (R10: a revoked phone is not locked out)", i+1, resp.Status)
		}
	}

	answers := append(wire.summary(), reloads.summary()...)
	code, err := pairing.IssueCode(f.reachDir, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx = newPhoneTab(t, browser) // the link of the fresh code, opened from its QR code: a new tab
	wire = watchNetwork(ctx, f.origin)
	second := pairInBrowser(t, ctx, f, code, "New Phone")
	if second.ID6 == first.ID6 {
		t.Errorf("pairing again gave the revoked device's id6 %s", first.ID6)
	}
	if jar := doorCookies(t, ctx, f); len(jar) != 1 || jar[0].Name != pairing.CookieName {
		t.Errorf("after pairing again the browser holds %s; want the one new credential", describeCookies(jar))
	}
	for _, a := range append(answers, wire.summary()...) {
		if strings.Contains(a, "failed") && strings.Contains(a, "CERT") {
			t.Errorf("a certificate error after the first trust: %s", a)
		}
		if strings.HasSuffix(a, " 429") {
			t.Errorf("the door held the phone back: %s", a)
		}
	}
	if pin := trustDoor(t, strings.TrimPrefix(f.origin, "https://"), f.fingerprint); pin != f.leafSPKI {
		t.Errorf("the door serves another leaf key than the one trusted at start")
	}
}

// pairInBrowser opens the pairing link for code in ctx's tab, as a person would, types the
// password and the device's name, submits, and returns the device paired; it fails the test
// unless the answer is the device's index.
func pairInBrowser(t *testing.T, ctx context.Context, f *pairingFleet, code, name string) pairing.Device {
	t.Helper()
	link := f.origin + pairing.PairPath + "#" + code
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(link))
	if err != nil || resp == nil {
		t.Fatalf("navigate %s: %v (a navigation within the page it shows already has no answer)", f.origin+pairing.PairPath, err)
	}
	if resp.Status != http.StatusOK {
		t.Fatalf("the pairing page: status %d, want 200", resp.Status)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("code").value || null`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget))); err != nil {
		t.Fatalf("waiting for the code in the form: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("password"), pairingPassword)); err != nil {
		t.Fatalf("typing the password: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("name"), name)); err != nil {
		t.Fatalf("typing the name: %v", err)
	}
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
	if err != nil {
		t.Fatalf("submitting the form: %v", err)
	}
	if resp.Status != http.StatusOK || resp.URL != f.origin+"/" {
		t.Fatalf("after pairing %s: status %d at %s, want 200 at the device's index", name, resp.Status, resp.URL)
	}
	devs, err := pairing.ListDevices(f.reachDir)
	if err != nil {
		t.Fatal(err)
	}
	slug := strings.ReplaceAll(strings.ToLower(name), " ", "-")
	for _, d := range devs {
		if d.Slug == slug {
			return d
		}
	}
	t.Fatalf("the register holds %+v; want a device %s", devs, slug)
	return pairing.Device{}
}

// doorCookies is what the browser holds for the door's origin.
func doorCookies(t *testing.T, ctx context.Context, f *pairingFleet) []*network.Cookie {
	t.Helper()
	jar, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{f.origin + "/"}})
	if err != nil {
		t.Fatalf("reading the browser's cookies: %v", err)
	}
	return jar.Cookies
}
