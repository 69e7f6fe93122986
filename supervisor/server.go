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
	"strings"
	"sync"
	"syscall"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/paths"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/proxy"
)

// Timeouts and limits of the loopback door (SPEC S9), set on purpose: headers must arrive quickly,
// idle connections go away, but a streaming response (SSE, WebSocket) may last as long as it
// lasts, so there is no read or write timeout on the whole request.
const (
	ReadHeaderTimeout = 10 * time.Second
	IdleTimeout       = 2 * time.Minute
	// MaxHeaderBytes bounds a request's head. It is net/http's own limit too, so no more than
	// it (plus net/http's 4 KiB of read slack) is ever read for one: a head that net/http
	// still read but is over the limit is 431 header-too-large from ServeHTTP, with its log
	// line; beyond that net/http answers its own bare 431 and closes (README, "Choices").
	MaxHeaderBytes = 64 << 10
	probeInterval  = 5 * time.Second
	probeTimeout   = time.Second
)

// Config is what a Server needs. The zero value of every field but StateHome has a useful default.
type Config struct {
	StateHome string // <stateHome>; the supervisor's files are in <stateHome>/fleet

	// LocalAPI is tailscaled's LocalAPI. Nil: a local.Client on TailscaleSocket.
	LocalAPI        LocalAPI
	TailscaleSocket string // default: tailscaled's usual socket for this OS

	// TailscaledUID is the uid that owns tailscaled's backend connections (SPEC S5a). Negative:
	// the owner of TailscaleSocket, looked up when first needed.
	TailscaledUID int

	Logger *slog.Logger     // default: JSON on stderr
	Now    func() time.Time // default: time.Now

	// BodyIdleTimeout cuts off a request body that sends nothing for this long (S9). Zero:
	// proxy.BodyIdleTimeout (60 s).
	BodyIdleTimeout time.Duration
	// AfterFunc starts the hop's timers; nil: time.AfterFunc. Tests pass a fake clock.
	AfterFunc proxy.AfterFunc
}

// A Server is the loopback door. It is an http.Handler; Serve runs it on a listener with the
// door's timeouts.
type Server struct {
	cfg       Config
	log       *slog.Logger
	fleetDir  string
	token     *state.Token
	registry  *Registry
	verifier  *verifier
	hop       *proxy.Hop
	stop      chan struct{}
	httpSrv   *http.Server
	bgOnce    sync.Once // starts the token watch and the probes, once
	closeOnce sync.Once
}

// New prepares the supervisor's folder (F1: created 0700; refused when too open), its token
// (created on first start) and its registry. It listens on nothing yet.
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
	}
	if _, err := s.token.Current(); err != nil {
		return nil, err
	}
	s.verifier = &verifier{
		api:           cfg.LocalAPI,
		tailscaledUID: s.tailscaledUID,
		now:           cfg.Now,
		apiHint:       fmt.Sprintf("is tailscaled running? Check with 'tailscale status' (socket %s, --tailscale-socket)", cfg.TailscaleSocket),
		whois:         map[string]whoIsEntry{},
		forwards:      newForwardWatch(cfg.LocalAPI, cfg.Now),
		lookups:       make(chan struct{}, maxPeerLookups),
	}
	// The fleet token rides on every hop: only a console run by this same user may receive it,
	// never a process of someone else that took a dead console's port.
	s.hop = proxy.NewHop(cfg.Logger, reg.markDown, dialOwnWithTimeout)
	if cfg.BodyIdleTimeout > 0 {
		s.hop.BodyIdleTimeout = cfg.BodyIdleTimeout
	}
	s.hop.AfterFunc = cfg.AfterFunc
	s.httpSrv = s.newHTTPServer(s)
	return s, nil
}

func dialOwnWithTimeout(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return peercred.DialOwn(ctx, network, addr)
}

// newHTTPServer is an http.Server with the door's timeouts and limits (S9) and the per-connection
// facts (S5a/b) that every listener of the door needs.
func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnContext:       s.verifier.connContext,
		// Accept errors, panics in a handler: operational errors are seen (S9).
		ErrorLog: proxy.WarnLogger(s.log, "fleet.http-error"),
	}
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
	})
	s.verifier.forwards.watch(ln.Addr(), s.stop) // S5e, before the first connection is accepted
	return s.httpSrv.Serve(ln)
}

// Listen listens on 127.0.0.1:port, the loopback door's only address (SPEC S1: nothing wider,
// ever; port 0 picks a free one).
func Listen(port int) (net.Listener, error) {
	return net.Listen("tcp4", netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)).String())
}

// PublishAddr writes supervisor.addr, where consoles and the CLI find the TCP door. An existing
// file that is too open or someone else's is refused (F1), never rewritten.
func (s *Server) PublishAddr(addr string) error {
	return state.WritePrivateFile(filepath.Join(s.fleetDir, state.AddrFile), []byte(addr+"\n"))
}

// Close stops the server and its background work. A Serve after Close returns at once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	defer s.hop.Close() // http.Server closes no hijacked connection: the hop ends live WebSockets
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.httpSrv.Shutdown(ctx); err != nil {
		return s.httpSrv.Close()
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

// ServeHTTP judges every request in the spec's order and answers or forwards it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	refuse := func(ref *proxy.Refusal) { proxy.WriteRefusal(w, r, s.log, ref) }

	if ref := checkHeaderSize(r); ref != nil { // S9
		refuse(ref)
		return
	}
	if ref := s.admitHost(r); ref != nil { // S10
		refuse(ref)
		return
	}
	if ref := proxy.CheckNoAssertion(r); ref != nil { // S3
		refuse(ref)
		return
	}
	// S7: on a console path, bad-path and hooks answer before the upgrade and Origin checks
	// (a hooks path is 403 hooks whatever else the request carries). The redirect of
	// "/c/<id>" waits until the request has passed them.
	isConsole := proxy.IsConsolePath(r.RequestURI)
	var route proxy.Route
	var redirect *proxy.Refusal
	if isConsole {
		var ref *proxy.Refusal
		route, ref = proxy.JudgePath(r.RequestURI)
		if ref != nil && ref.Status != http.StatusPermanentRedirect {
			refuse(ref)
			return
		}
		redirect = ref
	}
	if ref := proxy.CheckUpgrade(r); ref != nil { // S9
		refuse(ref)
		return
	}
	if len(r.Header["Origin"]) != 0 { // S12 (throughServe is only worth a look when it matters)
		if ref := proxy.CheckOrigin(r, proxy.RequestProto(r, throughServe(r))); ref != nil {
			refuse(ref)
			return
		}
	}
	rawPath, _, _ := strings.Cut(r.RequestURI, "?")
	switch {
	case strings.HasPrefix(rawPath, "/fleet/"):
		s.serveAPI(w, r, rawPath)
	case isConsole && redirect != nil:
		http.Redirect(w, r, redirect.Detail, http.StatusPermanentRedirect)
	case isConsole:
		s.serveConsole(w, r, route)
	case rawPath == "/":
		s.serveIndex(w, r)
	default:
		refuse(proxy.Refuse(http.StatusNotFound, "not-found", "no such page"))
	}
}

// serveConsole is /c/<id>/… with its path judged (S7): verify the caller (S5), find the console,
// hop.
func (s *Server) serveConsole(w http.ResponseWriter, r *http.Request, route proxy.Route) {
	refuse := func(ref *proxy.Refusal) { proxy.WriteRefusal(w, r, s.log, ref) }
	if strings.EqualFold(r.Method, http.MethodConnect) || strings.EqualFold(r.Method, http.MethodTrace) {
		// CONNECT would tunnel past the hop; TRACE would echo the assertion back to the caller.
		refuse(proxy.Refuse(http.StatusMethodNotAllowed, "method", "CONNECT and TRACE are not served"))
		return
	}
	who, ref := s.verifier.verify(r)
	if ref != nil {
		refuse(s.hintLocalCaller(r, ref, route.ID))
		return
	}
	c, ok := s.registry.Get(route.ID)
	if !ok {
		refuse(proxy.Refuse(http.StatusNotFound, "unknown-console", "no console is registered with that id"))
		return
	}
	tok, err := s.token.Current()
	if err != nil {
		refuse(proxy.Refuse(http.StatusServiceUnavailable, "no-token", "the fleet token file is unusable; see the supervisor's log"))
		return
	}
	s.hop.Forward(w, r, &proxy.Target{
		ConsoleID: route.ID,
		Addr:      c.Addr,
		Path:      route.Path,
		Login:     who.login,
		Token:     tok,
		ClientIP:  who.ip.String(),
		Host:      r.Host,
		Proto:     proxy.RequestProto(r, true),
	})
}

// hintLocalCaller adds to a refusal of a caller on this machine (not tailscaled) where to go
// instead: the console's own loopback address, which this machine's user can open directly.
func (s *Server) hintLocalCaller(r *http.Request, ref *proxy.Refusal, consoleID string) *proxy.Refusal {
	f, _ := r.Context().Value(connFactsKey{}).(*connFacts)
	if f == nil || !f.localCaller {
		return ref
	}
	hint := "On this machine, open a console directly at its own address: 'fleet consoles' lists them."
	if c, ok := s.registry.Get(consoleID); ok {
		hint = fmt.Sprintf("On this machine, open the console directly: http://%s/", c.Addr)
	}
	return proxy.Refuse(ref.Status, ref.Reason, ref.Detail+". "+hint)
}

// checkHeaderSize refuses request headers over MaxHeaderBytes (S9): 431 header-too-large.
func checkHeaderSize(r *http.Request) *proxy.Refusal {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 16
	for k, vv := range r.Header {
		for _, v := range vv {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	if n > MaxHeaderBytes {
		return proxy.Refuse(http.StatusRequestHeaderFieldsTooLarge, "header-too-large", "request headers are limited to 64 KiB")
	}
	return nil
}

// throughServe reports whether a request looks like it came through Tailscale Serve: it carries
// X-Forwarded-For or any Tailscale-* header (SPEC S8).
func throughServe(r *http.Request) bool {
	for name := range r.Header {
		f := contract.FoldName(name)
		if strings.HasPrefix(f, "tailscale-") || strings.HasPrefix(f, "x-forwarded-") || f == "forwarded" || f == "x-real-ip" {
			return true
		}
	}
	return false
}
