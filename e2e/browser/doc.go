// Package browser proves with a real browser — Debian's chromium, headless, driven by
// github.com/chromedp/chromedp — what a person sees of the reference console through the fleet
// supervisor:
//
//	chromium ──▶ 127.0.0.1:<serve>  stand-in for Tailscale Serve ──▶ 127.0.0.1:<door> supervisor ──▶ 127.0.0.1:<port> reference console "ref"
//	             (keeps Host; sets one X-Forwarded-For: 100.101.102.103,      │
//	              X-Forwarded-Host, X-Forwarded-Proto: http,                 └── WhoIs, status ──▶ fake tailscaled LocalAPI (unix socket)
//	              Tailscale-User-Login: alice@example.com)
//	chromium ──▶ 127.0.0.1:<other>  a page of another origin that calls the door (S12)
//
// The supervisor is the real one (supervisor.New + Serve) and verifies callers through the real
// tailscale.com/client/local code talking to a small fake LocalAPI: WhoIs knows only
// 100.101.102.103 (alice@example.com); status says TUN: true, so S5b is skipped as on a kernel
// TUN. The stand-in's connections come from this test process, whose uid is passed as
// TailscaledUID, so S5a holds.
//
// TestBrowserPairing_R7_R8_R9 drives the direct-reach door instead: the supervisor opens it on a
// free 127.0.0.1 port from its machine profile, and a phone-sized chromium that trusts only the
// door's key (pinned with --ignore-certificate-errors-spki-list) pairs, uses the console and is
// revoked. Its screenshots go to $FLEET_ARTIFACTS when set, else to a temporary folder.
//
// TestPagesLook_U1_U5_U6_U7 opens every page fleet writes itself — the tailnet index, the
// device's index, the pairing page of a loopback and of a LAN door, a refusal, the console-down
// page, "pairing is not set up" — light at 390 × 844 and dark at 360 px wide, and injects
// axe-core (pinned by testdata/axe's lockfile; .ci/run installs it with npm ci) into each: no
// violation of impact serious or critical, no sideways scroll, 44 × 44 px targets, measured in
// the page with its CSP in force. It skips without axe-core, and fails under CI=true.
//
// TestBrowserOwnerAndPhone_U2_U3_U4 is the machine's owner and a phone, each at 390 × 844, as
// people use them: the owner (alice, Self's user in the fake status) pairs a phone from the
// tailnet index and revokes another by clicking; the phone pairs with that code, reads its index
// and clicks Forget this device. Their pages get the look test's checks (axe-core among them).
// FLEET_SCREENSHOTS=1 also rewrites docs/img/phone-index.png and docs/img/owner-devices.png,
// the README's pictures.
//
// The tests need /usr/bin/chromium. Without it none runs, and the package's line in a green
// `go test ./...` says so ("ok … [no tests to run]"; -v shows why), except under CI=true, where
// they fail: .ci/run installs it. FLEET_SCREENSHOT=1 also writes testdata/refconsole.png, a screenshot of the
// page as alice sees it.
//
// The package holds only tests.
package browser
