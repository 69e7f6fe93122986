package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"tailscale.com/paths"

	"github.com/phase-console/fleet/console"
	"github.com/phase-console/fleet/console/refconsole"
	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/state"
)

const consoleSummary = "Run the reference console on 127.0.0.1: whoami, presence, runs, the permission hook, reach settings, SSE, WebSocket (the C rules of docs/contract.md)."

func init() {
	addCommand(&command{name: "console", summary: consoleSummary, run: runConsole})
}

// consoleOptions are the parsed flags of `fleet console`.
type consoleOptions struct {
	id, name, supervisor string
	port                 int
	home                 string
	tailscaleSocket      string
	trustTailscaledUser  bool
}

func runConsole(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("console", consoleSummary+"\nIt registers with the supervisor at start-up and deregisters on exit (SIGINT, SIGTERM).\nLocal callers are scope local with login \"\".", stdout, stderr)
	id := fs.String("id", "", "the console `ID`, [a-z0-9][a-z0-9-]{0,62} (required)")
	port := portFlag(fs, "port", 0, 0, "TCP port on 127.0.0.1 (0: any free port)")
	name := fs.String("name", "", "a display `NAME` (default: the id)")
	stateDir := fs.String("state-dir", "", "the state folder `DIR` (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	sup := fs.String("supervisor", "", "the supervisor's address `ADDR`, a loopback literal like 127.0.0.1:7420 (default: from <stateHome>/fleet/supervisor.addr)")
	tsSocket := fs.String("tailscale-socket", paths.DefaultTailscaledSocket(), "tailscaled's LocalAPI socket `PATH`: a console running as its owner believes nobody local")
	trustTS := fs.Bool("trust-tailscaled-user", false, "believe local callers even when running as tailscaled's user (only with tailscaled on a kernel TUN)")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	if !contract.ValidConsoleID(*id) {
		fmt.Fprintf(stderr, "fleet console: --id %q: want [a-z0-9][a-z0-9-]{0,62}, e.g. --id alpha\n", *id)
		return 2
	}
	if *sup != "" {
		if err := refconsole.CheckSupervisorAddr(*sup); err != nil {
			fmt.Fprintf(stderr, "fleet console: --supervisor: %v; the fleet token is only ever sent to loopback\n", err)
			return 2
		}
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet console: %v\n", err)
		return 1
	}
	// Without a usable token the console could believe nobody and register nowhere: say so once
	// and stop, rather than run and log the same error every second.
	if _, err := readToken(*stateDir, home); err != nil {
		fmt.Fprintf(stderr, "fleet console: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveConsole(ctx, consoleOptions{id: *id, name: *name, supervisor: *sup, port: *port, home: home,
		tailscaleSocket: *tsSocket, trustTailscaledUser: *trustTS}, stdout, stderr)
}

// serveConsole runs the reference console until ctx is done, then deregisters and shuts down.
// Its first line on stdout names the address it listens on.
func serveConsole(ctx context.Context, o consoleOptions, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	v, err := console.New(console.Config{StateDir: o.home, Logger: log,
		TailscaleSocket: o.tailscaleSocket, TrustTailscaledUser: o.trustTailscaledUser})
	if err != nil {
		fmt.Fprintf(stderr, "fleet console: %v\n", err)
		return 1
	}
	defer v.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.port)))
	if err != nil {
		fmt.Fprintf(stderr, "fleet console: listen on 127.0.0.1:%d: %v (pick another --port, or 0 for any)\n", o.port, err)
		return 1
	}
	addr := ln.Addr().String()
	name := o.name
	if name == "" {
		name = o.id
	}

	// Request contexts derive from base, so SSE streams and WebSockets end when the console does.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := &http.Server{
		Handler:           refconsole.New(refconsole.Config{ID: o.id, Name: name, Verifier: v, Logger: log}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext:       v.ConnContext, // who is "local" is judged once per connection
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "fleet console %s listening on http://%s/\n", o.id, addr)
	log.Info("console.listening", "console", o.id, "addr", addr)

	regCtx, stopReg := context.WithCancel(ctx)
	reg := &refconsole.Registrar{
		ID: o.id, Name: name, Addr: addr,
		Supervisor: o.supervisor, FleetDir: state.FleetDir(o.home),
		Token: v.Bearer, Logger: log,
	}
	registered := make(chan struct{})
	go func() { reg.Run(regCtx); close(registered) }()

	status := 0
	select {
	case <-ctx.Done():
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr, "fleet console: %v\n", err)
			status = 1
		}
	}
	stopReg()
	<-registered // deregistered
	cancelBase()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	log.Info("console.stopped", "console", o.id)
	return status
}
