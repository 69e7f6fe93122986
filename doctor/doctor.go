// Package doctor checks that a machine's fleet set-up is sound and says how to fix what is not.
// `fleet doctor` prints its checks, one line each:
//
//	OK   tailscaled: reachable, version 1.102.5, sup.tailnet.ts.net
//	OK   tailscaled version: 1.102.5
//	WARN tailscaled mode: userspace networking (TUN:false): … — fix: …
//	FAIL tailscale serve: nothing proxies to http://127.0.0.1:7420 — fix: tailscale serve --bg http://127.0.0.1:7420
//
// It tells the truth [O6]: a check it cannot make — a LocalAPI that cannot be asked, an answer
// it cannot read — is WARN with what would settle it, never OK.
//
// What it checks (the contract's rule IDs, docs/contract.md, in brackets):
//   - tailscaled answers on its LocalAPI and is Running; its version, on a line of its own (1.94+
//     for a unix socket);
//   - the tailscaled mode: a kernel TUN is OK; userspace networking is WARN, because then a
//     tailnet peer can reach 127.0.0.1 ports straight through netstack and the supervisor must
//     ask WhoIs about every connection to tell [S5b];
//   - the Serve config points at this supervisor — unix:<socket> or http://127.0.0.1:<port> — at
//     the root, in the background [S2]; and each HTTPS address it publishes is OK only once a TLS
//     handshake to it, through tailscaled's own dial (the LocalAPI's /localapi/v0/dial) as a peer
//     connects, presents a certificate valid for the name under the system's roots — else FAIL,
//     whose fix is HTTPS certificates for the tailnet and `tailscale cert <name>` [O6];
//   - nothing lets a tailnet peer write the bytes that reach fleet [S5e]: no raw TCP forward
//     (serve --tcp, --tls-terminated-tcp) reaches fleet's port or its socket, and Serve does not
//     publish the TCP door while Tailscale SSH is on (an SSH login can forward to 127.0.0.1 too);
//     fleet refuses such requests (401 tcp-forwardable), and the fix is the unix-socket door;
//   - tailscaled's command line turns on no outbound proxy (--socks5-server,
//     --outbound-http-proxy-listen), which dials 127.0.0.1 as tailscaled for whoever reaches it
//     [S5e]: while one is on, or the command line cannot be read, fleet refuses every /c/
//     request on its TCP door (401 tcp-forwardable) — a FAIL while Serve publishes that door, a
//     WARN while it publishes only the unix-socket door;
//   - Funnel is off for the names that publish fleet;
//   - the state folder and its files are private [F1], the tokens are well-formed, and
//     metrics.token is not the fleet token [G4];
//   - supervisor.addr is there, names a loopback address, and the supervisor there answers the
//     fleet API with this folder's token (and so does the unix socket, when one is given);
//   - who may open which console [G1]: the profile's access: section (a refused one is a FAIL:
//     fleet treats it as grants), and a WARN when this machine's owner — as WhoIs of this
//     node's own address names them — would open no console, or (WARN) that it cannot know;
//   - the unix socket sits where no SSH forward of another account can reach it [S5e]: not below
//     /tmp, not below a folder that others can write, not in another local account's home
//     folder or runtime folder (/run/user/<uid>).

// It only reads: it changes no file, no mode and no Serve config. It never prints the token, and
// it sends the bearer only to a loopback literal address or the given unix socket, never through
// an environment proxy. Its TLS handshakes send nothing but a ClientHello, and are closed once
// the certificate is judged.
package doctor

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
	"tailscale.com/client/local"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
)

// LocalAPI is the part of tailscaled's LocalAPI that the doctor reads. *local.Client satisfies it.
type LocalAPI interface {
	StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error)
	GetServeConfig(ctx context.Context) (*ipn.ServeConfig, error)
	// GetPrefs tells whether tailscaled runs Tailscale SSH (Prefs.RunSSH), which can forward
	// to fleet's TCP door (SPEC S5e).
	GetPrefs(ctx context.Context) (*ipn.Prefs, error)
}

// unixServeMinVersion is the first tailscaled that can serve to a unix socket.
var unixServeMinVersion = [2]int{1, 94}

// Config is what Run checks.
type Config struct {
	StateHome       string   // <stateHome>
	LocalAPI        LocalAPI // tailscaled's LocalAPI
	TailscaleSocket string   // where LocalAPI talks to: for messages, and to find tailscaled by

	// TailscaledArgs returns tailscaled's command line, for the outbound proxies that no
	// LocalAPI call shows (SPEC S5e). Nil: read from /proc for the process that listens on
	// LocalAPI's socket (a *local.Client's Socket, else TailscaleSocket), as fleet serve reads
	// it; with neither, the "tailscaled proxy" check says it could not tell.
	TailscaledArgs func(ctx context.Context) ([]string, error)

	// Port is the supervisor's TCP port. Zero: the port in supervisor.addr, else contract.DefaultPort.
	Port int
	// Socket is the unix socket of `fleet serve --socket`, if the set-up uses one.
	Socket string

	// RootCAs verifies the certificates that Serve presents on its HTTPS addresses (O6). Nil:
	// the system's roots, as a browser on a peer trusts them.
	RootCAs *x509.CertPool

	// HTTPClient probes the supervisor. Nil: a client with a short timeout and no proxy.
	HTTPClient *http.Client
	// Timeout bounds each LocalAPI call and probe. Zero: 5 s.
	Timeout time.Duration
}

// Status is the outcome of one check.
type Status int

const (
	OK Status = iota
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case Warn:
		return "WARN"
	default:
		return "FAIL"
	}
}

// A Check is one line of the doctor's report.
type Check struct {
	Status Status
	Name   string // what was checked: "tailscaled", "tailscale serve", "fleet.token", …
	What   string // what was found
	Fix    string // for Warn and Fail: the command or step that fixes it
}

// String is the check's line: "FAIL name: what — fix: fix".
func (c Check) String() string {
	s := fmt.Sprintf("%-4s %s: %s", c.Status, c.Name, c.What)
	if c.Status != OK && c.Fix != "" {
		s += " — fix: " + c.Fix
	}
	return s
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Run runs every check and returns them in order. It never fails as a whole: what cannot be
// checked is itself a check.
func Run(ctx context.Context, cfg Config) []Check {
	return runWith(ctx, cfg, realPlace())
}

// runWith is Run with the facts that judge the unix socket's place (tests give fakes).
func runWith(ctx context.Context, cfg Config, place placeFacts) []Check {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.HTTPClient == nil {
		// No environment proxy, and only a supervisor run by this same user (never a squatter
		// on its port) gets the bearer.
		cfg.HTTPClient = peercred.OwnClient(cfg.Timeout, false)
	}
	if cfg.TailscaledArgs == nil {
		sock := cfg.TailscaleSocket
		if lc, ok := cfg.LocalAPI.(*local.Client); ok && lc.Socket != "" {
			sock = lc.Socket
		}
		if sock != "" {
			cfg.TailscaledArgs = func(ctx context.Context) ([]string, error) { return peercred.SocketServerArgs(ctx, sock) }
		}
	}
	r := &run{cfg: cfg}
	port, portSource := r.port()
	r.checkTailscale(ctx, port)
	r.checkState()
	r.checkAccess(ctx)
	r.checkSupervisor(ctx, port, portSource)
	if cfg.Socket != "" {
		r.checkSocket(ctx)
		r.checkSocketPlace(place)
	}
	return r.checks
}

type run struct {
	cfg    Config
	checks []Check
	token  string   // the fleet token, when it could be read; never printed
	ssh    sshState // whether tailscaled runs Tailscale SSH, from its prefs
	proxy  tsProxy  // whether tailscaled runs an outbound proxy, from its command line
}

func (r *run) add(s Status, name, what, fix string) {
	r.checks = append(r.checks, Check{Status: s, Name: name, What: what, Fix: fix})
}

func (r *run) fleetFile(name string) string {
	return filepath.Join(state.FleetDir(r.cfg.StateHome), name)
}

// port is the supervisor's port: the flag, else supervisor.addr's, else the default.
func (r *run) port() (int, string) {
	if r.cfg.Port > 0 {
		return r.cfg.Port, "--port"
	}
	if ap, err := readAddr(r.fleetFile(state.AddrFile)); err == nil {
		return int(ap.Port()), "supervisor.addr"
	}
	return contract.DefaultPort, "default"
}

func readAddr(path string) (netip.AddrPort, error) {
	b, err := state.ReadPrivateFile(path)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.ParseAddrPort(strings.TrimSpace(string(b)))
}
