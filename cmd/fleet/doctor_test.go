package main

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/state"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"

	"github.com/phase-console/fleet/internal/testdirs"
)

// doctorFakeTailscaled is a tailscaled for fleet doctor: Running on a kernel TUN, serving proxy.
type doctorFakeTailscaled struct {
	proxy string // "" : no Serve config
	down  bool
	ssh   bool // prefs RunSSH
	// args is tailscaled's command line. Nil: one that turns on no outbound proxy; with
	// noArgsSeam, none is given and the doctor reads the process on --tailscale-socket.
	args       []string
	noArgsSeam bool
}

func (f *doctorFakeTailscaled) StatusWithoutPeers(context.Context) (*ipnstate.Status, error) {
	if f.down {
		return nil, errors.New("connect: no such file or directory")
	}
	return &ipnstate.Status{Version: "1.102.5", BackendState: "Running", TUN: true,
		Self: &ipnstate.PeerStatus{DNSName: "sup.example.ts.net.", TailscaleIPs: []netip.Addr{netip.MustParseAddr("100.101.102.1")}}}, nil
}

func (f *doctorFakeTailscaled) GetPrefs(context.Context) (*ipn.Prefs, error) {
	return &ipn.Prefs{WantRunning: true, RunSSH: f.ssh}, nil
}

func (f *doctorFakeTailscaled) GetServeConfig(context.Context) (*ipn.ServeConfig, error) {
	if f.proxy == "" {
		return &ipn.ServeConfig{}, nil
	}
	return &ipn.ServeConfig{
		TCP: map[uint16]*ipn.TCPPortHandler{443: {HTTPS: true}},
		Web: map[ipn.HostPort]*ipn.WebServerConfig{"sup.example.ts.net:443": {Handlers: map[string]*ipn.HTTPHandler{"/": {Proxy: f.proxy}}}},
	}, nil
}

func withDoctorTailscaled(t *testing.T, f *doctorFakeTailscaled) {
	doctorLocalAPI = f
	doctorTailscaledArgs = func(context.Context) ([]string, error) {
		if f.args == nil {
			return []string{"/usr/sbin/tailscaled", "--state=/var/lib/tailscale/tailscaled.state", "--socket=/run/tailscale/tailscaled.sock", "--port=41641"}, nil
		}
		return f.args, nil
	}
	if f.noArgsSeam {
		doctorTailscaledArgs = nil
	}
	t.Cleanup(func() { doctorLocalAPI, doctorTailscaledArgs = nil, nil })
}

// TestDoctor: one line per check; exit 0 when nothing FAILs, 1 when something does.
func TestDoctor(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	startSupervisor(t, home)
	b, err := os.ReadFile(filepath.Join(state.FleetDir(home), state.AddrFile))
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(string(b))

	withDoctorTailscaled(t, &doctorFakeTailscaled{proxy: "http://" + addr})
	st, out, errs := runFleet("doctor", "--state-dir", home)
	if st != 0 || errs != "" {
		t.Fatalf("healthy: exit %d, stderr %q, stdout\n%s", st, errs, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "OK   ") {
			t.Errorf("healthy, not OK: %q", line)
		}
	}
	for _, want := range []string{"tailscaled: reachable, version 1.102.5", "tailscale serve: https://sup.example.ts.net/ → http://" + addr, "funnel: off", "supervisor: answering at " + addr} {
		if !strings.Contains(out, want) {
			t.Errorf("healthy output lacks %q:\n%s", want, out)
		}
	}

	withDoctorTailscaled(t, &doctorFakeTailscaled{})
	st, out, _ = runFleet("doctor", "--state-dir", home)
	if st != 1 || !strings.Contains(out, "FAIL tailscale serve: nothing proxies to http://"+addr+" — fix: tailscale serve --bg http://"+addr) {
		t.Fatalf("no Serve config: exit %d\n%s", st, out)
	}

	// S5e: the TCP door beside Tailscale SSH is a FAIL whose fix is the unix-socket door.
	withDoctorTailscaled(t, &doctorFakeTailscaled{proxy: "http://" + addr, ssh: true})
	st, out, _ = runFleet("doctor", "--state-dir", home)
	if st != 1 || !strings.Contains(out, "FAIL tailscale ssh: on while Serve publishes the TCP door") ||
		!strings.Contains(out, "— fix: publish the unix-socket door instead: fleet serve --socket /run/user/") {
		t.Fatalf("S5e ssh on: exit %d\n%s", st, out)
	}

	// S5e: so is the TCP door beside tailscaled's outbound proxy.
	withDoctorTailscaled(t, &doctorFakeTailscaled{proxy: "http://" + addr, args: []string{"tailscaled", "--socks5-server=localhost:1055"}})
	st, out, _ = runFleet("doctor", "--state-dir", home)
	if st != 1 || !strings.Contains(out, "FAIL tailscaled proxy: on (--socks5-server=localhost:1055) while Serve publishes the TCP door") ||
		!strings.Contains(out, "(or run tailscaled without --socks5-server, which Tailscale's container sets from TS_SOCKS5_SERVER)") {
		t.Fatalf("S5e outbound proxy: exit %d\n%s", st, out)
	}

	withDoctorTailscaled(t, &doctorFakeTailscaled{down: true})
	st, out, _ = runFleet("doctor", "--state-dir", home, "--tailscale-socket", "/nonexistent/tailscaled.sock")
	if st != 1 || !strings.Contains(out, "FAIL tailscaled: cannot reach its LocalAPI at /nonexistent/tailscaled.sock") {
		t.Fatalf("tailscaled down: exit %d\n%s", st, out)
	}

	tok, _ := state.ReadToken(filepath.Join(state.FleetDir(home), state.TokenFile))
	if tok == "" || strings.Contains(out, tok) {
		t.Fatalf("the token shows in the output (or could not be read)")
	}
}

func TestDoctorFlags(t *testing.T) {
	st, out, _ := runFleet("doctor", "--help")
	if st != 0 {
		t.Fatalf("--help: exit %d", st)
	}
	for _, flag := range []string{"-state-dir", "-tailscale-socket", "-port", "-socket"} {
		if !strings.Contains(out, flag) {
			t.Errorf("--help does not list %s:\n%s", flag, out)
		}
	}
	for _, bad := range []string{"70000", "0", "-1"} {
		if st, _, errs := runFleet("doctor", "--port", bad); st != 2 || !strings.Contains(errs, "--port") {
			t.Errorf("--port %s: exit %d, want 2 naming --port (%q)", bad, st, errs)
		}
	}
	if st, _, _ := runFleet("doctor", "extra"); st != 2 {
		t.Errorf("a positional argument: exit %d, want 2", st)
	}
}

// TestServeSocketFlag: fleet serve lists --socket, and refuses a socket in a too-open folder
// before it binds anything (F1).
func TestServeSocketFlag(t *testing.T) {
	st, out, _ := runFleet("serve", "--help")
	if st != 0 || !strings.Contains(out, "-socket") || !strings.Contains(out, "tailscale serve unix:PATH") {
		t.Fatalf("serve --help: exit %d\n%s", st, out)
	}
	open := filepath.Join(testdirs.Private(t), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o755)
	home := filepath.Join(t.TempDir(), "state")
	st, _, errs := runFleet("serve", "--state-dir", home, "--port", "1", "--tailscaled-uid", "0", "--socket", filepath.Join(open, "serve.sock"))
	if st != 1 || !strings.Contains(errs, "chmod 700 "+open) {
		t.Fatalf("socket in a 0755 folder: exit %d, stderr %q", st, errs)
	}
	// Below /tmp, where every Tailscale SSH login may forward to it (S5e).
	tmp, err := os.MkdirTemp("/tmp", "fleet-place-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	st, _, errs = runFleet("serve", "--state-dir", home, "--port", "1", "--tailscaled-uid", "0", "--socket", filepath.Join(tmp, "run", "serve.sock"))
	if st != 1 || !strings.Contains(errs, "below /tmp") || !strings.Contains(errs, "S5e") {
		t.Fatalf("socket below /tmp: exit %d, stderr %q", st, errs)
	}
}

// TestDoctorReadsTailscaledArgs_S5e: fleet doctor reads the command line of the process that
// listens on --tailscale-socket (here this test, whose command line turns on no proxy), as fleet
// serve does; one it cannot read beside the published TCP door is a FAIL, as fleet refuses that
// door (401 tcp-forwardable).
func TestDoctorReadsTailscaledArgs_S5e(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peercred.SocketServerArgs reads /proc")
	}
	home := filepath.Join(t.TempDir(), "state")
	startSupervisor(t, home)
	b, err := os.ReadFile(filepath.Join(state.FleetDir(home), state.AddrFile))
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(string(b))
	sock, stop := testdirs.ServedSocket(t) // tailscaled's socket, this process its tailscaled
	withDoctorTailscaled(t, &doctorFakeTailscaled{proxy: "http://" + addr, noArgsSeam: true})
	st, out, _ := runFleet("doctor", "--state-dir", home, "--tailscale-socket", sock)
	if st != 0 || !strings.Contains(out, "OK   tailscaled proxy: no outbound proxy") {
		t.Fatalf("tailscaled's command line from %s: exit %d\n%s", sock, st, out)
	}
	stop()
	st, out, _ = runFleet("doctor", "--state-dir", home, "--tailscale-socket", sock)
	if st != 1 || !strings.Contains(out, "FAIL tailscaled proxy: perhaps on (tailscaled's command line cannot be read: ") {
		t.Fatalf("nobody on %s: exit %d\n%s", sock, st, out)
	}
}
