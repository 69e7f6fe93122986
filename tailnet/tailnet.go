package tailnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/proxy"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/util/singleflight"
)

// LocalAPI is the part of tailscaled's LocalAPI that a Verifier asks. *local.Client satisfies
// it; tests and the tailnet harness pass their own.
type LocalAPI interface {
	WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error)
	StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error)
	// GetPrefs and GetServeConfig tell whether tailscaled can carry a peer's raw bytes to a
	// door (Tailscale SSH, raw TCP forwards: SPEC S5e).
	GetPrefs(ctx context.Context) (*ipn.Prefs, error)
	GetServeConfig(ctx context.Context) (*ipn.ServeConfig, error)
}

// Config is what a Verifier needs. LocalAPI, TailscaledUID and TailscaledArgs are required.
type Config struct {
	// LocalAPI is tailscaled's LocalAPI, asked for WhoIs, status, prefs and the Serve config.
	LocalAPI LocalAPI
	// TailscaledUID returns the uid that owns tailscaled's backend connections (SPEC S5a). It is
	// asked for every connection judged, so a tailscaled started after the Verifier is found; an
	// error refuses the connection's requests (401 unverified, the error on the page).
	TailscaledUID func() (uint32, error)
	// TailscaledArgs returns tailscaled's command line, for the outbound proxies that no LocalAPI
	// call shows (SPEC S5e). An error makes the TCP door forwardable (fail closed).
	TailscaledArgs func(ctx context.Context) ([]string, error)
	// LocalAPIHint tells the operator where the LocalAPI was asked and how to point fleet
	// elsewhere. It goes to the log line of a refusal only, never to a page.
	LocalAPIHint string
	// Now is the clock of every cache and of the forward watch. Nil: time.Now.
	Now func() time.Time
	// Access is the profile's access.mode at start (SPEC G1; SetAccess changes it): what a
	// verified caller whose WhoIs carries no grant may open. Anything but access.ModeTailnet,
	// the empty Mode included, is access.ModeGrants: nothing.
	Access access.Mode
	// Log receives the warnings of a capability value that grants nothing because it is
	// malformed. Nil: slog.Default().
	Log *slog.Logger
	// Peers lists the tailnet's peers (SPEC G2). Nil: LocalAPI, when it lists peers too (as
	// *local.Client does); else no peer is ever listed and no Origin of a peer is allowed.
	Peers PeerStatusAPI
}

// localAPITimeout bounds one LocalAPI call. WhoIs of an unknown ip:port takes ~360 ms in tailscaled.
const localAPITimeout = 3 * time.Second

// A Verifier answers, for a door that Tailscale Serve publishes on this machine, who is calling
// (SPEC S5) and whether the Host names this machine (S10). It is a proxy.CallerVerifier and a
// proxy.HostAdmitter.
//
// It judges only connections that it saw accepted: serve every door with ConnContext (or
// ConnContextHere) and Watch the door's listener before accepting on it. A request on any other
// connection, and every request while tailscaled cannot be asked, is refused; a Verifier never
// forwards anything itself.
type Verifier struct {
	api           LocalAPI
	tailscaledUID func() (uint32, error)
	now           func() time.Time
	apiHint       string
	forwards      *forwardWatch // SPEC S5e
	lookups       chan struct{} // peer-uid lookup slots (maxPeerLookups)
	log           *slog.Logger
	// tailnetMode: access.mode is tailnet, so a caller without the capability opens every
	// console (SPEC G1); false is grants, and the zero Verifier's.
	tailnetMode atomic.Bool
	// peerAPI lists the tailnet's peers, cached in peers (SPEC G2, fleetpeers.go); fleetPeers
	// is the profile's access.fleet_peers.
	peerAPI    PeerStatusAPI
	peers      peerCache
	fleetPeers atomic.Pointer[[]string]

	// One LocalAPI call at a time per question: parallel first requests share its answer.
	whoisFlight  singleflight.Group[string, whoIsEntry]
	statusFlight singleflight.Group[string, *ipnstate.Status]

	mu     sync.Mutex
	whois  map[netip.Addr]whoIsEntry
	status *ipnstate.Status
	statAt time.Time
}

// New returns a Verifier for cfg. It asks tailscaled nothing yet.
func New(cfg Config) (*Verifier, error) {
	switch {
	case cfg.LocalAPI == nil:
		return nil, errors.New("tailnet: no LocalAPI")
	case cfg.TailscaledUID == nil:
		return nil, errors.New("tailnet: no way to tell tailscaled's uid")
	case cfg.TailscaledArgs == nil:
		return nil, errors.New("tailnet: no way to read tailscaled's command line")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	v := &Verifier{
		api:           cfg.LocalAPI,
		tailscaledUID: cfg.TailscaledUID,
		now:           cfg.Now,
		apiHint:       cfg.LocalAPIHint,
		whois:         map[netip.Addr]whoIsEntry{},
		forwards:      newForwardWatch(cfg.LocalAPI, cfg.TailscaledArgs, cfg.Now),
		lookups:       make(chan struct{}, maxPeerLookups),
		log:           cfg.Log,
		peerAPI:       cfg.Peers,
	}
	if v.peerAPI == nil {
		v.peerAPI, _ = cfg.LocalAPI.(PeerStatusAPI)
	}
	v.SetAccess(cfg.Access)
	return v, nil
}

func unverified(detail string) *proxy.Refusal {
	return proxy.Refuse(http.StatusUnauthorized, "unverified", detail)
}

// apiDown is the refusal when tailscaled's LocalAPI did not answer (401 unverified).
func (v *Verifier) apiDown(err error) *proxy.Refusal {
	// The page says what to do; the error itself (which names tailscaled's socket) is this
	// machine's set-up, for the log only: a refusal answers whoever sent the request.
	ref := unverified("cannot reach tailscaled's LocalAPI; is tailscaled running? Check with 'tailscale status'; this machine's log says more")
	ref.LogDetail = fmt.Sprintf("%v; %s", err, v.apiHint)
	return ref
}
