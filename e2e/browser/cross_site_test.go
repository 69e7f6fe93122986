package browser

import (
	"bytes"
	"context"
	"html/template"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/phase-console/fleet/internal/chromiumtest"
	"github.com/phase-console/fleet/pairing"
)

// TestBrowserCrossSitePostsDoNotLockOut_R6b: a page of another site that the phone visits
// before it pairs posts to the door's /pair ten times (fetch, mode no-cors: the requests are
// sent, their answers opaque). Chromium marks them Sec-Fetch-Site: cross-site; the door refuses
// them 403 cross-origin and counts none of them, so the phone then pairs. Were each counted as
// a failure of the phone's own source, the eleventh request — the phone's own pairing — would
// be 429 for ten minutes.
func TestBrowserCrossSitePostsDoNotLockOut_R6b(t *testing.T) {
	root, cancel := context.WithTimeout(context.Background(), testBudget)
	defer cancel()
	chromiumtest.Need(t)
	f := startPairingFleet(t)
	browser := chromiumtest.Start(t, root, chromedp.Flag("ignore-certificate-errors-spki-list", f.leafSPKI))

	other := httptest.NewServer(crossSitePoster(f.origin+pairing.PairPath, 10))
	defer other.Close()
	// Another site, not only another origin: localhost is not the door's 127.0.0.1.
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	tab := chromiumtest.NewTab(t, browser, stepBudget)
	wire := watchNetwork(tab, f.origin)
	if _, err := chromedp.Run(tab, chromedp.NavigateResponse(otherURL)); err != nil {
		t.Fatalf("navigate to the other site: %v", err)
	}
	done, err := chromedp.Run(tab, chromedp.Poll[int](`window.settled === 10 ? window.settled : null`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(stepBudget)))
	if err != nil || done != 10 {
		t.Fatalf("waiting for the other site's ten posts: %d %v; the browser saw %v", done, err, wire.summary())
	}
	got := wire.statuses("POST", pairing.PairPath)
	if len(got) != 10 {
		t.Errorf("the browser saw %d answers to the other site's posts (%v), want 10", len(got), wire.summary())
	}
	for _, s := range got {
		if s != http.StatusForbidden {
			t.Errorf("the other site's post: %d, want 403 cross-origin (R6b)", s)
		}
	}
	// Refused by the door for the browser's Sec-Fetch-Site (R6b), before the pairing page and
	// its own Origin check were asked.
	if n := strings.Count(f.logs.String(), `"detail":"the request comes from a page of another site","door":"reach"`); n != 10 {
		t.Errorf("%d cross-site refusals by the door logged, want 10:\n%s", n, f.logs.String())
	}

	ctx := newPhoneTab(t, browser)
	pairInBrowser(t, ctx, f, f.code, "Test Phone")
}

// crossSitePoster is a page whose script posts a pairing form to door n times, as a page of
// another site can (mode no-cors), and counts them in window.settled.
func crossSitePoster(door string, n int) http.Handler {
	tmpl := template.Must(template.New("").Parse(`<!doctype html><title>another site</title>
<script>
window.settled = 0;
for (let i = 0; i < {{.N}}; i++) {
  fetch({{.Door}}, {method: "POST", mode: "no-cors", credentials: "include",
    body: new URLSearchParams({code: "BCDF-GHJK", password: "guess " + i, name: "x"})})
    .finally(() => { window.settled++; });
}
</script>`))
	var page bytes.Buffer
	if err := tmpl.Execute(&page, struct {
		Door string
		N    int
	}{door, n}); err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page.Bytes())
	})
}
