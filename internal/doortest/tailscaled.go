package doortest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
	"tailscale.com/types/key"
	"tailscale.com/types/views"

	"github.com/phase-console/fleet/internal/peercred"
)

// FakeTailscaled is tailscaled's LocalAPI as far as fleet asks it: WhoIs, prefs, the Serve
// config and status, served over a unix socket (ServeLocalAPI) so that the real
// tailscale.com/client/local code runs. Change its fields under Set.
type FakeTailscaled struct {
	mu       sync.Mutex
	whoisLog []string // every WhoIs addr asked, in order

	Peers  map[string]FakePeer    // WhoIs of a bare IP
	Direct func(addr string) bool // WhoIs of an ip:port: a connection tailscaled itself forwarded (S5b)
	TUN    bool                   // status: tailscaled runs a TUN device
	Down   bool                   // every call fails, as when tailscaled is down

	// S5e: tailscaled's prefs and Serve config (default: no Tailscale SSH, no raw forward);
	// PrefsDown and ServeDown make just that call fail.
	RunSSH               bool
	Serve                *ipn.ServeConfig
	PrefsDown, ServeDown bool
	// Args, if not nil, is tailscaled's command line (else this test process's own, read
	// through the fake LocalAPI's socket as fleet reads tailscaled's); ArgsDown makes reading
	// it fail.
	Args     []string
	ArgsDown bool

	// SPEC G2: the status of peers (Status with peers). Suffix is this tailnet's MagicDNS
	// suffix (default Suffix; "" for none); StatusPeers the peers it lists.
	Suffix      string
	StatusPeers []StatusPeer

	// SPEC U4: the login that owns this node in the status (Self.UserID, and its profile in
	// the status's users, as tailscaled adds it even without peers); "" names no user.
	// OwnerTagged makes this node a tagged one (tag:server), owned by no person.
	Owner       string
	OwnerTagged bool
}

// ownerUID is the owner's UserID in the fake status: apart from the peers' (1, 2, …).
const ownerUID = tailcfg.UserID(1000)

// Suffix is the fake tailnet's MagicDNS suffix: TSName is "sup." + Suffix.
const Suffix = "tail1234.ts.net"

// A StatusPeer is a peer as tailscaled's status lists it (SPEC G2).
type StatusPeer struct {
	DNSName string // with its trailing dot, as tailscaled writes it: "box.tail1234.ts.net."
	Login   string // its owner; for a tagged node, "tagged-devices"
	Tags    []string
	Online  bool
	IP      string
}

// The machines of the tailnet's status that the G2 tests use (PeerMachines).
const (
	AliceBox  = "box." + Suffix  // another machine of Alice's
	AliceOld  = "old." + Suffix  // Alice's, offline
	BobBox    = "bobs." + Suffix // a colleague's machine under the same suffix
	TaggedBox = "ci." + Suffix   // a tagged node
)

// PeerMachines is a status of peers: AliceBox, AliceOld (offline), BobBox and TaggedBox.
func PeerMachines() []StatusPeer {
	return []StatusPeer{
		{DNSName: AliceBox + ".", Login: Alice, Online: true, IP: "100.101.102.110"},
		{DNSName: AliceOld + ".", Login: Alice, Online: false, IP: "100.101.102.111"},
		{DNSName: BobBox + ".", Login: Bob, Online: true, IP: "100.101.102.112"},
		{DNSName: TaggedBox + ".", Login: "tagged-devices", Tags: []string{"tag:ci"}, Online: true, IP: TaggedIP},
	}
}

// A FakePeer is a tailnet node as WhoIs describes it.
type FakePeer struct {
	Login  string
	Tagged bool               // a tagged node (tag:ci), owned by no person
	Caps   tailcfg.PeerCapMap // if not nil, the peer's CapMap in WhoIs (app capability grants, SPEC G1)
}

// NewFakeTailscaled knows Alice, Bob and Jürgen, and a tagged node at TaggedIP.
func NewFakeTailscaled() *FakeTailscaled {
	return &FakeTailscaled{Suffix: Suffix, Peers: map[string]FakePeer{
		AliceIP:  {Login: Alice},
		BobIP:    {Login: Bob},
		JurgenIP: {Login: Jurgen},
		TaggedIP: {Login: "tagged-devices", Tagged: true},
	}}
}

// Set changes f under its lock.
func (f *FakeTailscaled) Set(fn func(f *FakeTailscaled)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// WhoisAsked is every addr WhoIs was asked about so far, in order.
func (f *FakeTailscaled) WhoisAsked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.whoisLog)
}

// CommandLine is a TailscaledArgs for a door on f whose LocalAPI socket is sock.
func (f *FakeTailscaled) CommandLine(sock string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		f.mu.Lock()
		args, down := f.Args, f.ArgsDown
		f.mu.Unlock()
		switch {
		case down:
			return nil, errors.New("open /proc/4242/cmdline: permission denied")
		case args != nil:
			return args, nil
		}
		return peercred.SocketServerArgs(ctx, sock)
	}
}

func (f *FakeTailscaled) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Down {
		http.Error(w, "tailscaled is down", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/localapi/v0/whois":
		addr := r.URL.Query().Get("addr")
		f.whoisLog = append(f.whoisLog, addr)
		if _, err := netip.ParseAddrPort(addr); err == nil {
			if f.Direct != nil && f.Direct(addr) {
				json.NewEncoder(w).Encode(&apitype.WhoIsResponse{
					Node:        &tailcfg.Node{ID: 9, Name: "direct."},
					UserProfile: &tailcfg.UserProfile{LoginName: Alice},
				})
				return
			}
			http.Error(w, "no match for IP:port", http.StatusNotFound)
			return
		}
		p, ok := f.Peers[addr]
		if !ok {
			http.Error(w, "no match for IP:port", http.StatusNotFound)
			return
		}
		n := &tailcfg.Node{ID: 1, Name: "peer."}
		if p.Tagged {
			n.Tags = []string{"tag:ci"}
		}
		json.NewEncoder(w).Encode(&apitype.WhoIsResponse{Node: n, UserProfile: &tailcfg.UserProfile{LoginName: p.Login}, CapMap: p.Caps})
	case "/localapi/v0/prefs":
		if f.PrefsDown {
			http.Error(w, "prefs unavailable", http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode(&ipn.Prefs{RunSSH: f.RunSSH})
	case "/localapi/v0/serve-config":
		if f.ServeDown {
			http.Error(w, "serve config unavailable", http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode(f.Serve)
	case "/localapi/v0/status":
		st := &ipnstate.Status{
			Version:      "1.102.5",
			TUN:          f.TUN,
			BackendState: "Running",
			TailscaleIPs: []netip.Addr{netip.MustParseAddr(SelfIP)},
			Self:         &ipnstate.PeerStatus{DNSName: TSName + ".", HostName: "sup"},
		}
		if f.Suffix != "" {
			st.CurrentTailnet = &ipnstate.TailnetStatus{Name: "example.com", MagicDNSSuffix: f.Suffix, MagicDNSEnabled: true}
		}
		if f.Owner != "" {
			st.Self.UserID = ownerUID
			st.User = map[tailcfg.UserID]tailcfg.UserProfile{ownerUID: {ID: ownerUID, LoginName: f.Owner}}
		}
		if f.OwnerTagged {
			tags := views.SliceOf([]string{"tag:server"})
			st.Self.Tags = &tags
		}
		if r.URL.Query().Get("peers") != "false" {
			st.Peer = map[key.NodePublic]*ipnstate.PeerStatus{}
			if st.User == nil {
				st.User = map[tailcfg.UserID]tailcfg.UserProfile{}
			}
			users := map[string]tailcfg.UserID{}
			for i, p := range f.StatusPeers {
				uid, ok := users[p.Login]
				if !ok {
					uid = tailcfg.UserID(len(users) + 1)
					users[p.Login] = uid
					st.User[uid] = tailcfg.UserProfile{ID: uid, LoginName: p.Login}
				}
				ps := &ipnstate.PeerStatus{ID: tailcfg.StableNodeID(fmt.Sprint("n", i)), DNSName: p.DNSName,
					HostName: strings.Split(p.DNSName, ".")[0], UserID: uid, Online: p.Online}
				if p.IP != "" {
					ps.TailscaleIPs = []netip.Addr{netip.MustParseAddr(p.IP)}
				}
				if p.Tags != nil {
					tags := views.SliceOf(p.Tags)
					ps.Tags = &tags
				}
				st.Peer[key.NewNode().Public()] = ps
			}
		}
		json.NewEncoder(w).Encode(st)
	default:
		http.NotFound(w, r)
	}
}

// ServeLocalAPI serves f on a unix socket until t ends and returns a real LocalAPI client for it.
func ServeLocalAPI(t testing.TB, f *FakeTailscaled) *local.Client {
	t.Helper()
	return ServeLocalAPIHandler(t, f)
}

// ServeLocalAPIHandler serves h as tailscaled's LocalAPI on a unix socket, in a short folder of
// its own (a socket's path is limited to about 100 bytes), until t ends, and returns a real
// LocalAPI client for it.
func ServeLocalAPIHandler(t testing.TB, h http.Handler) *local.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleet-lapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tailscaled.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &local.Client{Socket: sock, UseSocketOnly: true}
}
