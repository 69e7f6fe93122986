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

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/supervisor"
)

const reachPairSummary = "Issue a one-time pairing code and print the door's link with it, the root fingerprint and a QR code."

func init() {
	addReachCommand(&command{name: "pair", summary: reachPairSummary, run: runReachPair})
}

// runReachPair is `fleet reach pair [--name N] [--state-dir DIR]` (SPEC R8). It issues a code
// (8 letters, shown XXXX-XXXX, valid 5 minutes, used once, dead after 5 wrong passwords) and
// prints the door's pairing link https://<listen>/pair#<code> — the code in the #fragment, which
// a browser never sends, never in a query —, the code, the root's fingerprint and a QR code of
// the link. It refuses (exit 1, issuing nothing) while the machine profile keeps the door off,
// before a pairing password is set, and unless the running supervisor says that its door is open
// at the profile's address — not when no fleet serve runs, nor when the door could not open there
// (another process holds the address, or it is not this machine's) — so that it never hands out a
// code that cannot pair, nor a link to someone else's server. It runs beside fleet serve: it asks
// it through /fleet/v1/reach (dialling only a supervisor of this same user), the code is shared
// through the files under reach/, and the fingerprint printed is the open door's.
func runReachPair(args []string, stdout, stderr io.Writer) int {
	const summary = reachPairSummary + "\nOpen the link on the phone (or scan the QR code), then type the pairing password there.\nThe code is valid for 5 minutes, pairs once, and dies after 5 wrong passwords.\nIt issues one only while the running fleet serve has its door open at the machine profile's address."
	fs := newFlags("reach pair", summary, stdout, stderr)
	name := fs.String("name", "", "call the device `N` (else it is called what is typed on the phone)")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	sup := fs.String("supervisor", "", "the supervisor's address `ADDR`, a loopback literal (default: from <stateHome>/fleet/supervisor.addr)")
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
	// The link is worth giving only when this user's door answers at it.
	c, err := newAPIClient(*stateDir, *sup)
	if err != nil {
		return fail("no code issued: %v", err)
	}
	fp, err := doorOpenAt(c, p.Listen)
	if err != nil {
		return fail("no code issued: %v", err)
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
	fmt.Fprintf(stdout, "Root fingerprint:  %s\n", fp)
	fmt.Fprintf(stdout, "                   (the device must trust this root: the pairing page shows how)\n")
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
