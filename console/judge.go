package console

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

	"tailscale.com/paths"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
)

// A Scope is where a caller stands: on this machine (local) or anywhere else (remote).
type Scope string

// The two scopes.
const (
	Local  Scope = "local"
	Remote Scope = "remote"
)

// A Caller is who a request comes from, as judged by a Verifier.
type Caller struct {
	Scope Scope  `json:"scope"`
	Login string `json:"login"` // remote: the asserted login; local: always ""
}

// Reason words of the refusals this package answers with (the spec's words where it has them).
const (
	ReasonBadToken      = "fleet-bad-token"    // 401, C1: assertion malformed or bearer not believed
	ReasonNotLoopback   = "fleet-not-loopback" // 421, C2: assertion on a Host that is not loopback
	ReasonAndProxy      = "fleet-and-proxy"    // 403, C3: assertion beside the proxy identity header
	ReasonHost          = "host"               // 421: no assertion, Host not loopback (DNS rebinding)
	ReasonCrossOrigin   = "cross-origin"       // 403: local request from a foreign Origin
	ReasonNoAssertion   = "no-assertion"       // 403: no assertion, and not this user on this machine
	ReasonLocalOnly     = "local-only"         // 403, C5: presence or hooks asked by scope remote
	ReasonHookPeer      = "not loopback"       // 403, C6: hook request from a peer that is not loopback
	ReasonHookProxied   = "not local"          // 403, C6: hook request that came through a proxy
	ReasonBadRunToken   = "bad-run-token"      // 401, C6: hook request without a live run's bearer
	ReasonReachSettings = "reach-settings"     // 403, C7: a device login tried to change reach settings
)

// A Refusal is the answer to a request the console must not serve: the status and the reason word
// that the client sees, the rule for the log, and a short secret-free detail for the log only.
type Refusal struct {
	Status int
	Reason string
	Rule   string // "C1" … "C7", or "" for the console-wide host and origin checks
	Detail string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%d %s: %s", r.Status, r.Reason, r.Detail) }

func refusal(status int, reason, rule, detail string) *Refusal {
	return &Refusal{Status: status, Reason: reason, Rule: rule, Detail: detail}
}

// DefaultProxyHeader is the identity header of a console's own --remote proxy (C3).
const DefaultProxyHeader = "Tailscale-User-Login"

// Config configures a Verifier. The zero value follows the token under the default <stateHome>.
type Config struct {
	// StateDir is the --state-dir flag value; "" resolves <stateHome> from the environment
	// (state.Home). The token followed is <stateHome>/fleet/fleet.token.
	StateDir string
	// ProxyHeader is the identity header that the console's own proxy sets (C3);
	// "" means DefaultProxyHeader. It is matched under any spelling.
	ProxyHeader string
	// AllowHost, if not nil, admits more Host values (as sent, port included) for requests that
	// carry no assertion — for a console that is also published under another name. It never
	// widens C2: an assertion is believed on a loopback Host only.
	AllowHost func(host string) bool
	// Logger receives the JSON log lines; nil means JSON on stderr.
	Logger *slog.Logger
	// Now is the clock of the rotation grace; nil means time.Now.
	Now func() time.Time
	// TailscaleSocket is tailscaled's LocalAPI socket, whose owner is tailscaled's uid; ""
	// means tailscaled's usual socket for this OS (tailscale.com/paths.DefaultTailscaledSocket,
	// the one fleet serve and fleet doctor use). A console running as that uid believes nobody
	// local.
	TailscaleSocket string
	// TrustTailscaledUser lets a console that runs as tailscaled's uid believe local callers
	// anyway. Set it only when tailscaled uses a kernel TUN (it then never forwards a tailnet
	// peer to 127.0.0.1) or when nothing else runs as that user.
	TrustTailscaledUser bool
}

// A Verifier judges requests against the fleet token. It is safe for concurrent use.
type Verifier struct {
	token       *state.Token
	proxyFold   string
	allowHost   func(string) bool
	tsSocket    string
	trustTSUser bool
	log         *slog.Logger
	stop        chan struct{}
	closeOnce   sync.Once
}

// WatchInterval is how often the token file's stamp is polled; C1 wants a change seen within 2 s.
const WatchInterval = time.Second

// New starts following the fleet token file. It fails only when <stateHome> cannot be resolved: a
// missing or bad token file is logged and means that no assertion is believed until it is good
// (fail closed). Close stops the polling.
func New(cfg Config) (*Verifier, error) {
	home, err := state.Home(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	ph := cfg.ProxyHeader
	if ph == "" {
		ph = DefaultProxyHeader
	}
	if cfg.TailscaleSocket == "" {
		cfg.TailscaleSocket = paths.DefaultTailscaledSocket()
	}
	path := filepath.Join(state.FleetDir(home), state.TokenFile)
	v := &Verifier{
		token:       state.NewTokenFollower(path, cfg.Now),
		proxyFold:   contract.FoldName(ph),
		allowHost:   cfg.AllowHost,
		tsSocket:    cfg.TailscaleSocket,
		trustTSUser: cfg.TrustTailscaledUser,
		log:         log,
		stop:        make(chan struct{}),
	}
	if _, err := v.token.Current(); err != nil {
		v.logToken(err)
	}
	go v.watch(WatchInterval)
	return v, nil
}

// watch re-reads the token file every interval until Close: state.Token.Watch, plus a log line
// when the file becomes good again.
func (v *Verifier) watch(interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-tick.C:
			v.refresh()
		}
	}
}

// refresh re-reads the token file if its stamp changed, and logs what changed: the error (which
// names the file and the fix, never the token), or that a good token was loaded.
func (v *Verifier) refresh() {
	changed, err := v.token.Refresh()
	switch {
	case !changed:
	case err != nil:
		v.logToken(err)
	default:
		v.log.Info("console.token", "path", v.token.Path(), "effect", "fleet token (re)loaded")
	}
}

func (v *Verifier) logToken(err error) {
	v.log.Error("console.token", "path", v.token.Path(), "error", err.Error(),
		"effect", "no assertion is believed until the token file is good")
}

// Close stops following the token file. The Verifier keeps judging with what it last read.
func (v *Verifier) Close() error {
	v.closeOnce.Do(func() { close(v.stop) })
	return nil
}

// Bearer returns the current fleet token, for the one request a console sends with it: its
// registration with the supervisor (SPEC S8). Never log it or put it in a URL.
func (v *Verifier) Bearer() (string, error) { return v.token.Current() }

// Judge judges r in the order documented in the package comment and returns the caller, or the
// refusal to answer with. It does not look at the path: Middleware and the guards add the C5–C7
// checks.
func (v *Verifier) Judge(r *http.Request) (Caller, *Refusal) {
	a := readAssertion(r)
	if a.carried {
		return v.judgeAssertion(r, a)
	}
	if !contract.IsLoopbackHost(r.Host) && (v.allowHost == nil || !v.allowHost(r.Host)) {
		return Caller{}, refusal(http.StatusMisdirectedRequest, ReasonHost, "", "Host is not a loopback name")
	}
	// Without the supervisor's assertion, a caller is believed only as this console's own user
	// on this machine: straight to loopback, through no proxy, from a socket of the same uid.
	// Anyone else — another user, a tailnet peer that tailscaled forwarded to 127.0.0.1, a proxy
	// that wrote its own identity header — is nobody the console may serve.
	if v.proxied(r.Header) || !loopbackPeer(r.RemoteAddr) {
		return Caller{}, refusal(http.StatusForbidden, ReasonNoAssertion, "", "only the supervisor's assertion makes a caller remote; this request came through a proxy or from another machine")
	}
	if err := v.sameUser(r); err != nil {
		return Caller{}, refusal(http.StatusForbidden, ReasonNoAssertion, "", "the caller is not this console's user: "+err.Error())
	}
	if !sameOrigin(r) {
		return Caller{}, refusal(http.StatusForbidden, ReasonCrossOrigin, "", "Origin is not this console's own origin")
	}
	return Caller{Scope: Local}, nil
}

// notTailscaledsUser reports an error when this console runs as the same user as tailscaled (the
// owner of its LocalAPI socket). tailscaled with userspace networking forwards a tailnet peer's
// connection straight to 127.0.0.1 from a socket of its own uid: a console of that same uid could
// not tell the stranger from its own user, so it believes nobody local — unless
// Config.TrustTailscaledUser says tailscaled cannot forward (a kernel TUN).
func (v *Verifier) notTailscaledsUser() error {
	if v.trustTSUser {
		return nil
	}
	st, err := os.Stat(v.tsSocket)
	if err != nil {
		return nil // no tailscaled here: nothing forwards tailnet peers to this machine's loopback
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) == os.Geteuid() {
		return fmt.Errorf("this console runs as tailscaled's user (uid %d, owner of %s), so a tailnet peer that tailscaled forwards to 127.0.0.1 looks like you; run the console as another user (or set TrustTailscaledUser when tailscaled uses a kernel TUN)", sys.Uid, v.tsSocket)
	}
	return nil
}

// ConnContext, set as the console's http.Server.ConnContext, judges once per connection whether
// its peer is this console's own user — at once, in the background, while the connection surely
// still holds its addresses — instead of once per local request.
func (v *Verifier) ConnContext(ctx context.Context, c net.Conn) context.Context {
	pv := &peerVerdict{done: make(chan struct{})}
	go func() {
		defer close(pv.done)
		pv.err = peercred.CheckOwn(c)
	}()
	return context.WithValue(ctx, peerKey, pv)
}

type peerVerdict struct {
	done chan struct{} // closed when err is known; nil: err was known from the start (tests)
	err  error
}

// sameUser reports an error unless the peer of r's connection is a socket of this process's own
// uid (peercred), judged once per connection when ConnContext is set.
func (v *Verifier) sameUser(r *http.Request) error {
	if err := v.notTailscaledsUser(); err != nil {
		return err
	}
	if pv, ok := r.Context().Value(peerKey).(*peerVerdict); ok {
		if pv.done != nil {
			<-pv.done
		}
		return pv.err
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return errors.New("the connection's local address is unknown")
	}
	l, err1 := netip.ParseAddrPort(local.String())
	p, err2 := netip.ParseAddrPort(r.RemoteAddr)
	if err1 != nil || err2 != nil {
		return errors.New("not a TCP connection")
	}
	uid, err := peercred.PeerUID(l, p)
	if err != nil {
		return err
	}
	if uid != uint32(os.Geteuid()) {
		return fmt.Errorf("%w (uid %d)", peercred.ErrOtherUser, uid)
	}
	return nil
}

func (v *Verifier) judgeAssertion(r *http.Request, a assertion) (Caller, *Refusal) {
	if contract.HasHeaderFold(r.Header, v.proxyFold) {
		return Caller{}, refusal(http.StatusForbidden, ReasonAndProxy, "C3", "assertion beside the proxy identity header")
	}
	if !contract.IsLoopbackHost(r.Host) {
		return Caller{}, refusal(http.StatusMisdirectedRequest, ReasonNotLoopback, "C2", "assertion on a Host that is not loopback")
	}
	if why := a.malformed(); why != "" {
		return Caller{}, refusal(http.StatusUnauthorized, ReasonBadToken, "C1", "malformed assertion: "+why)
	}
	if !v.token.MatchFresh(a.bearers[0]) {
		detail := "bearer is not the fleet token"
		if _, err := v.token.Current(); err != nil {
			detail = "no fleet token is believed: the token file is unusable (see console.token)"
		}
		return Caller{}, refusal(http.StatusUnauthorized, ReasonBadToken, "C1", detail)
	}
	return Caller{Scope: Remote, Login: a.logins[0]}, nil
}

// An assertion is what a request carries of the two assertion headers, under every spelling.
type assertion struct {
	carried bool     // either header is present (any spelling, any value) or declared as a trailer
	trailer bool     // one is declared as a trailer
	bearers []string // every value of every spelling of X-Phase-Console-Fleet
	logins  []string // every value of every spelling of X-Phase-Console-Fleet-Login
}

func readAssertion(r *http.Request) assertion {
	var a assertion
	for name, vals := range r.Header {
		switch {
		case contract.FoldedEqual(name, contract.FoldedFleet):
			a.carried = true
			a.bearers = append(a.bearers, vals...)
		case contract.FoldedEqual(name, contract.FoldedFleetLogin):
			a.carried = true
			a.logins = append(a.logins, vals...)
		}
	}
	for name := range r.Trailer {
		if contract.IsAssertionName(name) {
			a.carried, a.trailer = true, true
		}
	}
	return a
}

// malformed says why a is not exactly one non-empty value of each header, or "".
func (a assertion) malformed() string {
	switch {
	case a.trailer:
		return "declared as a trailer"
	case len(a.bearers) != 1:
		return fmt.Sprintf("%d bearer values", len(a.bearers))
	case len(a.logins) != 1:
		return fmt.Sprintf("%d login values", len(a.logins))
	case a.bearers[0] == "":
		return "empty bearer"
	case a.logins[0] == "":
		return "empty login"
	}
	return ""
}

// proxied reports whether h carries a mark of a proxy hop: the proxy identity header, Forwarded,
// X-Forwarded-*, X-Real-Ip or Tailscale-*, under any spelling.
func (v *Verifier) proxied(h http.Header) bool {
	for name := range h {
		f := contract.FoldName(name)
		if f == v.proxyFold || f == "forwarded" || f == "x-real-ip" ||
			strings.HasPrefix(f, "x-forwarded-") || strings.HasPrefix(f, "tailscale-") {
			return true
		}
	}
	return false
}

// loopbackPeer reports whether the TCP peer (http.Request.RemoteAddr) is a loopback address.
func loopbackPeer(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// sameOrigin reports whether r has no Origin header, or exactly one that is r's own origin (http
// or, over TLS, https, plus Host), as contract.SameOrigin compares them (RFC 6454).
func sameOrigin(r *http.Request) bool {
	vals := r.Header.Values("Origin")
	if len(vals) == 0 {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return len(vals) == 1 && contract.SameOrigin(vals[0], scheme, r.Host)
}
