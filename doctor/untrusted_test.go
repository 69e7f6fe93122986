package doctor

// What the doctor does with what it cannot trust: hostile Serve configs from the LocalAPI, Serve
// targets that reach something other than fleet, and where the bearer may go.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/otheruser"
	"github.com/phase-console/fleet/internal/state"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
)

// hostileAPI is a LocalAPI that answers with whatever the test puts in it, nil included.
type hostileAPI struct {
	status *ipnstate.Status
	serve  *ipn.ServeConfig
	prefs  *ipn.Prefs
}

func (f *hostileAPI) GetPrefs(context.Context) (*ipn.Prefs, error) { return f.prefs, nil }

func (f *hostileAPI) StatusWithoutPeers(context.Context) (*ipnstate.Status, error) {
	return f.status, nil
}
func (f *hostileAPI) GetServeConfig(context.Context) (*ipn.ServeConfig, error) { return f.serve, nil }

func hostileStatus() *ipnstate.Status {
	return &ipnstate.Status{Version: "1.102.5", BackendState: "Running", TUN: true, Self: &ipnstate.PeerStatus{DNSName: supName + "."}}
}

// A Serve target of localhost:<port> is no healthy set-up: fleet binds 127.0.0.1:<port> only, so
// [::1]:<port> is free for any local user to take (shown here: otheruser.UID holds it), and
// tailscaled resolves localhost at every dial (ipn.ExpandProxyTargetValue expands only a bare port
// to 127.0.0.1). Where ::1 comes first, or while 127.0.0.1 refuses (fleet restarting), tailnet
// users' requests would go to that user.
func TestServeTargetLocalhost_S2(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	if os.Getuid() == 0 {
		h := otherUserStart(t, "listen [::1]:"+strconv.Itoa(port))
		t.Log("uid 4242 holds " + h.Expect(t, "PORT "))
	}
	for _, target := range []string{"localhost:" + strconv.Itoa(port), "http://localhost:" + strconv.Itoa(port)} {
		f := healthyTailscaled(port)
		f.serve = serveConfig(443, false, "/", target)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: f})
		if c, _ := find(checks, "tailscale serve"); c.Status == OK {
			t.Errorf("%s: %q; want WARN/FAIL with a fix naming 127.0.0.1", target, c.String())
		}
	}
}

// Serve configs as hostile as the LocalAPI could send: nil everywhere, malformed host:ports,
// targets that only look like the supervisor, prefs missing or with SSH on. The doctor never
// panics, calls no look-alike healthy, and never shows the token.
func TestHostileServeConfigs(t *testing.T) {
	home := newHome(t) // a token but no supervisor.addr: every check runs, nothing is probed
	tok, err := state.LoadOrCreateToken(state.FleetDir(home))
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(home, 0o700)
	const port = contract.DefaultPort
	p := strconv.Itoa(port)
	lookAlikes := []string{
		"", "unix:", "unix:/nonexistent.sock", "http://", "http://:" + p, "http://127.0.0.1:" + p + "@evil.example",
		"http://evil.example:" + p, "http://127.0.0.1:0" + p, "http://127.0.0.2:" + p, "http://[::1]:" + p,
		"http://0x7f.1:" + p, "http://2130706433:" + p, "http://127.1:" + p, "ftp://127.0.0.1:" + p,
		"https://127.0.0.1:" + p, "https+insecure://127.0.0.1:" + p, "%zz", "http://127.0.0.1:" + p + "%2f",
		"http://127.0.0.1:" + strconv.Itoa(port+1), "127.0.0.1:" + p + ":" + p, "http://localhost.evil:" + p,
		"tcp://127.0.0.1:" + p, "http://127.0.0.1 :" + p, "\x00", strings.Repeat("9", 100),
	}
	var prefs *ipn.Prefs // nil, SSH off and SSH on in turn below
	hps := []ipn.HostPort{"", "no-port", ":443", "[::1", "a:b:c", supName + ":0", supName + ":99999", supName + ":443"}
	run := func(name string, sc *ipn.ServeConfig) []Check {
		t.Helper()
		var checks []Check
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s: panic %v", name, r)
				}
			}()
			checks = Run(context.Background(), Config{StateHome: home, Port: port, LocalAPI: &hostileAPI{status: hostileStatus(), serve: sc, prefs: prefs}})
		}()
		if strings.Contains(report(checks), tok) {
			t.Fatalf("%s: the report shows the token", name)
		}
		return checks
	}
	run("nil config", nil)
	run("nil maps", &ipn.ServeConfig{TCP: map[uint16]*ipn.TCPPortHandler{443: nil}, Web: map[ipn.HostPort]*ipn.WebServerConfig{supName + ":443": nil},
		Services: map[tailcfg.ServiceName]*ipn.ServiceConfig{"svc:x": nil, "svc:y": {}}, Foreground: map[string]*ipn.ServeConfig{"a": nil, "b": {}},
		AllowFunnel: map[ipn.HostPort]bool{"": true, "x": true}})
	for _, target := range lookAlikes {
		for _, hp := range hps {
			sc := &ipn.ServeConfig{
				TCP: map[uint16]*ipn.TCPPortHandler{443: {HTTPS: true}, 80: {TCPForward: target}},
				Web: map[ipn.HostPort]*ipn.WebServerConfig{hp: {Handlers: map[string]*ipn.HTTPHandler{"/": {Proxy: target}, "": nil, "/x": {Path: target}}}},
			}
			checks := run(fmt.Sprintf("%q at %q", target, hp), sc)
			if c, _ := find(checks, "tailscale serve"); c.Status == OK {
				t.Errorf("target %q at %q: %q, want not OK", target, hp, c.String())
			}
		}
	}
	// The control: the real target at the same place is OK.
	if c, _ := find(run("control", serveConfig(443, false, "/", "http://127.0.0.1:"+p)), "tailscale serve"); c.Status != OK {
		t.Fatalf("control: %q", c.String())
	}
	// A fuzz-ish pass: random shapes built from the pieces above.
	rnd := rand.New(rand.NewSource(7420))
	pick := func(xs []string) string { return xs[rnd.Intn(len(xs))] }
	targets := append(lookAlikes, p, "127.0.0.1:"+p, "http://127.0.0.1:"+p, "http://127.0.0.1:"+p+"/x")
	for i := 0; i < 500; i++ {
		sc := &ipn.ServeConfig{TCP: map[uint16]*ipn.TCPPortHandler{}, Web: map[ipn.HostPort]*ipn.WebServerConfig{}, AllowFunnel: map[ipn.HostPort]bool{}}
		for j := rnd.Intn(4); j > 0; j-- {
			port := uint16(rnd.Intn(3) * 443)
			sc.TCP[port] = &ipn.TCPPortHandler{HTTP: rnd.Intn(2) == 0, HTTPS: rnd.Intn(2) == 0, TCPForward: pick(append(targets, "", ""))}
			hp := hps[rnd.Intn(len(hps))]
			h := map[string]*ipn.HTTPHandler{pick([]string{"/", "", "/c/", "//"}): {Proxy: pick(targets)}}
			sc.Web[hp] = &ipn.WebServerConfig{Handlers: h}
			sc.AllowFunnel[hp] = rnd.Intn(2) == 0
		}
		if rnd.Intn(3) == 0 {
			sc.Foreground = map[string]*ipn.ServeConfig{"fg": sc.Clone(), "nil": nil}
		}
		prefs = []*ipn.Prefs{nil, {}, {RunSSH: true}}[rnd.Intn(3)]
		run(fmt.Sprintf("random %d", i), sc)
	}
}

// The bearer goes only to a server of this user: not to another uid holding the address that
// supervisor.addr names ([::1]:port beside a v4-only fleet), and not through a redirect from a
// same-user server to another uid's port.
func TestBearerOnlyToOwnUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run another uid")
	}
	home := newHome(t)
	if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(home, 0o700)
	addrFile := filepath.Join(state.FleetDir(home), state.AddrFile)

	t.Run("supervisor.addr held by another uid", func(t *testing.T) {
		h := otherUserStart(t, "squat [::1]:0")
		port := strings.TrimSpace(strings.TrimPrefix(h.Expect(t, "PORT "), "PORT "))
		state.WriteFileAtomic(addrFile, []byte("[::1]:"+port+"\n"))
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		if c, _ := find(checks, "supervisor"); c.Status != Fail {
			t.Errorf("supervisor: %q, want FAIL", c.String())
		}
		h.Say(t, "done")
		if l := h.Expect(t, "AUTH"); strings.Contains(l, "Bearer") {
			t.Errorf("uid %d received the bearer: %q", otheruser.UID, l)
		}
	})
	t.Run("redirect to another uid", func(t *testing.T) {
		h := otherUserStart(t, "squat 127.0.0.1:0")
		port := strings.TrimSpace(strings.TrimPrefix(h.Expect(t, "PORT "), "PORT "))
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:"+port+r.URL.Path, http.StatusTemporaryRedirect)
		})}
		go srv.Serve(ln)
		defer srv.Close()
		state.WriteFileAtomic(addrFile, []byte(ln.Addr().String()+"\n"))
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		if c, _ := find(checks, "supervisor"); c.Status == OK {
			t.Errorf("supervisor: %q", c.String())
		}
		h.Say(t, "done")
		if l := h.Expect(t, "AUTH"); strings.Contains(l, "Bearer") {
			t.Errorf("uid %d received the bearer through a redirect: %q", otheruser.UID, l)
		}
	})
}

// ---- helpers ------------------------------------------------------------------------------------

// otherUserStart starts TestOtherUserHelperProcess as otheruser.UID.
func otherUserStart(t *testing.T, mode string) *otheruser.Helper {
	t.Helper()
	return otheruser.Start(t, "^TestOtherUserHelperProcess$", "FLEET_DOCTOR_OTHERUSER", mode, nil)
}

// TestOtherUserHelperProcess is the other-uid side of the tests above.
//
//	listen ADDR: listen on ADDR, print PORT <port>, hold until stdin ends
//	squat ADDR:  listen on ADDR, print PORT <port>; record the Authorization of every request; on a
//	             line on stdin print "AUTH <what it saw>"
func TestOtherUserHelperProcess(t *testing.T) {
	mode := os.Getenv("FLEET_DOCTOR_OTHERUSER")
	if mode == "" {
		return
	}
	f := strings.Fields(mode)
	ln, err := net.Listen("tcp", f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	fmt.Printf("PORT %d\n", ln.Addr().(*net.TCPAddr).Port)
	seen := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				seen <- req.Header.Get("Authorization")
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Fleet-Reason: x\r\nContent-Length: 15\r\nConnection: close\r\n\r\n{\"consoles\":[]}")
			}()
		}
	}()
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')
	if f[0] == "squat" {
		var got []string
	drain:
		for {
			select {
			case s := <-seen:
				got = append(got, s)
			default:
				break drain
			}
		}
		fmt.Printf("AUTH %q\n", got)
	}
	io.Copy(io.Discard, in)
	os.Exit(0)
}
