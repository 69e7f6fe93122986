package tailnet

// This file is the discovery of the tailnet's other machines and the one cross-origin answer
// that follows from it (SPEC G2): tailscaled's status of peers, read as this machine's MagicDNS
// suffix and each peer's MagicDNS name, owner and tags, cached briefly; and whether an Origin is
// that of another machine of the caller's own.
//
// The Origin must be exactly "https://" + a peer's MagicDNS name without its trailing dot: any
// ASCII case, no port at all (a browser never writes the default port in an Origin, so ":443"
// comes only from a client that needs no CORS answer, and is refused like any other port), no
// trailing dot, no path, no userinfo.

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"tailscale.com/ipn/ipnstate"
	"tailscale.com/net/tsaddr"

	"github.com/phase-console/fleet/contract"
)

// peersTTL is how long tailscaled's status of peers is reused: a flood of index fetches asks
// tailscaled once per peersTTL.
const peersTTL = 5 * time.Second

// PeerStatusAPI is the LocalAPI call that lists the tailnet's peers. *local.Client is one.
type PeerStatusAPI interface {
	Status(ctx context.Context) (*ipnstate.Status, error)
}

// A Peer is another machine of the tailnet as tailscaled's status describes it.
type Peer struct {
	Name   string   // its MagicDNS name, lower case, without the trailing dot: "build.tail1234.ts.net"
	Host   string   // the name's first label: "build"
	Owner  string   // the owner's login (Status.User); "" when tailscaled names none
	Tags   []string // its ACL tags; a tagged node is owned by no person
	Online bool
	IPs    []netip.Addr
}

// Tagged reports whether p is a tagged node.
func (p Peer) Tagged() bool { return len(p.Tags) > 0 }

// Origin is the origin of p's own fleet, as a browser writes it: "https://" + Name.
func (p Peer) Origin() string { return "https://" + p.Name }

// PeerList is this machine's view of its tailnet: its own MagicDNS name and suffix, and the
// peers whose MagicDNS names lie under that suffix, sorted by name.
type PeerList struct {
	Self       string // this machine's MagicDNS name, lower case, no trailing dot
	SelfTagged bool
	Suffix     string // the tailnet's MagicDNS suffix, lower case: "tail1234.ts.net"
	Peers      []Peer
}

// Find returns the peer whose MagicDNS name is name (lower case, no trailing dot).
func (l *PeerList) Find(name string) (Peer, bool) {
	i, ok := slices.BinarySearchFunc(l.Peers, name, func(p Peer, n string) int { return strings.Compare(p.Name, n) })
	if !ok {
		return Peer{}, false
	}
	return l.Peers[i], true
}

// ErrNoSuffix is ReadPeers's error when tailscaled names no MagicDNS suffix for this tailnet:
// without one no peer's name can be told from a look-alike, so none is listed (fail closed).
var ErrNoSuffix = errors.New("tailscaled names no MagicDNS suffix for this tailnet")

// ReadPeers reads tailscaled's status (with peers) as a PeerList. A peer is listed only when its
// MagicDNS name is one label under this machine's own suffix; a peer that is only in the netmap
// because it may connect to this machine (a node of another tailnet shared to it) is not. An
// empty or unknown suffix is ErrNoSuffix.
func ReadPeers(st *ipnstate.Status) (*PeerList, error) {
	if st == nil {
		return nil, errors.New("no status")
	}
	suffix := ""
	if st.CurrentTailnet != nil {
		suffix = asciiLower(strings.Trim(st.CurrentTailnet.MagicDNSSuffix, "."))
	}
	if suffix == "" || !validName(suffix) {
		return nil, ErrNoSuffix
	}
	l := &PeerList{Suffix: suffix}
	if st.Self != nil {
		l.Self = asciiLower(strings.TrimSuffix(st.Self.DNSName, "."))
		l.SelfTagged = st.Self.Tags != nil && st.Self.Tags.Len() > 0
	}
	for _, ps := range st.Peer {
		if ps == nil || ps.ShareeNode {
			continue
		}
		name := asciiLower(strings.TrimSuffix(ps.DNSName, "."))
		host, ok := peerHost(name, suffix)
		if !ok {
			continue
		}
		p := Peer{Name: name, Host: host, Online: ps.Online, IPs: slices.Clone(ps.TailscaleIPs)}
		if ps.Tags != nil {
			p.Tags = ps.Tags.AsSlice()
		}
		if u, ok := st.User[ps.UserID]; ok {
			p.Owner = u.LoginName
		}
		l.Peers = append(l.Peers, p)
	}
	slices.SortFunc(l.Peers, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	// Two peers of one name cannot both be that name: neither is listed.
	l.Peers = dropDuplicateNames(l.Peers)
	return l, nil
}

func dropDuplicateNames(ps []Peer) []Peer {
	out := ps[:0]
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].Name == ps[i].Name {
			j++
		}
		if j == i+1 {
			out = append(out, ps[i])
		}
		i = j
	}
	return out
}

// peerHost returns the first label of name when name is exactly one DNS label followed by
// "." + suffix (both lower case).
func peerHost(name, suffix string) (string, bool) {
	host, ok := strings.CutSuffix(name, "."+suffix)
	if !ok || !validLabel(host) {
		return "", false
	}
	return host, true
}

// validLabel reports whether s is one lower-case DNS label: 1–63 of a-z, 0-9 and '-', neither
// first nor last a '-'.
func validLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// asciiLower is s with A–Z lower-cased and every other byte as it is.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// validName reports whether s is dot-separated valid labels.
func validName(s string) bool {
	for _, l := range strings.Split(s, ".") {
		if !validLabel(l) {
			return false
		}
	}
	return true
}

// peerCache is the cached PeerList (peersTTL), asked of tailscaled once at a time.
type peerCache struct {
	mu     sync.Mutex
	list   *PeerList
	at     time.Time
	flight chan struct{} // closed when the call in flight ends; nil when none is
	err    error         // the last call's error, for those that waited on it
}

// Peers returns tailscaled's status of peers as a PeerList, cached for a few seconds. Any error
// — no way to ask tailscaled for peers, a LocalAPI that does not answer, no MagicDNS suffix — is
// returned, and lists no peer.
func (v *Verifier) Peers(ctx context.Context) (*PeerList, error) {
	if v.peerAPI == nil {
		return nil, errors.New("tailnet: no LocalAPI that lists peers")
	}
	c := &v.peers
	for {
		c.mu.Lock()
		if c.list != nil && v.now().Sub(c.at) < peersTTL {
			l := c.list
			c.mu.Unlock()
			return l, nil
		}
		if wait := c.flight; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		done := make(chan struct{})
		c.flight = done
		c.mu.Unlock()

		now := v.now()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), localAPITimeout)
		st, err := v.peerAPI.Status(sctx)
		cancel()
		var l *PeerList
		if err == nil {
			l, err = ReadPeers(st)
		}
		c.mu.Lock()
		c.flight, c.err = nil, err
		if err == nil {
			c.list, c.at = l, now
		} else {
			c.list = nil
		}
		c.mu.Unlock()
		close(done)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// SetFleetPeers sets the tagged peers whose pages may read the index (the profile's
// access.fleet_peers: first labels of MagicDNS names). It takes effect for the next request.
func (v *Verifier) SetFleetPeers(hosts []string) {
	lower := make([]string, len(hosts))
	for i, h := range hosts {
		lower[i] = asciiLower(h)
	}
	v.fleetPeers.Store(&lower)
}

// listedFleetPeer reports whether host is listed in access.fleet_peers.
func (v *Verifier) listedFleetPeer(host string) bool {
	p := v.fleetPeers.Load()
	return p != nil && slices.Contains(*p, host)
}

// PeerOriginHost returns the host of an Origin of the form "https://" + host, lower-cased, when
// it is one: the scheme https in any case, then only letters, digits, '-' and '.', not ending in
// '.', and nothing else — no port, no path, no userinfo.
func PeerOriginHost(origin string) (string, bool) {
	const scheme = "https://"
	if len(origin) <= len(scheme) || !contract.EqualFoldASCII(origin[:len(scheme)], scheme) {
		return "", false
	}
	host := asciiLower(origin[len(scheme):]) // never strings.ToLower: it maps U+212A (Kelvin) to 'k'
	if !validName(host) {
		return "", false
	}
	return host, true
}

// AllowsPeerOrigin is the one exception to S12 (SPEC G2), for a request that package proxy's Door
// has found to be a GET of "/" asking for JSON with exactly one Origin that is not its own: it
// reports whether that Origin is the fleet of another machine of the caller's own — exactly
// "https://<peer>.<suffix>" (PeerOriginHost) where <peer>.<suffix> is the MagicDNS name of a peer
// in tailscaled's status under this machine's own suffix, and that peer is owned by the login
// that WhoIs names for the request's one X-Forwarded-For (not a tagged caller), or is a tagged
// peer listed in access.fleet_peers. Any error — tailscaled not answering, no suffix, an address
// WhoIs does not know — is false.
//
// It judges whose page may read the answer, not who the caller is: the answer itself is still
// the index's, which verifies the caller (S5) and may refuse. So a refusal that an allowed page
// reads is still a refusal, and a client that is not a browser gains nothing from the answer's
// Access-Control-Allow-Origin: it reads every answer anyway.
func (v *Verifier) AllowsPeerOrigin(r *http.Request) bool {
	origins := r.Header.Values("Origin")
	if len(origins) != 1 || factsOf(r) == nil {
		return false
	}
	host, ok := PeerOriginHost(origins[0])
	if !ok {
		return false
	}
	ctx := r.Context()
	l, err := v.Peers(ctx)
	if err != nil {
		return false
	}
	if _, ok := peerHost(host, l.Suffix); !ok {
		return false
	}
	p, ok := l.Find(host)
	if !ok {
		return false
	}
	if p.Tagged() {
		return v.listedFleetPeer(p.Host)
	}
	if p.Owner == "" {
		return false
	}
	login, ok := v.callerLogin(ctx, r)
	return ok && login == p.Owner
}

// callerLogin is the login that WhoIs names for r's one X-Forwarded-For, a Tailscale address of
// a node that is not tagged (the WhoIs cache's answer).
func (v *Verifier) callerLogin(ctx context.Context, r *http.Request) (string, bool) {
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) != 1 || strings.Contains(xff[0], ",") {
		return "", false
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(xff[0]))
	if err != nil || !tsaddr.IsTailscaleIP(ip.Unmap()) {
		return "", false
	}
	e, ref := v.whoIs(ctx, ip.Unmap())
	if ref != nil || e.resp.Node == nil || e.resp.Node.IsTagged() || e.resp.UserProfile == nil {
		return "", false
	}
	login := e.resp.UserProfile.LoginName
	if login == "" || strings.HasPrefix(strings.ToLower(login), "device:") {
		return "", false
	}
	return login, true
}

// PeerOrigins are the origins of the index's peer sections for a caller with login (SPEC G2): the
// caller's own online peers, and the online tagged peers listed in access.fleet_peers, sorted by
// name. This machine itself is never one.
func (v *Verifier) PeerOrigins(l *PeerList, login string) []Peer {
	var out []Peer
	for _, p := range l.Peers {
		if !p.Online || p.Name == l.Self {
			continue
		}
		if p.Tagged() && v.listedFleetPeer(p.Host) || !p.Tagged() && p.Owner != "" && p.Owner == login {
			out = append(out, p)
		}
	}
	return out
}
