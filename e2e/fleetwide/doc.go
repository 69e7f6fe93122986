// Package fleetwide proves SPEC G2 — one page for the whole fleet — with a real browser on a real
// tailnet, inside one `go test` process, with no internet:
//
//	chromium ──▶ 127.0.0.1 proxy (CONNECT) ──▶ node "person" (tsnet Dial) ─┬─▶ "a" Serve HTTPS :443 ─▶ fleet ─▶ consoles alpha, notes
//	                                                                        ├─▶ "b" Serve HTTPS :443 ─▶ fleet ─▶ consoles web, secret
//	                                                                        ├─▶ "stall" Serve HTTPS :443 ─▶ a backend that never answers
//	                                                                        └─▶ "idle" (nothing on 443)
//
// One testcontrol server (package internal/tailnettest) gives every node the same user, as one
// person's laptop and machines are; its policy grants that person, on every machine, the app
// capability phase-console.dev/cap/fleet = {"consoles": ["alpha", "web"]} (G1). Each machine's
// fleet is the real supervisor, verifying callers through its node's LocalAPI, published by real
// Serve on HTTPS 443 with certificates of a test CA (tsnet's test hook for Serve's certificates
// stands in for Let's Encrypt).
//
// Chromium (package internal/chromiumtest) reaches the tailnet only through the person's node:
// --proxy-server names a small proxy that dials with the person's tsnet.Server. It trusts the
// one key every Serve certificate carries (--ignore-certificate-errors-spki-list), as e2e/browser
// trusts the direct-reach door: Debian's chromium takes its roots from an NSS database that only
// certutil could add the test root to. It opens https://a.<suffix>/ and the test waits, bounded,
// until b's section (<section class="peer" data-origin="https://b.<suffix>">) is answered and no
// peer is loading; then b lists web and not secret, a's own consoles are alpha and not notes,
// stall, idle and the person's own node end as no-answer, and clicking b's console link opens
// the console through b's Serve, which sees the person's login and node.
//
// The package holds only tests; it lives apart so that the rest of `go test ./...` stays fast.
// Without /usr/bin/chromium it runs nothing (the package's line says so), except under CI=true,
// where it fails: .ci/run installs chromium.
package fleetwide
