package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/supervisor"
)

const serveSummary = "Run the supervisor: the loopback door on 127.0.0.1 for Tailscale Serve to publish."

func init() {
	addCommand(&command{name: "serve", summary: serveSummary, run: runServe})
}

func runServe(args []string, stdout, stderr io.Writer) int {
	if flagNamed(args, "host") {
		fmt.Fprintln(stderr, "fleet serve: --host is refused (SPEC S1): the supervisor listens on 127.0.0.1 only; publish it with 'tailscale serve --bg http://127.0.0.1:7420'")
		return 2
	}
	fs := newFlags("serve", serveSummary, stdout, stderr)
	port := fs.Int("port", supervisor.DefaultPort, "TCP port on 127.0.0.1")
	stateDir := fs.String("state-dir", "", "state folder (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	socket := fs.String("tailscale-socket", "", "tailscaled's LocalAPI socket (default: tailscaled's usual socket)")
	uid := fs.Int("tailscaled-uid", -1, "uid that runs tailscaled; -1: the owner of its LocalAPI socket")
	unixSocket := fs.String("socket", "", "also listen on this unix socket (0600, folder 0700) for 'tailscale serve unix:PATH' (tailscaled 1.94+): the hardened set-up, see docs/operating.md")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	if *port < 1 || *port > 65535 {
		fmt.Fprintf(stderr, "fleet serve: --port %d: want 1-65535\n", *port)
		return 2
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet serve: %v\n", err)
		return 1
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	srv, err := supervisor.New(supervisor.Config{
		StateHome:       home,
		TailscaleSocket: *socket,
		TailscaledUID:   *uid,
		Logger:          log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "fleet serve: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	unixFailed := make(chan error, 1) // --socket: nil once its listener is closed (and unlinked)
	if *unixSocket != "" {
		ln, err := supervisor.ListenUnix(*unixSocket)
		if err != nil {
			fmt.Fprintf(stderr, "fleet serve: --socket: %v\n", err)
			return 1
		}
		go func() {
			err := srv.ServeUnixListener(ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			unixFailed <- err
			stop()
		}()
	} else {
		unixFailed <- nil
	}
	if err := srv.ListenAndServe(ctx, *port); err != nil {
		srv.Close()
		fmt.Fprintf(stderr, "fleet serve: %v\n", err)
		return 1
	}
	select {
	case err := <-unixFailed:
		if err != nil {
			fmt.Fprintf(stderr, "fleet serve: --socket: %v\n", err)
			return 1
		}
	case <-time.After(3 * time.Second):
	}
	return 0
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
