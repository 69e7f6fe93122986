package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/phase-console/fleet/ca"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
)

const demoSummary = "See fleet work end to end on this machine, with no set-up: a throw-away supervisor, a console and the direct-reach door on 127.0.0.1."

func init() {
	addCommand(&command{name: "demo", summary: demoSummary, run: runDemo})
}

// demoListen is where the demo opens the direct-reach door: loopback, so that nothing beyond this
// machine can reach it, and a browser here can pair.
const demoListen = "127.0.0.1:7443"

// runDemo is `fleet demo`: in one process and a throw-away state folder (removed on exit), the
// supervisor, a reference console ("demo") and the direct-reach door on 127.0.0.1:7443, with a
// generated pairing password and a pairing code, printed with the link, the root fingerprint and
// a QR code. Open the link in a browser on this machine, pair, and the console shows the caller
// as the paired device (device:<slug>#<id6>, scope remote). Nothing it does touches the real
// state folder, tailscaled or Tailscale Serve.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", demoSummary+"\nCtrl-C stops it and removes everything it made.", stdout, stderr)
	listen := fs.String("listen", demoListen, "the door's `ADDR` (a loopback address and port)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo(ctx, demoOptions{listen: *listen}, stdout, stderr)
}

type demoOptions struct {
	listen string
	// ready, when set, is told the pairing link, code and password once everything runs (tests).
	ready func(link, code, password string)
}

func demo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fleet demo: "+format+"\n", a...)
		return 1
	}
	base, err := os.MkdirTemp("", "fleet-demo-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(base)
	home := filepath.Join(base, "state")
	if err := state.EnsureHome(home); err != nil {
		return fail("%v", err)
	}
	profile := fmt.Sprintf("# fleet demo: the direct-reach door on loopback only.\nreach:\n  mode: direct\n  listen: %s\n", o.listen)
	if _, err := reach.ParseProfile([]byte(profile)); err != nil {
		return fail("--listen %s: %v", o.listen, err)
	}
	if err := state.WritePrivateFile(filepath.Join(home, reach.ProfileFile), []byte(profile)); err != nil {
		return fail("%v", err)
	}
	// The token first, so that the console can start beside the supervisor.
	if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
		return fail("%v", err)
	}
	dir := pairingFolder(home)
	if err := state.EnsureDir(dir); err != nil {
		return fail("%v", err)
	}
	password := demoPassword()
	if err := pairing.SetPassword(dir, []byte(password)); err != nil {
		return fail("%v", err)
	}

	logs := io.Discard // the demo's screen is for the person; refusals are summed up at the end
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	supAddr := make(chan string, 1)
	serveDone := make(chan int, 1)
	go func() {
		serveDone <- serve(runCtx, serveOptions{home: home, port: 0, tailscaledUID: -1, logFormat: "json",
			tailscaleSocket: filepath.Join(base, "no-tailscaled.sock"), ready: func(a string) { supAddr <- a }}, io.Discard, logs)
	}()
	var addr string
	select {
	case addr = <-supAddr:
	case st := <-serveDone:
		return fail("the supervisor stopped at once (exit %d); is %s in use?", st, o.listen)
	case <-ctx.Done():
		return 0
	}
	consoleDone := make(chan int, 1)
	go func() {
		consoleDone <- serveConsole(runCtx, consoleOptions{id: "demo", name: "Demo console", supervisor: addr, home: home,
			tailscaleSocket: filepath.Join(base, "no-tailscaled.sock")}, io.Discard, logs)
	}()

	fp, err := demoFingerprint(ctx, home, netip.MustParseAddrPort(o.listen).Addr()) // ParseProfile took it
	if err != nil {
		return fail("%v", err)
	}
	code, err := pairing.IssueCode(dir, "", time.Now())
	if err != nil {
		return fail("%v", err)
	}
	link := "https://" + o.listen + pairing.PairPath + "#" + code
	qr, err := qrcode.New(link, qrcode.Medium)
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "fleet demo is running (state in %s, removed when you stop it).\n\n", home)
	fmt.Fprintf(stdout, "1. Open the door in a browser on this machine:\n\n     %s\n\n", link)
	fmt.Fprintf(stdout, "   The browser does not know fleet's private CA yet: it warns once. Compare the root\n"+
		"   fingerprint it shows with this one, or install the root from https://%s/ca.crt:\n\n     %s\n\n", o.listen, fp)
	fmt.Fprintf(stdout, "2. Pair with the code (already in the link) and this password:\n\n     code      %s\n     password  %s\n\n", code, password)
	fmt.Fprintf(stdout, "3. You land on this machine's consoles; open \"Demo console\": it shows you as the paired\n"+
		"   device (device:<name>#<id>, scope remote). 'fleet reach devices --state-dir %s' lists it.\n\n", home)
	fmt.Fprintf(stdout, "%s\n", qr.ToSmallString(false))
	fmt.Fprintln(stdout, "Ctrl-C stops the demo.")
	if o.ready != nil {
		o.ready(link, code, password)
	}

	var status int
	select {
	case <-ctx.Done():
		cancel()
		status = <-serveDone
	case status = <-serveDone:
		cancel()
	}
	<-consoleDone
	return status
}

// demoFingerprint waits for the supervisor to have made the door's CA and returns its root's
// fingerprint.
func demoFingerprint(ctx context.Context, home string, addr netip.Addr) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		fp, err := ca.ReadFingerprint(caFolder(home), addr)
		if err == nil {
			return fp, nil
		}
		if !errors.Is(err, ca.ErrNoRoot) || time.Now().After(deadline) {
			return "", fmt.Errorf("the door did not open: %v", err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// demoPassword is a throw-away pairing password: four groups of five letters, easy to type on a
// phone, 92 bits from crypto/rand.
func demoPassword() string {
	const letters = "abcdefghijkmnopqrstuvwxyz" // no l: it reads like 1
	b := make([]byte, 0, 23)
	for g := 0; g < 4; g++ {
		if g > 0 {
			b = append(b, '-')
		}
		for i := 0; i < 5; i++ {
			b = append(b, letters[randIndex(len(letters))])
		}
	}
	return string(b)
}

func randIndex(n int) int {
	var x [1]byte
	for {
		rand.Read(x[:])
		if int(x[0]) < 256-256%n {
			return int(x[0]) % n
		}
	}
}
