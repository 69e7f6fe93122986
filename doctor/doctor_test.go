package doctor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tailscale.com/client/local"
	"tailscale.com/client/tailscale/apitype"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"

	"github.com/phase-console/fleet/contract"
	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/supervisortest"
	"github.com/phase-console/fleet/internal/testdirs"
	"github.com/phase-console/fleet/supervisor"
)

// fakeTailscaled answers the doctor's LocalAPI calls (and the supervisor's WhoIs).
type fakeTailscaled struct {
	status    *ipnstate.Status
	statusErr error
	serve     *ipn.ServeConfig
	prefs     *ipn.Prefs // nil: SSH off
	prefsErr  error
	whois     *apitype.WhoIsResponse // nil: WhoIs knows no one
}

func (f *fakeTailscaled) GetPrefs(context.Context) (*ipn.Prefs, error) {
	if f.prefsErr != nil {
		return nil, f.prefsErr
	}
	if f.prefs == nil {
		return &ipn.Prefs{WantRunning: true}, nil
	}
	return f.prefs, nil
}

func (f *fakeTailscaled) StatusWithoutPeers(context.Context) (*ipnstate.Status, error) {
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	return f.status, nil
}

func (f *fakeTailscaled) GetServeConfig(context.Context) (*ipn.ServeConfig, error) {
	if f.serve == nil {
		return &ipn.ServeConfig{}, nil
	}
	return f.serve, nil
}

func (f *fakeTailscaled) WhoIs(context.Context, string) (*apitype.WhoIsResponse, error) {
	if f.whois == nil {
		return nil, local.ErrPeerNotFound
	}
	return f.whois, nil
}

const supName = "sup.example.ts.net"

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

func healthyTailscaled(port int) *fakeTailscaled {
	return &fakeTailscaled{
		status: &ipnstate.Status{
			Version:      "1.102.5-tdeadbeef",
			BackendState: "Running",
			TUN:          true,
			Self:         &ipnstate.PeerStatus{DNSName: supName + ".", TailscaleIPs: []netip.Addr{netip.MustParseAddr("100.101.102.1")}},
		},
		serve: serveConfig(443, false, "/", "http://127.0.0.1:"+strconv.Itoa(port)),
		whois: healthyOwner, // a person owns the machine, with no grant: under access.mode tailnet they open every console
	}
}

// serveConfig is what 'tailscale serve --bg <proxy>' (or --http=80 when http) stores.
func serveConfig(port uint16, http bool, mount, proxy string) *ipn.ServeConfig {
	hp := ipn.HostPort(net.JoinHostPort(supName, strconv.Itoa(int(port))))
	tcp := &ipn.TCPPortHandler{HTTPS: !http, HTTP: http}
	return &ipn.ServeConfig{
		TCP: map[uint16]*ipn.TCPPortHandler{port: tcp},
		Web: map[ipn.HostPort]*ipn.WebServerConfig{hp: {Handlers: map[string]*ipn.HTTPHandler{mount: {Proxy: proxy}}}},
	}
}

// startSupervisor runs a real supervisor for home on a free loopback port; it writes
// supervisor.addr. It returns the port.
func startSupervisor(t *testing.T, home string) int {
	t.Helper()
	d := supervisortest.Start(t, supervisor.Config{StateHome: home, LocalAPI: supervisorAPI{&fakeTailscaled{status: &ipnstate.Status{TUN: true}}},
		TailscaledUID: os.Getuid(), Logger: quiet})
	return int(netip.MustParseAddrPort(d.Addr).Port())
}

func newHome(t *testing.T) string {
	return filepath.Join(t.TempDir(), "state")
}

func find(checks []Check, name string) (Check, bool) {
	for _, c := range checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func report(checks []Check) string {
	var b strings.Builder
	for _, c := range checks {
		b.WriteString(c.String() + "\n")
	}
	return b.String()
}

func want(t *testing.T, checks []Check, name string, st Status, whatHas, fixHas string) {
	t.Helper()
	c, ok := find(checks, name)
	if !ok {
		t.Fatalf("no %q check in\n%s", name, report(checks))
	}
	if c.Status != st || !strings.Contains(c.What, whatHas) || !strings.Contains(c.Fix, fixHas) {
		t.Fatalf("%q: got %q, want %v with %q and fix %q\n%s", name, c.String(), st, whatHas, fixHas, report(checks))
	}
	if c.Status != OK && c.Fix == "" {
		t.Errorf("%q is %v without a fix", name, c.Status)
	}
}

func noToken(t *testing.T, home string, checks []Check) {
	t.Helper()
	tok, err := state.ReadToken(filepath.Join(state.FleetDir(home), state.TokenFile))
	if err != nil {
		return
	}
	if strings.Contains(report(checks), tok) {
		t.Fatalf("the report shows the token")
	}
}

// cleanArgs is the command line of a tailscaled that runs no outbound proxy (SPEC S5e).
func cleanArgs(context.Context) ([]string, error) {
	return []string{"/usr/sbin/tailscaled", "--state=/var/lib/tailscale/tailscaled.state", "--socket=/run/tailscale/tailscaled.sock", "--port=41641"}, nil
}

func TestHealthy(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(port), TailscaledArgs: cleanArgs})
	for _, c := range checks {
		if c.Status != OK {
			t.Errorf("not OK: %s", c)
		}
	}
	if Failed(checks) {
		t.Errorf("Failed = true on a healthy set-up")
	}
	want(t, checks, "tailscaled", OK, "version 1.102.5, Running, "+supName, "")
	want(t, checks, "tailscaled mode", OK, "kernel TUN", "")
	want(t, checks, "tailscale serve", OK, "https://"+supName+"/ → http://127.0.0.1:"+strconv.Itoa(port), "")
	want(t, checks, "funnel", OK, "off", "")
	want(t, checks, "raw tcp forward", OK, "none reaches fleet", "")
	want(t, checks, "tailscale ssh", OK, "off", "")
	want(t, checks, "tailscaled proxy", OK, "no outbound proxy", "")
	want(t, checks, "state folder", OK, "private", "")
	want(t, checks, "fleet.token", OK, "well-formed", "")
	want(t, checks, "metrics.token", OK, "well-formed", "")
	want(t, checks, "supervisor", OK, "answering at 127.0.0.1:"+strconv.Itoa(port)+": 0 console(s)", "")
	for _, c := range checks {
		if strings.Contains(c.String(), "fix:") {
			t.Errorf("an OK line carries a fix: %s", c)
		}
	}
	noToken(t, home, checks)
}

// Each row breaks one thing of a healthy set-up; the named check reports it with its fix.
func TestBroken(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	p := strconv.Itoa(port)
	tests := []struct {
		name    string
		edit    func(f *fakeTailscaled, cfg *Config)
		check   string
		status  Status
		whatHas string
		fixHas  string
	}{
		{"tailscaled down", func(f *fakeTailscaled, cfg *Config) {
			f.statusErr = errors.New("dial unix /run/tailscale/tailscaled.sock: connect: no such file or directory")
		}, "tailscaled", Fail, "cannot reach its LocalAPI", "systemctl start tailscaled"},
		{"tailscaled logged out", func(f *fakeTailscaled, cfg *Config) { f.status.BackendState = "NeedsLogin" },
			"tailscaled", Fail, "NeedsLogin", "tailscale up"},
		{"S5b userspace networking", func(f *fakeTailscaled, cfg *Config) { f.status.TUN = false },
			"tailscaled mode", Warn, "userspace networking (TUN:false)", "kernel TUN"},
		{"S2 no serve config", func(f *fakeTailscaled, cfg *Config) { f.serve = &ipn.ServeConfig{} },
			"tailscale serve", Fail, "nothing proxies to http://127.0.0.1:" + p, "tailscale serve --bg http://127.0.0.1:" + p},
		{"S2 serve to another port", func(f *fakeTailscaled, cfg *Config) { f.serve = serveConfig(443, false, "/", "http://127.0.0.1:1") },
			"tailscale serve", Fail, "nothing proxies", "tailscale serve --bg"},
		{"S2 serve to https", func(f *fakeTailscaled, cfg *Config) {
			f.serve = serveConfig(443, false, "/", "https+insecure://127.0.0.1:"+p)
		}, "tailscale serve", Fail, "nothing proxies", "tailscale serve --bg"},
		{"S2 mounted below the root", func(f *fakeTailscaled, cfg *Config) {
			f.serve = serveConfig(443, false, "/fleet", "http://127.0.0.1:"+p)
		}, "tailscale serve", Fail, "at the root", "tailscale serve --bg"},
		{"S2 proxy with a path", func(f *fakeTailscaled, cfg *Config) {
			f.serve = serveConfig(443, false, "/", "http://127.0.0.1:"+p+"/x")
		}, "tailscale serve", Fail, "no path", "tailscale serve --bg"},
		{"S2 foreground only", func(f *fakeTailscaled, cfg *Config) {
			f.serve = &ipn.ServeConfig{Foreground: map[string]*ipn.ServeConfig{"sess": serveConfig(443, false, "/", p)}}
		}, "tailscale serve", Warn, "only in the foreground", "--bg"},
		{"S5e raw TCP forward", func(f *fakeTailscaled, cfg *Config) {
			f.serve = &ipn.ServeConfig{TCP: map[uint16]*ipn.TCPPortHandler{443: {TCPForward: "127.0.0.1:" + p}}}
		}, "raw tcp forward", Fail, "401 tcp-forwardable", "tailscale serve --tcp=443 off"},
		{"S5e ssh on", func(f *fakeTailscaled, cfg *Config) { f.prefs = &ipn.Prefs{WantRunning: true, RunSSH: true} },
			"tailscale ssh", Fail, "401 tcp-forwardable", "unix-socket door"},
		{"funnel on", func(f *fakeTailscaled, cfg *Config) {
			f.serve.AllowFunnel = map[ipn.HostPort]bool{ipn.HostPort(supName + ":443"): true}
		}, "funnel", Fail, "Funnel is on for " + supName + ":443", "tailscale funnel --https=443 off"},
		{"unix serve on an old tailscaled", func(f *fakeTailscaled, cfg *Config) {
			f.status.Version = "1.90.1"
			cfg.Socket = filepath.Join(t.TempDir(), "s.sock")
		}, "tailscaled version", Fail, "needs 1.94", "update tailscale"},
		{"supervisor on another port", func(f *fakeTailscaled, cfg *Config) { cfg.Port = 1 },
			"supervisor", Fail, "--port is 1", "--port " + p},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthyTailscaled(port)
			cfg := Config{StateHome: home, LocalAPI: f}
			tt.edit(f, &cfg)
			checks := Run(context.Background(), cfg)
			want(t, checks, tt.check, tt.status, tt.whatHas, tt.fixHas)
			if Failed(checks) != (tt.status == Fail) {
				t.Errorf("Failed = %v with a %v", Failed(checks), tt.status)
			}
			noToken(t, home, checks)
		})
	}
}

// Serve targets, as 'tailscale serve' stores them, that reach the supervisor.
func TestServeTargets_S2(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	p := strconv.Itoa(port)
	sock := filepath.Join(t.TempDir(), "serve.sock")
	for _, target := range []string{p, "127.0.0.1:" + p, "http://127.0.0.1:" + p, "http://127.0.0.1:" + p + "/", "unix:" + sock} {
		t.Run(target, func(t *testing.T) {
			f := healthyTailscaled(port)
			f.serve = serveConfig(80, true, "/", target)
			checks := Run(context.Background(), Config{StateHome: home, LocalAPI: f, Socket: sock})
			want(t, checks, "tailscale serve", OK, "http://"+supName+"/ → "+target, "")
		})
	}
}

func TestStateFiles_F1(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		home := newHome(t)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "state folder", Warn, "does not exist yet", "fleet serve")
		want(t, checks, "supervisor", Fail, "supervisor.addr is missing", "fleet serve")
	})
	t.Run("folder too open", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		dir := state.FleetDir(home)
		os.Chmod(dir, 0o755)
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "state folder", Fail, dir+" is group- or world-accessible (mode 0755)", "chmod 700 "+dir)
		if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
			t.Errorf("the doctor changed the mode")
		}
	})
	t.Run("home 0755 is fine, as fleet serve says", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home) // serve's own rule accepted it
		os.Chmod(home, 0o755)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "state folder", OK, "private", "")
		want(t, checks, "fleet.token", OK, "well-formed", "")
	})
	t.Run("home group-writable is refused, as fleet serve refuses it", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		os.Chmod(home, 0o775)
		t.Cleanup(func() { os.Chmod(home, 0o700) })
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "state folder", Fail, home, "chmod")
		if err := state.EnsureHome(home); err == nil {
			t.Error("fleet serve's rule accepts what doctor refuses")
		}
	})
	t.Run("token too open", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		tok := filepath.Join(state.FleetDir(home), state.TokenFile)
		os.Chmod(tok, 0o644)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "fleet.token", Fail, "group- or world-accessible (mode 0644)", "chmod 600 "+tok)
		want(t, checks, "supervisor", Warn, "without a readable token", "fleet.token")
		os.Chmod(tok, 0o600)
		noToken(t, home, checks)
	})
	t.Run("token malformed", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		tok := filepath.Join(state.FleetDir(home), state.TokenFile)
		secretish := "not-a-token but secret-looking"
		os.WriteFile(tok, []byte(secretish+"\n"), 0o600)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "fleet.token", Fail, "not one line of base64url", "move it away")
		if strings.Contains(report(checks), secretish) {
			t.Errorf("the report shows the token file's contents")
		}
	})
	t.Run("G4 metrics.token too open", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		mt := filepath.Join(state.FleetDir(home), state.MetricsTokenFile)
		os.Chmod(mt, 0o640)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "metrics.token", Fail, "group- or world-accessible (mode 0640)", "chmod 600 "+mt)
		want(t, checks, "fleet.token", OK, "well-formed", "")
	})
	t.Run("G4 metrics.token missing", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		os.Remove(filepath.Join(state.FleetDir(home), state.MetricsTokenFile))
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "metrics.token", Warn, "does not exist yet", "restart fleet serve")
	})
	t.Run("G4 metrics.token holds the fleet token", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		dir := state.FleetDir(home)
		fleet, _ := os.ReadFile(filepath.Join(dir, state.TokenFile))
		os.WriteFile(filepath.Join(dir, state.MetricsTokenFile), fleet, 0o600)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "metrics.token", Fail, "holds the fleet token", "move it away")
		noToken(t, home, checks)
	})
	t.Run("G4 metrics.token malformed", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		secretish := "not-a-token but secret-looking"
		os.WriteFile(filepath.Join(state.FleetDir(home), state.MetricsTokenFile), []byte(secretish+"\n"), 0o600)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "metrics.token", Fail, "not one line of base64url", "move it away")
		if strings.Contains(report(checks), secretish) {
			t.Errorf("the report shows the token file's contents")
		}
	})
	t.Run("registry does not parse", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		reg := filepath.Join(state.FleetDir(home), state.RegistryFile)
		os.WriteFile(reg, []byte("{"), 0o600)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "consoles.json", Fail, "does not parse", "move it away")
	})
	t.Run("O5 registry of a newer format", func(t *testing.T) {
		home := newHome(t)
		startSupervisor(t, home)
		reg := filepath.Join(state.FleetDir(home), state.RegistryFile)
		os.WriteFile(reg, []byte(`{"format":3,"consoles":[]}`), 0o600)
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "consoles.json", Fail, "is format 3, newer than this fleet reads (format 2)", "run the newer fleet")
	})
}

func TestSupervisor(t *testing.T) {
	t.Run("not answering", func(t *testing.T) {
		home := newHome(t)
		if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
			t.Fatal(err)
		}
		os.Chmod(home, 0o700)
		ln, _ := net.Listen("tcp4", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close() // nobody listens there now: supervisor.addr left by an earlier run
		state.WriteFileAtomic(filepath.Join(state.FleetDir(home), state.AddrFile), []byte(addr+"\n"))
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "supervisor", Fail, "nothing answers at "+addr, "fleet serve")
	})
	t.Run("another state folder's supervisor", func(t *testing.T) {
		other := newHome(t)
		port := startSupervisor(t, other)
		home := newHome(t)
		if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
			t.Fatal(err)
		}
		os.Chmod(home, 0o700)
		state.WriteFileAtomic(filepath.Join(state.FleetDir(home), state.AddrFile), []byte("127.0.0.1:"+strconv.Itoa(port)+"\n"))
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(port)})
		want(t, checks, "supervisor", Fail, "does not take this state folder's token", "--state-dir")
	})
	t.Run("non-loopback supervisor.addr", func(t *testing.T) {
		home := newHome(t)
		if _, err := state.LoadOrCreateToken(state.FleetDir(home)); err != nil {
			t.Fatal(err)
		}
		os.Chmod(home, 0o700)
		state.WriteFileAtomic(filepath.Join(state.FleetDir(home), state.AddrFile), []byte("192.0.2.1:7420\n"))
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(contract.DefaultPort)})
		want(t, checks, "supervisor", Fail, "not a loopback address", "restart fleet serve")
	})
	t.Run("unix socket answering", func(t *testing.T) {
		home := newHome(t)
		port := startSupervisor(t, home)
		srv, err := supervisor.New(supervisor.Config{StateHome: home, LocalAPI: supervisorAPI{&fakeTailscaled{status: &ipnstate.Status{TUN: true}}},
			TailscaledUID: os.Getuid(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(testdirs.Private(t), "run", "serve.sock")
		ln, err := supervisor.ListenUnix(sock)
		if err != nil {
			t.Fatal(err)
		}
		go srv.ServeUnixListener(ln)
		t.Cleanup(func() { srv.Close() })
		f := healthyTailscaled(port)
		f.serve = serveConfig(443, false, "/", "unix:"+sock)
		// A test's folders are below /tmp, which the doctor rightly refuses (TestSocketPlace_S5e):
		// here the place is judged on a made-up machine where it is fine.
		checks := runWith(context.Background(), Config{StateHome: home, LocalAPI: f, Socket: sock}, testFoldersFine())
		want(t, checks, "tailscale serve", OK, "unix:"+sock, "")
		want(t, checks, "unix socket", OK, "answering at "+sock, "")
		want(t, checks, "unix socket place", OK, "out of reach", "")
		if Failed(checks) {
			t.Errorf("failed:\n%s", report(checks))
		}
	})
	t.Run("unix socket missing", func(t *testing.T) {
		home := newHome(t)
		port := startSupervisor(t, home)
		dir := filepath.Join(t.TempDir(), "run")
		os.Mkdir(dir, 0o700)
		sock := filepath.Join(dir, "serve.sock")
		checks := Run(context.Background(), Config{StateHome: home, LocalAPI: healthyTailscaled(port), Socket: sock})
		want(t, checks, "unix socket", Fail, "does not exist", "fleet serve --socket "+sock)
		want(t, checks, "tailscale serve", OK, "http://127.0.0.1:", "")
	})
}

func TestCheckLine(t *testing.T) {
	c := Check{Status: Fail, Name: "tailscale serve", What: "nothing proxies to http://127.0.0.1:7420", Fix: "tailscale serve --bg http://127.0.0.1:7420"}
	if got, want := c.String(), "FAIL tailscale serve: nothing proxies to http://127.0.0.1:7420 — fix: tailscale serve --bg http://127.0.0.1:7420"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	c = Check{Status: OK, Name: "funnel", What: "off", Fix: "ignored"}
	if got, want := c.String(), "OK   funnel: off"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
