package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/phase-console/fleet/ca"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/supervisor"
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
// generated pairing password and a pairing code, printed with the link and the root fingerprint
// (no QR code: the link names a loopback address, which no phone can open). Open the link in a browser on this machine, pair, and the console shows the caller
// as the paired device (device:<slug>#<id6>, scope remote). Nothing it does touches the real
// state folder, tailscaled or Tailscale Serve.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", demoSummary+"\nCtrl-C (or closing its terminal) stops it and removes everything it made.\nIt prints the link, code and password only once its door on the --listen address is its own.", stdout, stderr)
	listen := fs.String("listen", demoListen, "the door's `ADDR` (a loopback address and port)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	// SIGHUP too: closing the terminal ends the demo and removes what it made, as Ctrl-C does
	// (fleet serve's SIGHUP, reload the profile, means nothing for a throw-away profile).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return demo(ctx, demoOptions{listen: *listen}, stdout, stderr)
}

type demoOptions struct {
	listen string
	// ready, when set, is told the pairing link, code and password once everything runs (tests).
	ready func(link, code, password string)
}

// demo runs the demo until ctx ends. It prints the link, the code and the password only once the
// door at o.listen is this process's: another local user may hold that address (bound first), and
// a browser sent there would hand them the code and the password; then it exits 1 naming the
// address, and prints nothing else.
func demo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fleet demo: "+format+"\n", a...)
		return 1
	}
	// Loopback only, whatever --listen says: the demo's door is for a browser on this machine (R1:
	// no flag opens the direct-reach door to the network).
	listen, err := netip.ParseAddrPort(o.listen)
	if err != nil || !listen.Addr().Unmap().IsLoopback() || listen.Addr().Zone() != "" || listen.Port() == 0 {
		fmt.Fprintf(stderr, "fleet demo: --listen %s: want a loopback address and port, like %s (the demo's door is for this machine only)\n", o.listen, demoListen)
		return 2
	}
	profile := fmt.Sprintf("# fleet demo: the direct-reach door on loopback only.\nreach:\n  mode: direct\n  listen: %s\n", listen)
	if _, err := reach.ParseProfile([]byte(profile)); err != nil {
		fmt.Fprintf(stderr, "fleet demo: --listen %s: %v\n", o.listen, err)
		return 2
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
	var srv *supervisor.Server // set before supAddr is sent
	go func() {
		serveDone <- serve(runCtx, serveOptions{home: home, port: 0, tailscaledUID: -1, logFormat: "json",
			tailscaleSocket: filepath.Join(base, "no-tailscaled.sock"), server: func(s *supervisor.Server) { srv = s },
			ready: func(a string) { supAddr <- a }}, io.Discard, logs)
	}()
	var addr string
	select {
	case addr = <-supAddr:
	case st := <-serveDone:
		return fail("the supervisor stopped at once (exit %d); is %s in use?", st, o.listen)
	case <-ctx.Done():
		cancel()
		<-serveDone
		return 0
	}
	consoleDone := make(chan int, 1)
	go func() {
		consoleDone <- serveConsole(runCtx, consoleOptions{id: "demo", name: "Demo console", supervisor: addr, home: home,
			tailscaleSocket: filepath.Join(base, "no-tailscaled.sock")}, io.Discard, logs)
	}()
	// From here on the supervisor and the console run: stopped stops them before the state folder
	// is removed.
	stopped := func(status int) int {
		cancel()
		<-serveDone
		<-consoleDone
		return status
	}

	fp, err := demoDoor(ctx, srv.ReachStatus, listen)
	if err != nil {
		if ctx.Err() != nil {
			return stopped(0) // stopped while it waited
		}
		return stopped(fail("%v", err))
	}
	// Step 3 below opens the demo console: let it register first (a new supervisor may take a
	// moment to accept its first connection). Not for ever: the link works without it.
	consoleLate := !demoConsoleRegistered(ctx, home, addr, "demo", demoConsoleWait)
	if ctx.Err() != nil {
		return stopped(0)
	}

	code, err := pairing.IssueCode(dir, "", time.Now())
	if err != nil {
		return stopped(fail("%v", err))
	}
	// No QR code of the link: it names a loopback address, which a phone cannot open (SPEC U7).
	link := "https://" + listen.String() + pairing.PairPath + "#" + code
	fmt.Fprintf(stdout, "fleet demo is running (state in %s, removed when you stop it).\n\n", home)
	fmt.Fprintf(stdout, "1. Open the door in a browser on this machine:\n\n     %s\n\n", link)
	fmt.Fprintf(stdout, "   The browser does not know fleet's private CA yet, so it warns about the certificate. Here,\n"+
		"   on this machine's loopback address with no network in between, you may click through, or\n"+
		"   install the root from https://%s/ca.crt, whose fingerprint (SHA-256) is:\n\n     %s\n\n"+
		"   A phone on Wi-Fi must never click through: it installs the root and checks that fingerprint\n"+
		"   in its certificate settings first, then pairs with no warning ('fleet reach pair' prints\n"+
		"   the steps).\n\n", listen, fp)
	fmt.Fprintf(stdout, "2. Pair with the code (already in the link) and this password:\n\n     code      %s\n     password  %s\n\n", code, password)
	fmt.Fprintf(stdout, "3. You land on this machine's consoles; open \"Demo console\": it shows you as the paired\n"+
		"   device (device:<name>#<id>, scope remote). 'fleet reach devices --state-dir %s' lists it.\n\n", home)
	if consoleLate {
		fmt.Fprintf(stdout, "   (The demo console has not registered yet: until it does, it is not listed.)\n\n")
	}
	fmt.Fprintln(stdout, "Ctrl-C stops the demo (so does closing this terminal) and removes everything it made.")
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

// demoDoorWait bounds how long the demo waits for its supervisor to open the door.
const demoDoorWait = 30 * time.Second

// demoDoor waits until the demo's supervisor (status) has its door open at listen, proves that
// what answers at listen is that door (demoDoorIsOurs) and returns its root's fingerprint. When
// the door cannot open there — another process holds the address, so its bind failed — or
// something else answers there, the error names the address and who holds it.
func demoDoor(ctx context.Context, status func() supervisor.ReachStatus, listen netip.AddrPort) (string, error) {
	deadline := time.Now().Add(demoDoorWait)
	for {
		st := status()
		if st.Open && st.Listen == listen.String() && st.Fingerprint != "" {
			if err := demoDoorIsOurs(ctx, listen, st.Fingerprint); err != nil {
				return "", demoDoorHeld(ctx, listen, err.Error())
			}
			return st.Fingerprint, nil
		}
		if st.Mode == reach.ModeDirect && st.Listen == listen.String() && st.Why != "" {
			return "", demoDoorHeld(ctx, listen, st.Why)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the door on %s did not open within %s", listen, demoDoorWait)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// demoDoorIsOurs proves that the server at listen is the door whose root has the fingerprint fp,
// as a browser sent to the link would meet it: over one TLS connection, the root it serves at
// /ca.crt has fingerprint fp, and the leaf it proved it holds the key of (the handshake) was made
// by that root for listen's address. Only this process has that leaf's key (0600, in a 0700 folder
// of this user's). It needs no socket-table lookup, so it holds on every platform.
func demoDoorIsOurs(ctx context.Context, listen netip.AddrPort, fp string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var leaf *x509.Certificate
	tr := &http.Transport{
		Proxy: nil,
		TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, // verified below, against the root that fp names
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("no certificate")
				}
				leaf = cs.PeerCertificates[0]
				return nil
			},
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+listen.String()+"/ca.crt", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}).Do(req)
	if err != nil {
		return fmt.Errorf("what answers there is not the door: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("what answers there is not the door: GET /ca.crt: %s %v", resp.Status, err)
	}
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("what answers there is not the door: /ca.crt holds no certificate")
	}
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("what answers there is not the door: /ca.crt: %w", err)
	}
	if got := ca.FormatFingerprint(sha256.Sum256(root.Raw)); got != fp {
		return fmt.Errorf("what answers there serves the root %s, not the door's %s", got, fp)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	if leaf == nil {
		return errors.New("what answers there showed no certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
		return fmt.Errorf("what answers there shows a certificate the door's root did not make: %w", err)
	}
	if err := leaf.VerifyHostname(listen.Addr().String()); err != nil {
		return fmt.Errorf("what answers there shows a certificate for another address: %w", err)
	}
	return nil
}

// demoDoorHeld is the error for a demo door that is not this process's at listen: why is what
// failed; who holds the address is asked of the socket that answers there (peercred.DialOwn,
// where the platform can tell).
func demoDoorHeld(ctx context.Context, listen netip.AddrPort, why string) error {
	holder := "another process holds it"
	dctx, cancel := context.WithTimeout(ctx, time.Second) // a listener of ours that does not accept is judged by then
	defer cancel()
	conn, err := peercred.DialOwn(dctx, "tcp", listen.String())
	switch {
	case errors.Is(err, peercred.ErrOtherUser):
		holder = "another user's process holds it"
	case err == nil:
		conn.Close()
		holder = "another process of yours holds it (another fleet demo?)"
	}
	return fmt.Errorf("the door cannot open on %s: %s (%s); the demo prints no link, code or password for it: stop that process, or pass --listen 127.0.0.1:PORT with a free port", listen, holder, why)
}

// demoConsoleWait bounds how long the demo waits for its console to register before it prints.
const demoConsoleWait = 15 * time.Second

// demoConsoleRegistered waits until the supervisor at supAddr lists the console id, for at most
// wait, and says whether it does.
func demoConsoleRegistered(ctx context.Context, home, supAddr, id string, wait time.Duration) bool {
	c, err := newAPIClient(home, supAddr)
	if err != nil {
		return false
	}
	deadline := time.Now().Add(wait)
	for {
		if resp, err := c.do(http.MethodGet, "/fleet/v1/consoles", nil); err == nil {
			var list struct {
				Consoles []supervisor.ConsoleStatus `json:"consoles"`
			}
			ok := resp.StatusCode == http.StatusOK && json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list) == nil
			resp.Body.Close()
			for _, con := range list.Consoles {
				if ok && con.ID == id {
					return true
				}
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
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
