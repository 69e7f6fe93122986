package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/paths"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/fdlimit"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
	"github.com/phase-console/fleet/supervisor"
)

const serveSummary = "Run the supervisor: the loopback door on 127.0.0.1 for Tailscale Serve to publish."

func init() {
	addCommand(&command{name: "serve", summary: serveSummary, run: runServe})
}

// serveOptions are the parsed flags of `fleet serve`.
type serveOptions struct {
	home            string
	port            int
	tailscaleSocket string
	tailscaledUID   int
	unixSocket      string
	logFormat       string // "text", "json" or "auto"
	// ready, when set, is called with the address once the door serves (for tests).
	ready func(addr string)
	// server, when set, is given the supervisor just before ready is called (fleet demo asks it
	// for its direct-reach door).
	server func(*supervisor.Server)
	// sockets, when set, is where the listening sockets come from and how they are handed on
	// (handoff.go: socket activation and SIGUSR2). Nil: serve opens its own and cannot hand over.
	sockets *sockets
}

func runServe(args []string, stdout, stderr io.Writer) int {
	if flagNamed(args, "host") {
		fmt.Fprintln(stderr, "fleet serve: --host is refused (rule S1, docs/contract.md): the supervisor listens on 127.0.0.1 only; publish it with 'tailscale serve --bg http://127.0.0.1:7420'")
		return 2
	}
	fs := newFlags("serve", serveSummary, stdout, stderr)
	port := portFlag(fs, "port", contract.DefaultPort, 1, "TCP port on 127.0.0.1")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	socket := fs.String("tailscale-socket", "", "tailscaled's LocalAPI socket `PATH` (default: tailscaled's usual socket)")
	uid := fs.Int("tailscaled-uid", -1, "uid that runs tailscaled; -1: the owner of its LocalAPI socket")
	unixSocket := fs.String("socket", "", "also listen on this unix socket `PATH` (0600, folder 0700) for 'tailscale serve unix:PATH' (tailscaled 1.94+): the hardened set-up, see docs/operating.md")
	logFormat := fs.String("log-format", "auto", "the start-up line: `text` (one line for a person), json, or auto (text when stderr is a terminal); refusals are always JSON lines")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	switch *logFormat {
	case "text", "json", "auto":
	default:
		fmt.Fprintf(stderr, "fleet serve: --log-format %q: want text, json or auto\n", *logFormat)
		return 2
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet serve: %v\n", err)
		return 1
	}
	socks, err := newSockets(filepath.Join(state.FleetDir(home), PIDFile))
	if err != nil {
		fmt.Fprintf(stderr, "fleet serve: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, serveOptions{home: home, port: *port, tailscaleSocket: *socket, tailscaledUID: *uid,
		unixSocket: *unixSocket, logFormat: *logFormat, sockets: socks}, stdout, stderr)
}

// serve runs the supervisor until ctx is done, or until it has handed over to a new process
// (SIGUSR2, handoff.go) and drained. In order: it raises its soft limit on open files to the hard
// one, refuses state files of a newer format (changing nothing), locks the state folder (one
// supervisor per folder; a process taking over holds the lock it was handed), removes what
// interrupted writes left in the door's folder, binds its listeners or
// takes those it was handed (so a port in use stops it before it creates a token), prepares the
// supervisor, writes supervisor.addr, says where it listens and, once its doors accept, that it
// is ready (serve.pid; the process it took over from then drains). On a clean exit that is not a
// handoff it removes supervisor.addr and serve.pid, if they still name it.
func serve(ctx context.Context, o serveOptions, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fleet serve: "+format+"\n", a...)
		return 1
	}
	// SPEC R6c: the direct-reach door holds at most half of the soft limit in connections (it
	// reads the limit when it opens), so the other half keeps the loopback door and the registry
	// API serving; the higher the soft limit, the more devices' connections fit in that half.
	soft, hard, limitErr := fdlimit.Raise()
	fleetDir := state.FleetDir(o.home)
	if err := state.EnsureHome(o.home); err != nil {
		return fail("%v", err)
	}
	if err := state.EnsureDir(fleetDir); err != nil {
		return fail("%v", err)
	}
	// SPEC O5: a state file of a newer format stops the start before anything is written.
	if err := checkStateFormats(o.home); err != nil {
		return fail("%v", err)
	}
	lock, err := o.sockets.lock(fleetDir) // handed over, or taken (handoff.go)
	var locked *state.LockedError
	if errors.As(err, &locked) {
		return fail("another fleet serve is already running for %s (%s); stop it first, or give this one another --state-dir", o.home, locked.Holder)
	}
	if err != nil {
		return fail("%v", err)
	}
	defer lock.Release()
	// A crash or a kill in the middle of an atomic write leaves its temporary file behind
	// (.devices.json.tmp-…); the file it was to replace is the old one, whole. Only one minute
	// old or older: a CLI command beside this start may be writing one now.
	leftovers, leftoversErr := state.RemoveWriteLeftovers(pairingFolder(o.home), time.Now().Add(-time.Minute))

	// Every pairing password check runs scrypt in a helper process (this binary again): its
	// 128 MiB never lands on the supervisor's heap, so a flood of wrong passwords does not make
	// the garbage collector slow everyone else's requests.
	if exe, err := os.Executable(); err == nil {
		pairing.UseKeyFunc(pairing.HelperProcessKeyFunc(exe, scryptHelperArg))
		defer pairing.UseKeyFunc(nil)
	}

	defer o.sockets.stop() // after the listeners' Close: a unix socket fleet made is removed
	unixLn, err := o.sockets.unix(o.unixSocket)
	if err != nil {
		return fail("--socket: %v", err)
	}
	if unixLn != nil {
		defer unixLn.Close()
		o.unixSocket = unixLn.Addr().String() // systemd's, when it handed one without --socket
	}
	ln, err := o.sockets.tcp(o.port)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fail("%s", portInUse(o.port, err))
		}
		return fail("%v", err)
	}
	defer ln.Close()
	addr := ln.Addr().String()

	// On a terminal the start-up line is a person's, and it comes first (O8): the JSON lines
	// written before it (the access mode, a removed leftover, the direct-reach door opening)
	// wait, and follow it.
	var logOut io.Writer = stderr
	var held *heldLines
	if startupIsText(o, stderr) {
		held = &heldLines{w: stderr}
		defer held.release(nil) // a start that fails before the line: the error first, then them
		logOut = held
	}
	log := slog.New(slog.NewJSONHandler(logOut, nil))
	// net/http's Transport (and the HTTP/2 code bundled in net/http) writes some errors through
	// the standard log package ("Unsolicited response received on idle HTTP channel …"). While
	// serve runs they go where the servers' own errors go (Server.ErrorLog, proxy.NewServer):
	// one JSON line, fleet.http-error, at warning level (S9, S11), never a raw line on stderr.
	defer redirectStdLog(proxy.WarnLogger(log, "fleet.http-error"))()
	if limitErr != nil {
		log.Warn("fleet.file-limit", "soft", soft, "hard", hard, "error", limitErr.Error(),
			"why", "the soft limit on open files could not be raised to the hard one; the direct-reach door holds at most half of it")
	}
	for _, p := range leftovers {
		log.Info("fleet.write-leftover-removed", "path", p)
	}
	if leftoversErr != nil {
		log.Warn("fleet.write-leftover-removed", "error", leftoversErr.Error())
	}
	cfg := supervisor.Config{
		StateHome:       o.home,
		TailscaleSocket: o.tailscaleSocket,
		TailscaledUID:   o.tailscaledUID,
		Logger:          log,
	}
	if o.sockets != nil && o.sockets.upg != nil {
		cfg.ReachListen = o.sockets.reachListen
	}
	srv, err := supervisor.New(cfg)
	if err != nil {
		return fail("%v", err)
	}
	defer srv.Close()
	addrFile := filepath.Join(fleetDir, state.AddrFile)
	if err := srv.PublishAddr(addr); err != nil {
		return fail("%v", err)
	}
	handedOver := false
	defer func() {
		if !handedOver { // the new process serves the same address
			removeAddrFile(addrFile, addr)
			removePIDFile(filepath.Join(fleetDir, PIDFile))
		}
	}()
	if err := lock.SetHolder(state.Holder{PID: os.Getpid(), Addr: addr}); err != nil {
		return fail("%v", err)
	}

	// SIGHUP reloads the machine profile at once (SPEC R1): the direct-reach door opens, moves
	// or closes; the loopback door is not touched.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				srv.ReloadReach()
			}
		}
	}()

	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	unixDone := make(chan struct{}) // closed once the --socket listener is closed (and unlinked)
	if unixLn != nil {
		go func() {
			defer close(unixDone)
			if err := srv.ServeUnixListener(unixLn); !errors.Is(err, http.ErrServerClosed) {
				served <- fmt.Errorf("--socket: %w", err)
			}
		}()
	} else {
		close(unixDone)
	}
	sock := o.tailscaleSocket
	if sock == "" {
		sock = paths.DefaultTailscaledSocket()
	}
	if o.sockets.handingOver() {
		// The direct-reach door serves on the socket it was handed before this process says it
		// is ready (the old one stops accepting then).
		srv.OpenReachNow()
	}
	facts := askTailscaled(ctx, sock)
	if held != nil {
		held.release(func() { startupLine(stderr, log, o, addr, facts) })
	} else {
		startupLine(stderr, log, o, addr, facts)
	}
	if o.sockets != nil {
		watched := []net.Addr{ln.Addr()}
		if unixLn != nil {
			watched = append(watched, unixLn.Addr())
		}
		srv.WatchDoors(watched...)
	}
	if err := o.sockets.ready(log); err != nil {
		return fail("%v", err)
	}
	// SIGUSR2 hands every listening socket to the binary on disk (handoff.go, SPEC O3).
	usr2 := make(chan os.Signal, 1)
	if o.sockets != nil && o.sockets.upg != nil {
		signal.Notify(usr2, syscall.SIGUSR2)
		defer signal.Stop(usr2)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr2:
				log.Info("fleet.handoff-start", "why", "SIGUSR2: starting the binary on disk with the same flags")
				if err := o.sockets.handOff(srv.ReachSocket()); err != nil {
					log.Error("fleet.handoff-failed", "error", err.Error(), "why", "this process serves on")
				}
			}
		}
	}()
	if o.server != nil {
		o.server(srv)
	}
	if o.ready != nil {
		o.ready(addr)
	}

	status := 0
	select {
	case <-ctx.Done():
	case <-o.sockets.exit():
		handedOver = true
		log.Info("fleet.handoff-ready", "why", "the new process serves; this one stops accepting and finishes what is in flight", "drain_max", supervisor.DrainTimeout.String())
		if err := srv.Drain(context.Background()); err != nil {
			log.Warn("fleet.drain", "error", err.Error())
		}
	case err := <-served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr, "fleet serve: %v\n", err)
			status = 1
		}
	}
	srv.Close()
	select {
	case <-unixDone:
	case <-time.After(3 * time.Second):
	}
	log.Info("fleet.stopped", "addr", addr)
	return status
}

// redirectStdLog points the log package's standard logger at to (its output only: no flags, no
// prefix, so each line reaches to as it was written) and returns what puts it back.
func redirectStdLog(to *stdlog.Logger) (restore func()) {
	out, flags, prefix := stdlog.Writer(), stdlog.Flags(), stdlog.Prefix()
	stdlog.SetOutput(to.Writer())
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	return func() {
		stdlog.SetOutput(out)
		stdlog.SetFlags(flags)
		stdlog.SetPrefix(prefix)
	}
}

// removePIDFile removes serve.pid when it names this process: a supervisor that stopped leaves no
// PID behind, and never removes its successor's.
func removePIDFile(path string) {
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(path)
	}
}

// removeAddrFile removes supervisor.addr when it still names addr: a supervisor that stopped
// leaves no address behind for the CLI to follow, and never removes another one's.
func removeAddrFile(path, addr string) {
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == addr {
		os.Remove(path)
	}
}

// portInUse explains a failed listen on 127.0.0.1:port: which flag picks another port, and whether
// the port is held by another fleet serve (of another state folder: ours is locked by us).
func portInUse(port int, err error) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Sprintf("listen on 127.0.0.1:%d: %v (--port picks another port)", port, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	who := "another program"
	if answersAsFleet(addr) {
		who = "another fleet serve (of another state folder; 'fleet consoles --state-dir DIR' reaches it)"
	}
	return fmt.Sprintf("127.0.0.1:%d is already in use by %s; stop it, or pass another --port N (then publish that port: tailscale serve --bg http://127.0.0.1:N)", port, who)
}

// answersAsFleet reports whether the server at addr answers the fleet API's way: 401 with
// WWW-Authenticate: Bearer realm="fleet" to a request without the bearer (none is sent).
func answersAsFleet(addr string) bool {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get("http://" + addr + "/fleet/v1/consoles")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusUnauthorized && strings.Contains(resp.Header.Get("WWW-Authenticate"), `realm="fleet"`)
}

// serveStatusAPI is how serve asks tailscaled for its status; a test replaces it.
var serveStatusAPI = func(socket string) interface {
	StatusWithoutPeers(context.Context) (*ipnstate.Status, error)
} {
	return socketStatus{&local.Client{Socket: socket, UseSocketOnly: true}}
}

// errNoSocket says that tailscaled's LocalAPI socket does not exist.
var errNoSocket = errors.New("no socket")

// socketStatus asks the LocalAPI only when its socket exists: the client would retry a missing
// one until the timeout, and start-up would wait for nothing.
type socketStatus struct{ c *local.Client }

func (s socketStatus) StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error) {
	if _, err := os.Stat(s.c.Socket); err != nil {
		return nil, errNoSocket
	}
	return s.c.StatusWithoutPeers(ctx)
}

// tailscaledFacts is what the start-up line says about tailscaled.
type tailscaledFacts struct {
	state  string // "running", "stopped" (answers, not Running) or "unreachable"
	detail string // "sup.tail-scale.ts.net", "NeedsLogin", "no socket at /var/run/…"
	next   string // what to do next
}

// askTailscaled asks tailscaled's LocalAPI for its status once, briefly: start-up must not hang on
// a tailscaled that does not answer.
func askTailscaled(ctx context.Context, socket string) tailscaledFacts {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := serveStatusAPI(socket).StatusWithoutPeers(ctx)
	switch {
	case err != nil:
		detail := "no answer on " + socket
		if errors.Is(err, errNoSocket) {
			detail = "no socket at " + socket
		}
		return tailscaledFacts{state: "unreachable", detail: detail,
			next: "start tailscaled (or pass --tailscale-socket); until then every /c/ request is 401 unverified, and local callers open a console at its own address ('fleet consoles')"}
	case st.BackendState != "Running":
		return tailscaledFacts{state: "stopped", detail: st.BackendState,
			next: "run 'tailscale up'; until then every /c/ request is 401 unverified"}
	default:
		name := ""
		if st.Self != nil {
			name = strings.TrimSuffix(st.Self.DNSName, ".")
		}
		return tailscaledFacts{state: "running", detail: name, next: "publish it with 'tailscale serve --bg %s', then run 'fleet doctor'"}
	}
}

// startupLine says where fleet listens, what tailscaled said, and what to do next: one line for a
// person on a terminal, one JSON log line otherwise.
func startupLine(stderr io.Writer, log *slog.Logger, o serveOptions, addr string, ts tailscaledFacts) {
	target := "http://" + addr // what Tailscale Serve should publish: the unix socket when there is one
	if o.unixSocket != "" {
		if abs, err := filepath.Abs(o.unixSocket); err == nil {
			target = "unix:" + abs
		}
	}
	next := strings.ReplaceAll(ts.next, "%s", target)
	if !startupIsText(o, stderr) {
		log.Info("fleet.listening", "addr", addr, "state", o.home, "tailscaled", ts.state, "tailscaled_detail", ts.detail, "next", next)
		return
	}
	var tsWords string
	switch ts.state {
	case "running":
		tsWords = "tailscaled is running (" + ts.detail + ")"
	case "stopped":
		tsWords = "tailscaled answers but is " + ts.detail
	default:
		tsWords = "tailscaled not found (" + ts.detail + ")"
	}
	where := "http://" + addr
	if o.unixSocket != "" {
		where += " and unix:" + o.unixSocket
	}
	fmt.Fprintf(stderr, "fleet serve: listening on %s (state %s); %s; next: %s\n", where, o.home, tsWords, next)
}

// startupIsText reports whether the start-up line is one line for a person: --log-format text,
// or auto on a terminal.
func startupIsText(o serveOptions, stderr io.Writer) bool {
	return o.logFormat == "text" || (o.logFormat == "auto" && isTerminal(stderr))
}

// heldLinesMax bounds the lines held before the start-up line; past it they pass through.
const heldLinesMax = 1000

// heldLines holds the log's lines (slog writes each in one Write) until release, then writes
// them and lets every later one through: what serve writes before its start-up line for a
// person comes after it.
type heldLines struct {
	mu   sync.Mutex
	w    io.Writer
	held [][]byte
	open bool
}

func (h *heldLines) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open || len(h.held) >= heldLinesMax {
		return h.w.Write(p)
	}
	h.held = append(h.held, bytes.Clone(p))
	return len(p), nil
}

// release runs first (when not nil: it writes the start-up line) while no line can be written,
// then writes the held lines. Later calls do nothing.
func (h *heldLines) release(first func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open {
		return
	}
	if first != nil {
		first()
	}
	for _, l := range h.held {
		h.w.Write(l)
	}
	h.held, h.open = nil, true
}

// flagNamed reports whether args (before a "--") hold the flag name in any spelling: one or two
// dashes, any case, '_' for '-', with or without "=value".
func flagNamed(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		n := strings.TrimLeft(a, "-")
		n, _, _ = strings.Cut(n, "=")
		n = strings.ToLower(strings.ReplaceAll(n, "_", "-"))
		if n == name {
			return true
		}
	}
	return false
}
