package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/phase-console/fleet/ca"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
)

const reachPairSummary = "Issue a one-time pairing code and print the door's link with it, the root fingerprint and a QR code."

func init() {
	addReachCommand(&command{name: "pair", summary: reachPairSummary, run: runReachPair})
}

// runReachPair is `fleet reach pair [--name N] [--state-dir DIR]` (SPEC R8). It issues a code
// (8 letters, shown XXXX-XXXX, valid 5 minutes, used once, dead after 5 wrong passwords) and
// prints the door's pairing link https://<listen>/pair#<code> — the code in the #fragment, which
// a browser never sends, never in a query —, the code, the root's fingerprint and a QR code of
// the link. It refuses (exit 1) while the machine profile keeps the door off, or before a pairing
// password is set, so that it never hands out a code that cannot pair. It runs beside fleet
// serve: the code is shared through the files under reach/, and the CA is only read.
func runReachPair(args []string, stdout, stderr io.Writer) int {
	const summary = reachPairSummary + "\nOpen the link on the phone (or scan the QR code), then type the pairing password there.\nThe code is valid for 5 minutes, pairs once, and dies after 5 wrong passwords."
	fs := newFlags("reach pair", summary, stdout, stderr)
	name := fs.String("name", "", "call the device `N` (else it is called what is typed on the phone)")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fleet reach pair: "+format+"\n", a...)
		return 1
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
	fp, err := ca.ReadFingerprint(caFolder(home), p.Listen.Addr())
	if err != nil && !errors.Is(err, ca.ErrNoRoot) {
		return fail("%v", err)
	}

	code, err := pairing.IssueCode(dir, *name, time.Now())
	if err != nil {
		return fail("%v", err)
	}
	link := pairLink(p, code)
	qr, err := qrcode.New(link, qrcode.Medium)
	if err != nil {
		return fail("making the QR code: %v", err)
	}

	fmt.Fprintf(stdout, "Open this on the device to pair (or scan the QR code below):\n\n  %s\n\n", link)
	fmt.Fprintf(stdout, "Pairing code:      %s   (valid %d minutes, once; %d wrong passwords kill it)\n",
		code, int(pairing.CodeTTL/time.Minute), pairing.MaxWrongPasswords)
	if fp != "" {
		fmt.Fprintf(stdout, "Root fingerprint:  %s\n", fp)
		fmt.Fprintf(stdout, "                   (the device must trust this root: the pairing page shows how)\n")
	} else {
		fmt.Fprintf(stdout, "Root fingerprint:  the door has not made its CA yet: start fleet serve with reach.mode direct,\n"+
			"                   then 'fleet reach status' and the pairing page show it\n")
	}
	if *name != "" {
		fmt.Fprintf(stdout, "Device name:       %s\n", *name)
	}
	fmt.Fprintf(stdout, "\n%s\n", qr.ToSmallString(false))
	return 0
}

// pairLink is the door's pairing page with code in the #fragment: a browser never sends a
// fragment, so the code reaches neither a server, a log nor a proxy (SPEC S11).
func pairLink(p reach.Profile, code string) string {
	return "https://" + p.Listen.String() + pairing.PairPath + "#" + code
}
