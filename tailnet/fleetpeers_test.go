package tailnet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
	"tailscale.com/types/key"
	"tailscale.com/types/views"
)

// countingStatus is a PeerStatusAPI that counts its calls and answers st (or err).
type countingStatus struct {
	mu    sync.Mutex
	calls int
	st    *ipnstate.Status
	err   error
}

func (c *countingStatus) Status(context.Context) (*ipnstate.Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.st, c.err
}

func statusOf(suffix string, peers ...*ipnstate.PeerStatus) *ipnstate.Status {
	st := &ipnstate.Status{
		Self: &ipnstate.PeerStatus{DNSName: "Sup." + suffix + "."},
		Peer: map[key.NodePublic]*ipnstate.PeerStatus{},
		User: map[tailcfg.UserID]tailcfg.UserProfile{1: {LoginName: "alice@example.com"}, 2: {LoginName: "tagged-devices"}},
	}
	if suffix != "" {
		st.CurrentTailnet = &ipnstate.TailnetStatus{MagicDNSSuffix: suffix}
	}
	for _, p := range peers {
		st.Peer[key.NewNode().Public()] = p
	}
	return st
}

func tagged(tags ...string) *views.Slice[string] { v := views.SliceOf(tags); return &v }

// TestReadPeers_G2: only names that are one label under this machine's own suffix are peers,
// lower-cased; their owner is the status's login for their UserID; no suffix lists nothing.
func TestReadPeers_G2(t *testing.T) {
	st := statusOf("tail1234.ts.net",
		&ipnstate.PeerStatus{DNSName: "Box.tail1234.ts.net.", UserID: 1, Online: true},
		&ipnstate.PeerStatus{DNSName: "ci.tail1234.ts.net.", UserID: 2, Tags: tagged("tag:ci"), Online: true},
		&ipnstate.PeerStatus{DNSName: "other.tail9999.ts.net.", UserID: 1},
		&ipnstate.PeerStatus{DNSName: "a.b.tail1234.ts.net.", UserID: 1},
		&ipnstate.PeerStatus{DNSName: "xtail1234.ts.net.", UserID: 1},
		&ipnstate.PeerStatus{DNSName: "shared.tail1234.ts.net.", UserID: 1, ShareeNode: true},
		&ipnstate.PeerStatus{DNSName: "twin.tail1234.ts.net.", UserID: 1},
		&ipnstate.PeerStatus{DNSName: "TWIN.tail1234.ts.net.", UserID: 2},
		&ipnstate.PeerStatus{DNSName: "", UserID: 1},
	)
	l, err := ReadPeers(st)
	if err != nil {
		t.Fatal(err)
	}
	if l.Self != "sup.tail1234.ts.net" || l.Suffix != "tail1234.ts.net" {
		t.Errorf("self %q suffix %q", l.Self, l.Suffix)
	}
	if len(l.Peers) != 2 || l.Peers[0].Name != "box.tail1234.ts.net" || l.Peers[1].Name != "ci.tail1234.ts.net" {
		t.Fatalf("peers %+v, want box and ci only", l.Peers)
	}
	if p := l.Peers[0]; p.Host != "box" || p.Owner != "alice@example.com" || p.Tagged() || !p.Online || p.Origin() != "https://box.tail1234.ts.net" {
		t.Errorf("box: %+v", p)
	}
	if p := l.Peers[1]; !p.Tagged() {
		t.Errorf("ci: %+v", p)
	}
	if _, ok := l.Find("twin.tail1234.ts.net"); ok {
		t.Error("two peers of one name: one was listed")
	}
	for _, suffix := range []string{"", "."} {
		if _, err := ReadPeers(statusOf(suffix, &ipnstate.PeerStatus{DNSName: "box.", UserID: 1})); !errors.Is(err, ErrNoSuffix) {
			t.Errorf("suffix %q: %v, want ErrNoSuffix", suffix, err)
		}
	}
}

// TestPeerOriginHost_G2: exactly https:// and a host name, any case; no port (443 neither), no
// trailing dot, no path or userinfo.
func TestPeerOriginHost_G2(t *testing.T) {
	for origin, want := range map[string]string{
		"https://box.tail1234.ts.net": "box.tail1234.ts.net",
		"HTTPS://BOX.Tail1234.ts.net": "box.tail1234.ts.net",
	} {
		if got, ok := PeerOriginHost(origin); !ok || got != want {
			t.Errorf("%q: %q %v, want %q", origin, got, ok, want)
		}
	}
	for _, origin := range []string{"http://box.tail1234.ts.net", "https://box.tail1234.ts.net:443", "https://box.tail1234.ts.net:8443",
		"https://box.tail1234.ts.net.", "https://box.tail1234.ts.net/", "https://a@box.tail1234.ts.net", "null", "", "https://",
		"https://box..ts.net", "https://-box.ts.net", "https://bo x.ts.net", "https://[::1]"} {
		if got, ok := PeerOriginHost(origin); ok {
			t.Errorf("%q accepted as %q", origin, got)
		}
	}
}

// TestPeersCached_G2: tailscaled's status of peers is asked once per peersTTL, however many ask
// (fake clock); an error is not kept, and lists no peer.
func TestPeersCached_G2(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	api := &countingStatus{st: statusOf("tail1234.ts.net", &ipnstate.PeerStatus{DNSName: "box.tail1234.ts.net.", UserID: 1})}
	v := &Verifier{now: clock.now, peerAPI: api}
	for range 50 {
		if _, err := v.Peers(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if api.calls != 1 {
		t.Fatalf("%d status calls for 50 asks within the cache's life, want 1", api.calls)
	}
	clock.advance(peersTTL)
	if _, err := v.Peers(context.Background()); err != nil || api.calls != 2 {
		t.Fatalf("after peersTTL: %v, %d calls", err, api.calls)
	}
	api.err = errors.New("tailscaled is down")
	clock.advance(peersTTL)
	if l, err := v.Peers(context.Background()); err == nil || l != nil {
		t.Fatalf("tailscaled down: %v %v", l, err)
	}
	api.err = nil
	if _, err := v.Peers(context.Background()); err != nil || api.calls != 4 {
		t.Fatalf("an error was kept: %v, %d calls", err, api.calls)
	}
	if _, err := (&Verifier{now: clock.now}).Peers(context.Background()); err == nil {
		t.Fatal("a Verifier with no way to list peers listed some")
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestPeerOrigins_G2: the index's sections are the caller's own online peers and the listed
// tagged ones; never an offline peer, a colleague's, or an unlisted tagged one.
func TestPeerOrigins_G2(t *testing.T) {
	l, err := ReadPeers(statusOf("tail1234.ts.net",
		&ipnstate.PeerStatus{DNSName: "box.tail1234.ts.net.", UserID: 1, Online: true},
		&ipnstate.PeerStatus{DNSName: "old.tail1234.ts.net.", UserID: 1},
		&ipnstate.PeerStatus{DNSName: "ci.tail1234.ts.net.", UserID: 2, Tags: tagged("tag:ci"), Online: true},
		&ipnstate.PeerStatus{DNSName: "web.tail1234.ts.net.", UserID: 2, Tags: tagged("tag:web"), Online: true},
		&ipnstate.PeerStatus{DNSName: "bobs.tail1234.ts.net.", UserID: 3, Online: true},
	))
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifier{}
	v.SetFleetPeers([]string{"CI"})
	var got []string
	for _, p := range v.PeerOrigins(l, "alice@example.com") {
		got = append(got, p.Host)
	}
	if len(got) != 2 || got[0] != "box" || got[1] != "ci" {
		t.Errorf("sections %v, want [box ci]", got)
	}
	if ps := v.PeerOrigins(l, ""); len(ps) != 1 || ps[0].Host != "ci" {
		t.Errorf("no login: %v", ps)
	}
}
