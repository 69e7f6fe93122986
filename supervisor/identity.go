package supervisor

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/proxy"
	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/net/tsaddr"
	"tailscale.com/util/singleflight"
)

// LocalAPI is the part of tailscaled's LocalAPI that the supervisor uses. *local.Client satisfies
// it; tests and the tailnet harness pass their own.
type LocalAPI interface {
	WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error)
	StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error)
	// GetPrefs and GetServeConfig tell whether tailscaled can carry a peer's raw bytes to a
	// door (Tailscale SSH, raw TCP forwards: SPEC S5e).
	GetPrefs(ctx context.Context) (*ipn.Prefs, error)
	GetServeConfig(ctx context.Context) (*ipn.ServeConfig, error)
}

// whoIsTTL is how long a WhoIs answer for an address is reused (SPEC S5: "a few seconds").
const whoIsTTL = 5 * time.Second

// statusTTL is how long tailscaled's status (TUN mode, this node's names and addresses) is reused.
const statusTTL = 30 * time.Second

// maxWhoIsCache bounds the WhoIs cache; past it the cache starts over.
const maxWhoIsCache = 4096

// overflowUID is the uid that unmapped users show as inside a user namespace; never tailscaled's.
const overflowUID = 65534

// localAPITimeout bounds one LocalAPI call. WhoIs of an unknown ip:port takes ~360 ms in tailscaled.
const localAPITimeout = 3 * time.Second

// maxPeerLookups bounds how many connections' peer uids are looked up at once (SPEC S9: each
// accepted connection would otherwise start its own lookup, however many arrive).
const maxPeerLookups = 32

// peerLookupWait is how long a connection's first request waits for a free lookup slot when
// all are taken; then it is refused (401 unverified), never forwarded.
const peerLookupWait = 2 * time.Second

// A verifier answers SPEC S5: is this request from a tailnet user, through Serve, and who?
type verifier struct {
	api           LocalAPI
	tailscaledUID func() (uint32, error) // resolved lazily so a tailscaled started later is found
	now           func() time.Time
	apiHint       string        // what to tell the operator when the LocalAPI does not answer
	forwards      *forwardWatch // SPEC S5e
	lookups       chan struct{} // peer-uid lookup slots (maxPeerLookups)

	// One LocalAPI call at a time per question: parallel first requests share its answer.
	whoisFlight  singleflight.Group[string, whoIsEntry]
	statusFlight singleflight.Group[string, *ipnstate.Status]

	mu     sync.Mutex
	whois  map[netip.Addr]whoIsEntry
	status *ipnstate.Status
	statAt time.Time
}

type whoIsEntry struct {
	resp    *apitype.WhoIsResponse
	err     error // nil or local.ErrPeerNotFound: other errors are not cached
	expires time.Time
}

// connFacts is what the supervisor knows of one accepted connection. S5a and S5b are facts of the
// connection, so they are judged once (on its first request that needs them) and kept.
type connFacts struct {
	local, remote netip.AddrPort
	peerUID       func(context.Context) (uint32, error)
	viaUnix       bool    // a unix-socket listener: no netstack forward can reach it
	door          doorKey // which door accepted it (S5e)
	epoch         uint64  // the forward watch's answers recorded when it was accepted (S5e)
	localCaller   bool    // set by judgeConn: the peer is a process on this machine, not tailscaled

	once sync.Once
	ref  *proxy.Refusal
}

type connFactsKey struct{}

// connContext attaches connFacts to every accepted connection (http.Server.ConnContext). The
// peer's uid is looked up at once, in the background, while the connection surely still holds its
// addresses (peercred.ConnPeerUID also checks that it does); its first request waits for it. At
// most maxPeerLookups run at once: past that, the connection's first request looks its peer up
// itself when a slot frees, or is refused after peerLookupWait.
func (v *verifier) connContext(ctx context.Context, c net.Conn) context.Context {
	return v.newConnFacts(ctx, c, false)
}

// connContextHere is connContext for a door that calls it on the connection's own goroutine
// (proxy.ConnServer.ConnContext), before it reads the first request: the peer is looked up right
// there, which saves a goroutine per connection (net/http's server calls ConnContext on its
// accept loop, which must not wait).
func (v *verifier) connContextHere(ctx context.Context, c net.Conn) context.Context {
	return v.newConnFacts(ctx, c, true)
}

func (v *verifier) newConnFacts(ctx context.Context, c net.Conn, here bool) context.Context {
	f := &connFacts{}
	switch c := c.(type) {
	case *net.TCPConn:
		f.local, _ = peercred.AddrPort(c.LocalAddr())
		f.remote, _ = peercred.AddrPort(c.RemoteAddr())
	case *net.UnixConn:
		f.viaUnix = true
	}
	f.door, _ = doorKeyOf(c.LocalAddr())
	f.epoch = v.forwards.epochNow()
	var uid uint32
	var err error
	select {
	case v.lookups <- struct{}{}:
		if here {
			uid, err = peercred.ConnPeerUID(c)
			<-v.lookups
			f.peerUID = func(context.Context) (uint32, error) { return uid, err }
			break
		}
		done := make(chan struct{})
		go func() {
			defer func() { <-v.lookups }()
			defer close(done)
			uid, err = peercred.ConnPeerUID(c)
		}()
		f.peerUID = func(context.Context) (uint32, error) {
			<-done
			return uid, err
		}
	default:
		var once sync.Once
		f.peerUID = func(ctx context.Context) (uint32, error) {
			once.Do(func() {
				t := time.NewTimer(peerLookupWait)
				defer t.Stop()
				select {
				case v.lookups <- struct{}{}:
					defer func() { <-v.lookups }()
					uid, err = peercred.ConnPeerUID(c)
				case <-t.C:
					err = errors.New("too many connections are being judged at once")
				case <-ctx.Done():
					err = ctx.Err()
				}
			})
			return uid, err
		}
	}
	return context.WithValue(ctx, connFactsKey{}, f)
}

// refuseSelf answers a request from this node's own Tailscale address (403 self).
func refuseSelf() *proxy.Refusal {
	return proxy.Refuse(http.StatusForbidden, "self",
		"a request from this machine itself through its own Tailscale address proves nothing about its user; open the console on this machine directly")
}

func unverified(detail string) *proxy.Refusal {
	return proxy.Refuse(http.StatusUnauthorized, "unverified", detail)
}

// A caller is the verified identity behind a request.
type caller struct {
	login string
	ip    netip.Addr
}

// verify judges r under SPEC S5 and returns the verified caller, or a refusal. Any error is a
// refusal: nothing unverified is ever forwarded.
func (v *verifier) verify(r *http.Request) (caller, *proxy.Refusal) {
	ctx := r.Context()
	facts, _ := ctx.Value(connFactsKey{}).(*connFacts)
	if facts == nil {
		return caller{}, unverified("the connection was not judged")
	}
	facts.once.Do(func() { facts.ref = v.judgeConn(ctx, facts) })
	if facts.ref != nil {
		return caller{}, facts.ref
	}
	// S5e: a door that tailscaled can carry a peer's raw bytes to proves nothing by its uid.
	if ref := v.forwards.judgeConn(ctx, facts.door, facts.epoch); ref != nil {
		return caller{}, ref
	}

	// S5c: Funnel traffic is never a tailnet user.
	if contract.HasHeaderFold(r.Header, "Tailscale-Funnel-Request") {
		return caller{}, proxy.Refuse(http.StatusForbidden, "funnel", "requests from the public internet (Funnel) are refused")
	}
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) != 1 || strings.Contains(xff[0], ",") {
		return caller{}, unverified("the request did not come through Tailscale Serve (want exactly one X-Forwarded-For)")
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(xff[0]))
	if err != nil || !tsaddr.IsTailscaleIP(ip.Unmap()) {
		return caller{}, unverified("X-Forwarded-For is not a Tailscale address")
	}
	ip = ip.Unmap()
	// This node's own address: a process on this very machine, of any user, that connected to
	// the node's Tailscale IP and so went through Serve. WhoIs names the node's owner for it, but
	// nothing says that process is the owner.
	st, ref := v.tailscaleStatus(ctx)
	if ref != nil {
		return caller{}, ref
	}
	if slices.Contains(st.TailscaleIPs, ip) || (st.Self != nil && slices.Contains(st.Self.TailscaleIPs, ip)) {
		return caller{}, refuseSelf()
	}
	who, ref := v.whoIs(ctx, ip)
	if ref != nil {
		return caller{}, ref
	}
	if who.Node != nil && st.Self != nil && who.Node.StableID != "" && who.Node.StableID == st.Self.ID {
		return caller{}, refuseSelf()
	}
	if who.Node != nil && who.Node.IsTagged() {
		return caller{}, proxy.Refuse(http.StatusForbidden, "tagged-node", "tagged nodes are not people; only a user's device is let in")
	}
	if who.Node == nil || who.UserProfile == nil || who.UserProfile.LoginName == "" {
		return caller{}, unverified("tailscaled did not name a user for the caller")
	}
	login := who.UserProfile.LoginName
	if strings.HasPrefix(strings.ToLower(login), "device:") {
		return caller{}, unverified("a tailnet login never looks like a paired device")
	}
	// S5d: what Serve told us must agree with what WhoIs says.
	if sent := r.Header.Values("Tailscale-User-Login"); len(sent) > 0 {
		if len(sent) != 1 {
			return caller{}, proxy.Refuse(http.StatusUnauthorized, "identity-mismatch", "more than one Tailscale-User-Login")
		}
		decoded, err := new(mime.WordDecoder).DecodeHeader(sent[0])
		if err != nil || decoded != login {
			return caller{}, proxy.Refuse(http.StatusUnauthorized, "identity-mismatch", "Tailscale-User-Login does not agree with tailscaled's WhoIs")
		}
	}
	return caller{login: login, ip: ip}, nil
}

// judgeConn answers S5a and S5b for one connection.
func (v *verifier) judgeConn(ctx context.Context, f *connFacts) *proxy.Refusal {
	want, err := v.tailscaledUID()
	if err != nil {
		return unverified("cannot tell which user runs tailscaled: " + err.Error())
	}
	if want == overflowUID {
		// In a user namespace (systemd PrivateUsers=) every unmapped user shows as 65534: that
		// uid cannot tell tailscaled from anyone else.
		return unverified("tailscaled's uid shows as 65534 (nobody): run tailscaled as root or fleet outside a user namespace")
	}
	got, err := f.peerUID(ctx)
	if err != nil {
		return unverified("cannot tell who opened the connection: " + err.Error())
	}
	if got != want {
		f.localCaller = true
		return unverified("this door is for callers on your tailnet, through Tailscale Serve; this request came from a process on this machine, not from tailscaled")
	}
	if f.viaUnix {
		return nil
	}
	st, ref := v.tailscaleStatus(ctx)
	if ref != nil {
		return ref
	}
	if st.TUN {
		// A kernel TUN never forwards a peer straight to 127.0.0.1 (SPEC S5b).
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, localAPITimeout)
	defer cancel()
	_, err = v.api.WhoIs(wctx, f.remote.String())
	switch {
	case errors.Is(err, local.ErrPeerNotFound):
		return nil
	case err == nil:
		return unverified("a tailnet peer reached this port directly, not through Tailscale Serve")
	default:
		return v.apiDown(err)
	}
}

func (v *verifier) apiDown(err error) *proxy.Refusal {
	// The page says what to do; the error itself (which names tailscaled's socket) is this
	// machine's set-up, for the log only: a refusal answers whoever sent the request.
	ref := unverified("cannot reach tailscaled's LocalAPI; is tailscaled running? Check with 'tailscale status'; this machine's log says more")
	ref.LogDetail = fmt.Sprintf("%v; %s", err, v.apiHint)
	return ref
}

func (v *verifier) whoIs(ctx context.Context, ip netip.Addr) (*apitype.WhoIsResponse, *proxy.Refusal) {
	e, ok := v.cachedWhoIs(ip)
	if !ok {
		addr := ip.String() // as tailscaled is asked; the cache is keyed by ip (no text per request)
		res := <-v.whoisFlight.DoChanContext(ctx, addr, func(ctx context.Context) (whoIsEntry, error) {
			// A call that finished just before this one began has filled the cache.
			if e, ok := v.cachedWhoIs(ip); ok {
				return e, nil
			}
			now := v.now()
			wctx, cancel := context.WithTimeout(ctx, localAPITimeout)
			defer cancel()
			resp, err := v.api.WhoIs(wctx, addr)
			if err != nil && !errors.Is(err, local.ErrPeerNotFound) {
				return whoIsEntry{}, err
			}
			e := whoIsEntry{resp: resp, err: err, expires: now.Add(whoIsTTL)}
			v.mu.Lock()
			if len(v.whois) >= maxWhoIsCache {
				v.whois = make(map[netip.Addr]whoIsEntry)
			}
			v.whois[ip] = e
			v.mu.Unlock()
			return e, nil
		})
		if res.Err != nil {
			return nil, v.apiDown(res.Err)
		}
		e = res.Val
	}
	if e.err != nil || e.resp == nil {
		return nil, unverified("tailscaled does not know the caller's address")
	}
	return e.resp, nil
}

// cachedWhoIs returns the cached WhoIs answer for addr while it is fresh.
func (v *verifier) cachedWhoIs(ip netip.Addr) (whoIsEntry, bool) {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.whois[ip]
	return e, ok && !now.After(e.expires)
}

// tailscaleStatus returns tailscaled's status, cached for statusTTL.
func (v *verifier) tailscaleStatus(ctx context.Context) (*ipnstate.Status, *proxy.Refusal) {
	if st, ok := v.cachedStatus(); ok {
		return st, nil
	}
	res := <-v.statusFlight.DoChanContext(ctx, "status", func(ctx context.Context) (*ipnstate.Status, error) {
		if st, ok := v.cachedStatus(); ok {
			return st, nil
		}
		now := v.now()
		sctx, cancel := context.WithTimeout(ctx, localAPITimeout)
		defer cancel()
		st, err := v.api.StatusWithoutPeers(sctx)
		if err == nil && st == nil {
			err = errors.New("no status")
		}
		if err != nil {
			return nil, err
		}
		v.mu.Lock()
		v.status, v.statAt = st, now
		v.mu.Unlock()
		return st, nil
	})
	if res.Err != nil {
		return nil, v.apiDown(res.Err)
	}
	return res.Val, nil
}

func (v *verifier) cachedStatus() (*ipnstate.Status, bool) {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.status, v.status != nil && now.Sub(v.statAt) < statusTTL
}
