package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/supervisor"
)

const reachPairSummary = "Issue a one-time pairing code and print the steps: first trust the door's root (URL, fingerprint, QR code), then the pairing link (QR code)."

func init() {
	addReachCommand(&command{name: "pair", summary: reachPairSummary, run: runReachPair})
}

// runReachPair is `fleet reach pair [--name N] [--state-dir DIR]` (SPEC R8). It issues a code
// (8 letters, shown XXXX-XXXX, valid 5 minutes, used once, dead after 5 wrong passwords) and
// prints the door's pairing link https://<listen>/pair#<code> — the code in the #fragment, which
// a browser never sends, never in a query —, the code, the root's fingerprint and a QR code of
// the link, after the door's root URL https://<listen>/ca.crt and a QR code of that: the steps in
// the order printPairSteps gives, trust first, then pair. It refuses (exit 1, issuing nothing)
// while the machine profile keeps the door off, before a pairing password is set, and unless the
// running supervisor says that its door is open at the profile's address — not when no fleet
// serve runs, nor when the door could not open there (another process holds the address, or it
// is not this machine's) — so that it never hands out a code that cannot pair, nor a link to
// someone else's server. It runs beside fleet serve: it asks it through /fleet/v1/reach
// (dialling only a supervisor of this same user), the code is shared through the files under
// reach/, and the fingerprint printed is the open door's.
func runReachPair(args []string, stdout, stderr io.Writer) int {
	const summary = reachPairSummary + "\n" +
		"Pair in this order: on the phone, first open the door's /ca.crt (the URL and a QR code are printed),\n" +
		"install that root and check its SHA-256 fingerprint in the phone's certificate settings against\n" +
		"the one printed; only then open the pairing link (or scan its QR code). It must open without a\n" +
		"certificate warning: if the browser warns, type no password. Without one, type the pairing password.\n" +
		"The code is valid for 5 minutes, pairs once, and dies after 5 wrong passwords.\n" +
		"It issues one only while the running fleet serve has its door open at the machine profile's address."
	fs := newFlags("reach pair", summary, stdout, stderr)
	name := fs.String("name", "", "call the device `N` (else it is called what is typed on the phone)")
	consolesFlag := fs.String("consoles", access.All, "the consoles the device may open, comma-separated `LIST` of ids, prefixes (build-*) or * for every one (SPEC G1)")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	sup := fs.String("supervisor", "", "the supervisor's address `ADDR`, a loopback literal (default: from <stateHome>/fleet/supervisor.addr)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fleet reach pair: "+format+"\n", a...)
		return 1
	}
	consoles, err := access.ParseList(*consolesFlag)
	if err != nil {
		fmt.Fprintf(stderr, "fleet reach pair: --consoles: %v\n", err)
		return 2
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		return fail("%v", err)
	}
	p, err := reach.LoadProfile(home)
	if err != nil {
		return fail("the machine profile is refused, so the door stays closed: %v", err)
	}
	if !p.Open() {
		return fail("the direct-reach door is off. Open it in %s:\n\n"+
			"  reach:\n    mode: direct\n    listen: <this machine's LAN address>:7443\n\n"+
			"then start fleet serve (a running one picks the change up within 10 s, at once on SIGHUP).",
			filepath.Join(home, reach.ProfileFile))
	}
	dir := pairingFolder(home)
	if _, err := pairing.LoadPassword(dir); err != nil {
		if errors.Is(err, pairing.ErrNoPassword) {
			return fail("no pairing password is set yet: run 'fleet reach password' first")
		}
		return fail("%v", err)
	}
	// The link is worth giving only when this user's door answers at it.
	c, err := newAPIClient(*stateDir, *sup)
	if err != nil {
		return fail("no code issued: %v", err)
	}
	fp, err := doorOpenAt(c, p.Listen)
	if err != nil {
		return fail("no code issued: %v", err)
	}

	rootQR, err := qrcode.New(rootLink(p), qrcode.Medium) // before the code: nothing issued if it fails
	if err != nil {
		return fail("making the QR code: %v", err)
	}
	code, err := pairing.IssueCodeFor(dir, *name, consoles, time.Now())
	if err != nil {
		return fail("%v", err)
	}
	link := pairLink(p, code)
	qr, err := qrcode.New(link, qrcode.Medium)
	if err != nil {
		return fail("making the QR code: %v", err)
	}

	printPairSteps(stdout, pairSteps{
		rootURL: rootLink(p), rootQR: rootQR.ToSmallString(false), fingerprint: fp,
		link: link, linkQR: qr.ToSmallString(false), code: code, name: *name, consoles: consoles.String(),
	})
	return 0
}

// pairSteps is what `fleet reach pair` prints: the two steps of pairing a device, in the order
// that keeps the pairing password from a stranger between the device and the door.
type pairSteps struct {
	rootURL, rootQR string // step 1: the root, at /ca.crt, and a QR code of its URL
	fingerprint     string // the root's SHA-256, as the open door's supervisor reports it
	link, linkQR    string // step 2: the pairing link, the code in its #fragment, and its QR code
	code, name      string // the code, shown XXXX-XXXX; the --name given, if any
	consoles        string // what the device may open, as --consoles gave it
}

// printPairSteps prints s. The order is the point: a phone cannot trust fleet's private CA before
// it has installed the root, so the first visit to the door warns about its certificate — and a
// stranger on the Wi-Fi who intercepts the connection shows the same warning with a certificate
// of their own; after a click-through they read the code (their script reads the #fragment) and
// the password (the POST). The fingerprint on the pairing page comes over that same connection
// and proves nothing. So the device first installs the root from /ca.crt (no secret in it) and
// checks its fingerprint in its own certificate settings against the one printed here, on the
// machine; only then does it open the pairing link, which must open without a warning, and a
// warning then means: stop, type no password. The root's URL and QR code come first, so that
// the first thing scanned holds no secret. No leaf fingerprint is offered for comparing on the
// warning screen instead: that would teach clicking through, the leaf is renewed every few
// days, and a device that trusts no root warns again at every later visit.
func printPairSteps(w io.Writer, s pairSteps) {
	fmt.Fprintf(w, "Pair the device in two steps, in this order: first it trusts this door's root, then it pairs.\n\n")
	fmt.Fprintf(w, "1. Trust the door (once per device). On the device, open this, or scan the QR code below it:\n\n")
	fmt.Fprintf(w, "     %s\n\n%s\n", s.rootURL, s.rootQR)
	fmt.Fprintf(w, "   It is the door's root certificate, and holds no secret (the browser may warn while\n"+
		"   downloading it: the check that counts is the next one). Install it as a CA certificate,\n"+
		"   find its SHA-256 fingerprint in the device's certificate settings and check it digit for\n"+
		"   digit against this one (the device may group the digits differently):\n\n")
	fmt.Fprintf(w, "Root fingerprint:  %s\n\n", s.fingerprint)
	fmt.Fprintf(w, "   iPhone, iPad: Settings → General → VPN & Device Management → \"fleet direct-reach root …\"\n"+
		"     → More Details shows the fingerprint. Install it, then General → About → Certificate\n"+
		"     Trust Settings → turn on full trust for it.\n"+
		"   Android: Settings → Security → Encryption & credentials → Install a certificate → CA\n"+
		"     certificate; then Trusted credentials → User → the fleet root shows the fingerprint.\n"+
		"   Another fingerprint: delete that certificate and do not pair — someone may be between\n"+
		"   the device and this machine.\n\n")
	fmt.Fprintf(w, "2. Only then open the pairing link, or scan the QR code below it:\n\n")
	fmt.Fprintf(w, "     %s\n\n%s\n", s.link, s.linkQR)
	fmt.Fprintf(w, "Pairing code:      %s   (valid %d minutes, once; %d wrong passwords kill it)\n",
		s.code, int(pairing.CodeTTL/time.Minute), pairing.MaxWrongPasswords)
	if s.name != "" {
		fmt.Fprintf(w, "Device name:       %s\n", s.name)
	}
	if s.consoles != "" {
		fmt.Fprintf(w, "May open:          %s\n", s.consoles)
	}
	fmt.Fprintf(w, "\n   It must open without any certificate warning. If the browser warns, stop: do not type\n"+
		"   the pairing password — someone may be reading it; do step 1 first. With no warning, type\n"+
		"   the pairing password on the page. A device that already trusts this root (the same\n"+
		"   fingerprint) skips step 1; a code that expired meanwhile: run fleet reach pair again.\n")
}

// rootLink is the door's root certificate (pairing.RootLink): no secret, so its QR code may be
// scanned first.
func rootLink(p reach.Profile) string { return pairing.RootLink(p.Listen) }

// pairLink is the door's pairing page with code in the #fragment (pairing.PairLink).
func pairLink(p reach.Profile, code string) string { return pairing.PairLink(p.Listen, code) }

// doorOpenAt asks the running supervisor (c) whether its direct-reach door is open at listen, the
// machine profile's address, and returns the door's root fingerprint when it is. Otherwise the
// error is one line that says why no device could pair there and what to do. The supervisor is
// the only one that knows: the profile says where the door should be, not whether it could bind
// there — another local user may hold that address, and then a link to it reaches their server.
func doorOpenAt(c *apiClient, listen netip.AddrPort) (string, error) {
	st, err := c.reachStatus()
	if err != nil {
		return "", err
	}
	return openDoorFingerprint(st, listen)
}

// openDoorFingerprint is doorOpenAt's judgement of the supervisor's answer st.
func openDoorFingerprint(st supervisor.ReachStatus, listen netip.AddrPort) (string, error) {
	switch {
	case st.Open && st.Listen == listen.String() && st.Fingerprint != "":
		return st.Fingerprint, nil
	case st.Open:
		return "", fmt.Errorf("the running fleet serve has its door open at %s, not yet at the profile's %s: it picks a changed profile up within 10 s (at once on SIGHUP); try again then", st.Listen, listen)
	case st.Why == "":
		return "", fmt.Errorf("the running fleet serve has not opened its door at %s yet; try again in a few seconds ('fleet reach status' shows it)", listen)
	}
	fix := "fix that ('fleet reach status' shows the door; fleet serve tries again every few seconds), then run this again"
	switch {
	case strings.Contains(st.Why, syscall.EADDRINUSE.Error()):
		fix = "another process holds that address: stop it (or move the door: reach.listen in the machine profile); fleet serve tries again every few seconds ('fleet reach status' shows when the door is open)"
	case strings.Contains(st.Why, syscall.EADDRNOTAVAIL.Error()):
		fix = "that address is not this machine's (now): set reach.listen in the machine profile to one of its addresses; fleet serve tries again every few seconds ('fleet reach status' shows when the door is open)"
	}
	return "", fmt.Errorf("the direct-reach door is not open at %s (%s): %s", listen, st.Why, fix)
}
