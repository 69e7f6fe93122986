package tailnet

// This file is who is calling through Tailscale Serve (SPEC S5c, S5d): the headers Serve sets,
// judged against tailscaled's WhoIs, and the WhoIs and status caches.

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/proxy"
	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/net/tsaddr"
)

// whoIsTTL is how long a WhoIs answer for an address is reused (SPEC S5: "a few seconds").
const whoIsTTL = 5 * time.Second

// statusTTL is how long tailscaled's status (TUN mode, this node's names and addresses) is reused.
const statusTTL = 30 * time.Second

// maxWhoIsCache bounds the WhoIs cache; past it the cache starts over.
const maxWhoIsCache = 4096

type whoIsEntry struct {
	resp    *apitype.WhoIsResponse
	err     error // nil or local.ErrPeerNotFound: other errors are not cached
	expires time.Time
	// capable: resp carries the capability access.CapabilityName (SPEC G1), whose well-formed
	// values grant what grant allows; read once, when the answer is cached (grants.go).
	capable bool
	grant   *access.Grant
}

// refuseSelf answers a request from this node's own Tailscale address (403 self).
func refuseSelf() *proxy.Refusal {
	return proxy.Refuse(http.StatusForbidden, "self",
		"a request from this machine itself through its own Tailscale address proves nothing about its user; open the console on this machine directly")
}

// VerifyCaller judges r under SPEC S5 and G1 and returns the verified caller: a tailnet user's
// login, as tailscaled's WhoIs names it, and the Tailscale address Serve named, when that user
// may open the console consoleID. Every other outcome is a refusal — 401 unverified, 401
// tcp-forwardable, 401 identity-mismatch, 403 funnel, 403 tagged-node, 403 self, 403
// not-granted — and so is any error, a LocalAPI that does not answer included: it never returns
// a caller it did not verify, nor a login that looks like device:…, nor a caller for a console
// it may not open. A 403 not-granted comes with the caller verified (proxy.CallerVerifier: for
// the access log, never forwarded). 403 not-granted says nothing of whether consoleID exists; an empty consoleID
// is never granted (the index asks VerifyViewer).
//
// The order: the connection's own facts (S5a, S5b; judged once per connection), the forward
// watch (S5e), Funnel (S5c), X-Forwarded-For (S5c), this node's own address, WhoIs (S5c),
// Tailscale-User-Login (S5d), then the caller's grant (G1).
func (v *Verifier) VerifyCaller(r *http.Request, consoleID string) (proxy.Caller, *proxy.Refusal) {
	who, e, ref := v.verify(r)
	if ref != nil {
		return proxy.Caller{IP: who.IP}, ref // an address tailscaled vouched for, never a login
	}
	if !v.grantFor(&e).Allows(consoleID) {
		return who, notGranted() // identified, then refused: the door records whom (G3)
	}
	return who, nil
}

// VerifyViewer judges r as VerifyCaller does, for a page that is about consoles rather than one
// of them (the index): the verified caller and the Grant of what it may open (never nil).
func (v *Verifier) VerifyViewer(r *http.Request) (proxy.Caller, *access.Grant, *proxy.Refusal) {
	who, e, ref := v.verify(r)
	if ref != nil {
		return proxy.Caller{}, nil, ref
	}
	return who, v.grantFor(&e), nil
}

// VerifyFresh judges r as VerifyCaller judges it, S5 in full, with a WhoIs asked of tailscaled
// for this request alone, never a cached answer: for a request that changes something (the
// owner's POSTs, SPEC U4), where a login that tailscaled stopped naming a moment ago must not act.
// It grants nothing; what the caller may do is its caller's to judge.
func (v *Verifier) VerifyFresh(r *http.Request) (proxy.Caller, *proxy.Refusal) {
	who, _, ref := v.verifyWith(r, true)
	return who, ref
}

// verify is S5 (see VerifyCaller) and the caller's cached WhoIs answer.
func (v *Verifier) verify(r *http.Request) (proxy.Caller, whoIsEntry, *proxy.Refusal) {
	return v.verifyWith(r, false)
}

// verifyWith is verify; fresh asks tailscaled's WhoIs for this request, whatever is cached.
func (v *Verifier) verifyWith(r *http.Request, fresh bool) (proxy.Caller, whoIsEntry, *proxy.Refusal) {
	ctx := r.Context()
	facts := factsOf(r)
	if facts == nil {
		return proxy.Caller{}, whoIsEntry{}, unverified("the connection was not judged")
	}
	if ref := v.judgeConnOnce(ctx, facts); ref != nil {
		return proxy.Caller{}, whoIsEntry{}, ref
	}
	// S5e: a door that tailscaled can carry a peer's raw bytes to proves nothing by its uid.
	if ref := v.forwards.judgeConn(ctx, facts.door, facts.epoch); ref != nil {
		return proxy.Caller{}, whoIsEntry{}, ref
	}

	// S5c: Funnel traffic is never a tailnet user.
	if contract.HasHeaderFold(r.Header, "Tailscale-Funnel-Request") {
		return proxy.Caller{}, whoIsEntry{}, proxy.Refuse(http.StatusForbidden, "funnel", "requests from the public internet (Funnel) are refused")
	}
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) != 1 || strings.Contains(xff[0], ",") {
		return proxy.Caller{}, whoIsEntry{}, unverified("the request did not come through Tailscale Serve (want exactly one X-Forwarded-For)")
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(xff[0]))
	if err != nil || !tsaddr.IsTailscaleIP(ip.Unmap()) {
		return proxy.Caller{}, whoIsEntry{}, unverified("X-Forwarded-For is not a Tailscale address")
	}
	ip = ip.Unmap()
	// This node's own address: a process on this very machine, of any user, that connected to
	// the node's Tailscale IP and so went through Serve. WhoIs names the node's owner for it, but
	// nothing says that process is the owner.
	st, ref := v.tailscaleStatus(ctx)
	if ref != nil {
		return proxy.Caller{}, whoIsEntry{}, ref
	}
	if slices.Contains(st.TailscaleIPs, ip) || (st.Self != nil && slices.Contains(st.Self.TailscaleIPs, ip)) {
		return proxy.Caller{}, whoIsEntry{}, refuseSelf()
	}
	var e whoIsEntry
	if fresh {
		e, ref = v.whoIsFresh(ctx, ip)
	} else {
		e, ref = v.whoIs(ctx, ip)
	}
	if ref != nil {
		return proxy.Caller{}, whoIsEntry{}, ref
	}
	who := e.resp
	if who.Node != nil && st.Self != nil && who.Node.StableID != "" && who.Node.StableID == st.Self.ID {
		return proxy.Caller{}, whoIsEntry{}, refuseSelf()
	}
	// From here on tailscaled has vouched for the address (WhoIs found its node): a refusal
	// carries it, with no login, so that its log line names whom the door saw (SPEC O8: on the
	// unix-socket door the connection itself has no address).
	seen := proxy.Caller{IP: ip}
	if who.Node != nil && who.Node.IsTagged() {
		return seen, whoIsEntry{}, proxy.Refuse(http.StatusForbidden, "tagged-node", "tagged nodes are not people; only a user's device is let in")
	}
	if who.Node == nil || who.UserProfile == nil || who.UserProfile.LoginName == "" {
		return proxy.Caller{}, whoIsEntry{}, unverified("tailscaled did not name a user for the caller")
	}
	login := who.UserProfile.LoginName
	if strings.HasPrefix(strings.ToLower(login), "device:") {
		return proxy.Caller{}, whoIsEntry{}, unverified("a tailnet login never looks like a paired device")
	}
	// S5d: what Serve told us must agree with what WhoIs says.
	if sent := r.Header.Values("Tailscale-User-Login"); len(sent) > 0 {
		if len(sent) != 1 {
			return seen, whoIsEntry{}, proxy.Refuse(http.StatusUnauthorized, "identity-mismatch", "more than one Tailscale-User-Login")
		}
		decoded, err := new(mime.WordDecoder).DecodeHeader(sent[0])
		if err != nil || decoded != login {
			return seen, whoIsEntry{}, proxy.Refuse(http.StatusUnauthorized, "identity-mismatch", "Tailscale-User-Login does not agree with tailscaled's WhoIs")
		}
	}
	return proxy.Caller{Login: login, IP: ip}, e, nil
}

// whoIs is the cached WhoIs answer for ip, asked of tailscaled when there is none fresh.
func (v *Verifier) whoIs(ctx context.Context, ip netip.Addr) (whoIsEntry, *proxy.Refusal) {
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
			e.capable, e.grant = v.readCapability(resp) // once per answer (G1), not per request
			v.mu.Lock()
			if len(v.whois) >= maxWhoIsCache {
				v.whois = make(map[netip.Addr]whoIsEntry)
			}
			v.whois[ip] = e
			v.mu.Unlock()
			return e, nil
		})
		if res.Err != nil {
			return whoIsEntry{}, v.apiDown(res.Err)
		}
		e = res.Val
	}
	if e.err != nil || e.resp == nil {
		return whoIsEntry{}, unverified("tailscaled does not know the caller's address")
	}
	return e, nil
}

// whoIsFresh asks tailscaled's WhoIs for ip now, shares its answer with no other request and
// reads no cache; the answer is cached for the next ordinary request.
func (v *Verifier) whoIsFresh(ctx context.Context, ip netip.Addr) (whoIsEntry, *proxy.Refusal) {
	now := v.now()
	wctx, cancel := context.WithTimeout(ctx, localAPITimeout)
	defer cancel()
	resp, err := v.api.WhoIs(wctx, ip.String())
	if err != nil && !errors.Is(err, local.ErrPeerNotFound) {
		return whoIsEntry{}, v.apiDown(err)
	}
	e := whoIsEntry{resp: resp, err: err, expires: now.Add(whoIsTTL)}
	e.capable, e.grant = v.readCapability(resp)
	v.mu.Lock()
	if len(v.whois) >= maxWhoIsCache {
		v.whois = make(map[netip.Addr]whoIsEntry)
	}
	v.whois[ip] = e
	v.mu.Unlock()
	if e.err != nil || e.resp == nil {
		return whoIsEntry{}, unverified("tailscaled does not know the caller's address")
	}
	return e, nil
}

// cachedWhoIs returns the cached WhoIs answer for addr while it is fresh.
func (v *Verifier) cachedWhoIs(ip netip.Addr) (whoIsEntry, bool) {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.whois[ip]
	return e, ok && !now.After(e.expires)
}

// tailscaleStatus returns tailscaled's status, cached for statusTTL.
func (v *Verifier) tailscaleStatus(ctx context.Context) (*ipnstate.Status, *proxy.Refusal) {
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

func (v *Verifier) cachedStatus() (*ipnstate.Status, bool) {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.status, v.status != nil && now.Sub(v.statAt) < statusTTL
}
