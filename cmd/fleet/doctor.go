package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/phase-console/fleet/doctor"
	"github.com/phase-console/fleet/internal/state"
	"tailscale.com/client/local"
	"tailscale.com/paths"
)

const doctorSummary = "Check this machine's set-up (tailscaled and its version, Serve and the certificate its HTTPS address presents, Tailscale SSH, raw TCP forwards, tailscaled's outbound proxies, Funnel, state files, who may open which console, the supervisor, the unix socket's place); one OK/WARN/FAIL line each."

func init() {
	addCommand(&command{name: "doctor", summary: doctorSummary, run: runDoctor})
}

// doctorLocalAPI lets a test run the command against a fake tailscaled; nil means the real one
// on --tailscale-socket.
var doctorLocalAPI doctor.LocalAPI

// doctorRootCAs lets a test verify Serve's certificates against its own CA; nil means the
// system's roots.
var doctorRootCAs *x509.CertPool

// doctorTailscaledArgs lets a test give fleet doctor tailscaled's command line; nil means the
// command line of the process listening on --tailscale-socket.
var doctorTailscaledArgs func(ctx context.Context) ([]string, error)

func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("doctor", doctorSummary+"\nExit status: 1 when any check FAILs, 0 otherwise.", stdout, stderr)
	stateDir := fs.String("state-dir", "", "state folder (default $PHASE_CONSOLE_STATE_HOME, $XDG_STATE_HOME/phase-console or ~/.local/state/phase-console)")
	tsSocket := fs.String("tailscale-socket", "", "tailscaled's LocalAPI socket (default: tailscaled's usual socket)")
	port := portFlag(fs, "port", 0, 1, "the supervisor's port on 127.0.0.1 (default: the one in supervisor.addr, else 7420)")
	unixSocket := fs.String("socket", "", "the unix socket that 'fleet serve --socket' listens on (the unix-socket door, e.g. "+doctor.DefaultSocketPath()+"), if the set-up uses one")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	home, err := state.Home(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet doctor: %v\n", err)
		return 2
	}
	sock := *unixSocket
	if sock != "" {
		if sock, err = filepath.Abs(sock); err != nil {
			fmt.Fprintf(stderr, "fleet doctor: --socket: %v\n", err)
			return 2
		}
	}
	if *tsSocket == "" {
		*tsSocket = paths.DefaultTailscaledSocket()
	}
	api := doctorLocalAPI
	if api == nil {
		api = &local.Client{Socket: *tsSocket, UseSocketOnly: true}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	checks := doctor.Run(ctx, doctor.Config{
		StateHome:       home,
		LocalAPI:        api,
		TailscaleSocket: *tsSocket, // also where the doctor finds tailscaled's command line
		TailscaledArgs:  doctorTailscaledArgs,
		Port:            *port,
		Socket:          sock,
		RootCAs:         doctorRootCAs,
	})
	for _, c := range checks {
		fmt.Fprintln(stdout, c.String())
	}
	if doctor.Failed(checks) {
		return 1
	}
	return 0
}
