// Package chromiumtest starts Debian's chromium, headless, under github.com/chromedp/chromedp for
// the end-to-end tests of other packages (e2e/browser, e2e/fleetwide): one helper instead of a
// copy in each. It is for tests only; nothing in the product imports it.
package chromiumtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/phase-console/fleet/internal/testlog"
)

// Path is where Debian's chromium package installs the browser (.ci/run installs it).
const Path = "/usr/bin/chromium"

// Missing reports whether the tests of a package should not run for want of chromium: it is
// absent and CI is not "true" (under CI=true they run, and Need fails them).
func Missing() bool {
	_, err := os.Stat(Path)
	return err != nil && os.Getenv("CI") != "true"
}

// Need skips t when chromium is missing, and fails it instead under CI=true.
func Need(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is missing (%v): .ci/run installs the Debian package chromium", Path, err)
		}
		t.Skipf("%s not found (%v); install the Debian package chromium to run the browser tests", Path, err)
	}
}

// Start starts headless chromium for the test, with extra flags if any (a flag given false is
// left off: Flag("no-proxy-server", false) lets --proxy-server take effect), and returns its
// context. The browser lives as long as root; its output is logged when t fails.
func Start(t testing.TB, root context.Context, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	out := &testlog.Buffer{}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(root, append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Path),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests may run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(900, 500),
		chromedp.CombinedOutput(out),
	}, extra...)...)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	// Registered after the servers' clean-ups, so the browser goes first and its streams end.
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		if t.Failed() {
			t.Logf("chromium output:\n%s", out.String())
		}
	})
	// The first Run starts the browser, which lives as long as root (no shorter timeout here).
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("starting %s: %v\n%s", Path, err, out.String())
	}
	return browser
}

// NewTab opens a tab for one subtest, bounded by budget, and logs what its pages say on the
// console when the subtest fails.
func NewTab(t testing.TB, browser context.Context, budget time.Duration) context.Context {
	t.Helper()
	tab, cancelTab := chromedp.NewContext(browser)
	if err := chromedp.Do(tab); err != nil {
		cancelTab()
		t.Fatalf("opening a tab: %v", err)
	}
	msgs := &testlog.Buffer{}
	chromedp.Listen(tab, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range ev.Args {
				if a.Description != "" {
					args = append(args, a.Description)
				} else {
					args = append(args, string(a.Value))
				}
			}
			fmt.Fprintf(msgs, "console.%s: %s\n", ev.Type, strings.Join(args, " "))
		case *runtime.EventExceptionThrown:
			fmt.Fprintf(msgs, "exception: %s\n", ev.ExceptionDetails.Text)
		}
	})
	ctx, cancel := context.WithTimeout(tab, budget)
	t.Cleanup(func() {
		cancel()
		cancelTab()
		if t.Failed() && msgs.String() != "" {
			t.Logf("page console:\n%s", msgs.String())
		}
	})
	return ctx
}
