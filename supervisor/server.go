package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/paths"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/accesslog"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/pairing"
	"github.com/phase-console/fleet/proxy"
	"github.com/phase-console/fleet/proxy/fastloop"
	"github.com/phase-console/fleet/reach"
	"github.com/phase-console/fleet/tailnet"
)

// Timeouts and limits of the loopback door (SPEC S9): those of every door, package proxy's
// (proxy.NewServer), named here too.
const (
	ReadHeaderTimeout = proxy.ReadHeaderTimeout
	IdleTimeout       = proxy.IdleTimeout
	MaxHeaderBytes    = proxy.MaxHeaderBytes
	probeInterval     = 5 * time.Second
	probeTimeout      = time.Second
)

// Config is what a Server needs. The zero value of every field but StateHome has a useful default.
type Config struct {
	StateHome string // <stateHome>; the supervisor's files are in <stateHome>/fleet

	// LocalAPI is tailscaled's LocalAPI. Nil: a local.Client on TailscaleSocket.
	LocalAPI        tailnet.LocalAPI
	TailscaleSocket string // default: tailscaled's usual socket for this OS

	// TailscaledUID is the uid that owns tailscaled's backend connections (SPEC S5a). Negative:
	// the owner of TailscaleSocket, looked up when first needed.
	TailscaledUID int
	// TailscaledArgs returns tailscaled's command line, for the outbound proxies that no LocalAPI
	// call shows (SPEC S5e, package tailnet). Nil: read from /proc for the process that listens on
	// LocalAPI's socket (a *local.Client's Socket, else TailscaleSocket).
	TailscaledArgs func(ctx context.Context) ([]string, error)

	Logger *slog.Logger     // default: JSON on stderr
	Now    func() time.Time // default: time.Now

	// BodyIdleTimeout cuts off a request body that sends nothing for this long (S9). Zero:
	// proxy.BodyIdleTimeout (60 s).
	BodyIdleTimeout time.Duration
	// AfterFunc starts the hop's timers; nil: time.AfterFunc. Tests pass a fake clock.
	AfterFunc proxy.AfterFunc

	// ReachPairing builds the direct-reach door's pairing pages each time the door opens
	// (reach.Config.PairingFor), given the open door (its Fingerprint and RootPEM for the page,
	// its Failure for a wrong code or password, SPEC R6) and the device register. Nil: package
	// pairing's pages.
	ReachPairing func(door *reach.Door, register *pairing.Register) http.Handler

	// ReachListen, if not nil, gives the direct-reach door its listening socket (reach.Config.Listen):
	// the one a process that served the door before handed over (SPEC O3), or a new one.
	ReachListen func(network, addr string) (net.Listener, error)
}

// A Server is the loopback door. It is an http.Handler; Serve runs it on a listener with the
// door's timeouts.
type Server struct {
	cfg       Config
	log       *slog.Logger
	fleetDir  string
	token     *state.Token
	registry  *Registry
	tailnet   *tailnet.Verifier // who is calling (S5) and Host admission (S10)
	hop       *proxy.Hop
	door      *proxy.Door // the judgement of every request (door.go)
	stop      chan struct{}
	httpSrv   *http.Server
	conns     *fastloop.ConnServer // serves httpSrv's connections: the fast loop, then net/http
	unixMu    sync.Mutex
	unixConns []*fastloop.ConnServer // the unix door's (ServeUnixListener), for Drain
	reach     reachState             // the direct-reach door (reach.go)
	access    accessState            // the profile's access: section (access.go)
	recent    *RecentActivity        // the index's recent activity (recent.go)
	audit     audit.Recorders        // what both doors tell of each request (audit.go)
	accessLog *accesslog.Log         // <stateHome>/fleet/access.log (G3)
	bgOnce    sync.Once              // starts the token watch, the probes and the reach door, once
	closeOnce sync.Once

	metrics metricsState // G4: the counts, metrics.token and /fleet/v1/metrics (metrics.go)

	ownerTokens *ownerTokens // U4: the owner's per-page tokens (owner.go)
}

// New prepares the supervisor's folder (F1: created 0700; refused when too open), its tokens
// (fleet.token and metrics.token, created on first start) and its registry. It listens on
// nothing yet.
func New(cfg Config) (*Server, error) {
	if cfg.StateHome == "" {
		return nil, errors.New("supervisor: no state folder")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TailscaleSocket == "" {
		cfg.TailscaleSocket = paths.DefaultTailscaledSocket()
	}
	if cfg.LocalAPI == nil {
		cfg.LocalAPI = &local.Client{Socket: cfg.TailscaleSocket, UseSocketOnly: true}
	}
	if cfg.TailscaledArgs == nil {
		sock := cfg.TailscaleSocket
		if lc, ok := cfg.LocalAPI.(*local.Client); ok && lc.Socket != "" {
			sock = lc.Socket
		}
		cfg.TailscaledArgs = func(ctx context.Context) ([]string, error) { return peercred.SocketServerArgs(ctx, sock) }
	}
	fleetDir := state.FleetDir(cfg.StateHome)
	if err := state.EnsureHome(cfg.StateHome); err != nil {
		return nil, err
	}
	if _, err := state.LoadOrCreateToken(fleetDir); err != nil {
		return nil, err
	}
	reg, err := LoadRegistry(filepath.Join(fleetDir, state.RegistryFile), cfg.Now)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		fleetDir: fleetDir,
		token:    state.NewTokenFollower(filepath.Join(fleetDir, state.TokenFile), cfg.Now),
		registry: reg,
		stop:     make(chan struct{}),
		recent:   NewRecentActivity(),
	}
	if s.ownerTokens, err = newOwnerTokens(); err != nil {
		return nil, err
	}
	if s.metrics, err = s.newMetrics(); err != nil {
		return nil, err
	}
	if _, err := s.token.Current(); err != nil {
		return nil, err
	}
	s.tailnet, err = tailnet.New(tailnet.Config{
		LocalAPI:       cfg.LocalAPI,
		TailscaledUID:  s.tailscaledUID,
		TailscaledArgs: cfg.TailscaledArgs,
		LocalAPIHint:   fmt.Sprintf("is tailscaled running? Check with 'tailscale status' (socket %s, --tailscale-socket)", cfg.TailscaleSocket),
		Now:            cfg.Now,
		Access:         access.ModeGrants, // until the profile is read, just below
		Log:            cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	s.access.settings = access.Refused
	s.reloadAccess() // G1: in force before the first request is judged
	// The hop dials only consoles run by this same user (the fleet token rides on every hop).
	s.hop = proxy.NewHop(cfg.Logger, proxy.MarkDownFunc(reg.markDown), proxy.DialConsole)
	if cfg.BodyIdleTimeout > 0 {
		s.hop.BodyIdleTimeout = cfg.BodyIdleTimeout
	}
	s.hop.AfterFunc = cfg.AfterFunc
	if err := s.openAudit(); err != nil {
		return nil, err
	}
	s.door = s.newDoor()
	s.httpSrv = s.newHTTPServer(s)
	s.conns = s.newConnServer(s.httpSrv, nil)
	return s, nil
}

// newHTTPServer is an http.Server with the door's timeouts and limits (S9) and the per-connection
// facts (S5a/b) that every listener of the door needs.
func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	srv := proxy.NewServer(h, s.log)
	srv.ConnContext = s.tailnet.ConnContext
	return srv
}

// newConnServer serves the connections of a door whose net/http server is srv: plain page loads
// by the fast loop, everything else by srv (fastloop.ConnServer), both judging with s.door after
// prepare.
func (s *Server) newConnServer(srv *http.Server, prepare func(*http.Request)) *fastloop.ConnServer {
	return &fastloop.ConnServer{Door: s.door, Server: srv, Prepare: prepare, ConnContext: s.tailnet.ConnContextHere}
}

func (s *Server) tailscaledUID() (uint32, error) {
	if s.cfg.TailscaledUID >= 0 {
		return uint32(s.cfg.TailscaledUID), nil
	}
	st, err := os.Stat(s.cfg.TailscaleSocket)
	if err != nil {
		return 0, fmt.Errorf("tailscaled's socket %s: %v (pass --tailscaled-uid or --tailscale-socket)", s.cfg.TailscaleSocket, errors.Unwrap(err))
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("cannot read the owner of tailscaled's socket; pass --tailscaled-uid")
	}
	return sys.Uid, nil
}

// Serve serves the door on ln until Close, when it returns http.ErrServerClosed. It also follows
// the token file and probes consoles (started once, however often Serve is called).
func (s *Server) Serve(ln net.Listener) error {
	select {
	case <-s.stop:
		ln.Close()
		return http.ErrServerClosed
	default:
	}
	s.bgOnce.Do(func() {
		go s.token.Watch(s.stop, time.Second, func(err error) {
			s.log.Error("fleet.token-unusable", "error", err.Error())
		})
		go s.probeLoop()
		go s.reachLoop()
	})
	s.tailnet.Watch(ln.Addr(), s.stop) // S5e, before the first connection is accepted
	return s.conns.Serve(ln)
}

// Listen listens on 127.0.0.1:port, the loopback door's only address (SPEC S1: nothing wider,
// ever; port 0 picks a free one).
//
// Its connections have no TCP keep-alive probes (Go turns them on for every accepted
// connection, four system calls each): both ends of a loopback connection are on this machine,
// whose kernel ends the connection when either process goes, so a probe finds nothing that the
// door's idle timeout would not; the unix door has none either.
func Listen(port int) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)).String())
}

// PublishAddr writes supervisor.addr, where consoles and the CLI find the TCP door. An existing
// file that is too open or someone else's is refused (F1), never rewritten.
func (s *Server) PublishAddr(addr string) error {
	return state.WritePrivateFile(filepath.Join(s.fleetDir, state.AddrFile), []byte(addr+"\n"))
}

// Close stops the server and its background work. A Serve after Close returns at once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	s.closeReach()
	defer func() {
		s.hop.Close()  // http.Server closes no hijacked connection: the hop ends live WebSockets
		s.closeAudit() // after the doors and the hop: what they recorded is written
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.conns.Shutdown(ctx); err != nil {
		return s.conns.Close()
	}
	return nil
}

// probeLoop probes every console at once (the consoles read from consoles.json are "unknown"
// until then), then every probeInterval.
func (s *Server) probeLoop() {
	s.registry.Probe(context.Background(), probeTimeout)
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.registry.Probe(context.Background(), probeTimeout)
		}
	}
}

// ServeHTTP judges every request in the spec's order (proxy.Door) and answers or forwards it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.door.ServeHTTP(w, r) }
