package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tailscale.com/client/local"
	"tailscale.com/ipn"
	"tailscale.com/tailcfg"
)

// *local.Client is the LocalAPI that fleet doctor uses for real.
var _ LocalAPI = (*local.Client)(nil)

// S5e: whatever lets a tailnet peer write the bytes that reach fleet — a raw TCP forward to either
// door, Tailscale SSH beside a published TCP door — is a FAIL with its fix; the unix-socket door
// beside SSH, a raw forward elsewhere, and SSH off are OK.
func TestForwardable_S5e(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	p := strconv.Itoa(port)
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "serve.sock")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	sshOn := &ipn.Prefs{WantRunning: true, RunSSH: true}
	raw := func(port uint16, h *ipn.TCPPortHandler) *ipn.ServeConfig {
		sc := healthyTailscaled(0).serve // a web route elsewhere: the raw forward is what is judged
		sc.TCP[port] = h
		return sc
	}
	unixServe := serveConfig(443, false, "/", "unix:"+sock)

	tests := []struct {
		name    string
		prefs   *ipn.Prefs
		serve   *ipn.ServeConfig
		socket  string
		prefErr error
		check   string
		status  Status
		whatHas string
		fixHas  string
	}{
		{name: "S5e ssh on, TCP door", prefs: sshOn, serve: serveConfig(443, false, "/", "http://127.0.0.1:"+p),
			check: "tailscale ssh", status: Fail, whatHas: "on while Serve publishes the TCP door", fixHas: "publish the unix-socket door instead: fleet serve --socket /run/user/"},
		{name: "S5e ssh on, TCP door by localhost", prefs: sshOn, serve: serveConfig(443, false, "/", "http://localhost:"+p),
			check: "tailscale ssh", status: Fail, whatHas: "401 tcp-forwardable", fixHas: "sudo tailscale serve --bg unix:/run/user/"},
		{name: "S5e ssh on, TCP door by [::1]", prefs: sshOn, serve: serveConfig(443, false, "/", "http://[::1]:"+p),
			check: "tailscale ssh", status: Fail, whatHas: "http://[::1]:" + p, fixHas: "tailscale set --ssh=false"},
		{name: "S5e ssh on, TCP door on a plain port", prefs: sshOn, serve: serveConfig(80, true, "/", p),
			check: "tailscale ssh", status: Fail, whatHas: "127.0.0.1:" + p, fixHas: "unix-socket door"},
		{name: "S5e ssh on, TCP door, socket given", prefs: sshOn, serve: serveConfig(443, false, "/", "http://127.0.0.1:"+p), socket: sock,
			check: "tailscale ssh", status: Fail, whatHas: "401 tcp-forwardable", fixHas: "sudo tailscale serve --bg unix:" + sock},
		{name: "S5e ssh on, unix door", prefs: sshOn, serve: unixServe, socket: sock,
			check: "tailscale ssh", status: OK, whatHas: "on, and Serve does not publish the TCP door"},
		{name: "S5e ssh off, TCP door", serve: serveConfig(443, false, "/", "http://127.0.0.1:"+p),
			check: "tailscale ssh", status: OK, whatHas: "off"},
		{name: "S5e prefs unreadable", prefErr: errors.New("403 Forbidden"), serve: serveConfig(443, false, "/", "http://127.0.0.1:"+p),
			check: "tailscaled prefs", status: Fail, whatHas: "cannot read them (403 Forbidden)", fixHas: "tailscale debug prefs"},
		{name: "S5e prefs unreadable, TCP door", prefErr: errors.New("403 Forbidden"), serve: serveConfig(443, false, "/", "http://127.0.0.1:"+p),
			check: "tailscale ssh", status: Fail, whatHas: "perhaps on", fixHas: "unix-socket door"},

		{name: "S5e raw forward to fleet's port", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "127.0.0.1:" + p}),
			check: "raw tcp forward", status: Fail, whatHas: "port 8443 forwards raw TCP to 127.0.0.1:" + p + " (its TCP door)", fixHas: "tailscale serve --tcp=8443 off"},
		{name: "S5e raw forward to localhost", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "localhost:" + p}),
			check: "raw tcp forward", status: Fail, whatHas: "401 tcp-forwardable", fixHas: "--tcp=8443 off"},
		{name: "S5e raw forward to [::1]", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "[::1]:" + p}),
			check: "raw tcp forward", status: Fail, whatHas: "[::1]:" + p, fixHas: "--tcp=8443 off"},
		{name: "S5e raw forward, TLS terminated", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "127.0.0.1:" + p, TerminateTLS: supName}),
			check: "raw tcp forward", status: Fail, whatHas: "401 tcp-forwardable", fixHas: "tailscale serve --tls-terminated-tcp=8443 off"},
		{name: "S5e raw forward to another port", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "127.0.0.1:" + strconv.Itoa(port+1)}),
			check: "raw tcp forward", status: OK, whatHas: "none reaches fleet"},
		{name: "S5e raw forward names the socket", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "unix:" + sock}), socket: sock,
			check: "raw tcp forward", status: Fail, whatHas: "(its unix-socket door)", fixHas: "--tcp=8443 off"},
		{name: "S5e raw forward names the socket, unclean", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "unix:" + dir + "/./x/../serve.sock"}), socket: sock,
			check: "raw tcp forward", status: Fail, whatHas: "its unix-socket door", fixHas: "--tcp=8443 off"},
		{name: "S5e raw forward names the socket through a symlink", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "unix:" + filepath.Join(link, "serve.sock")}), socket: sock,
			check: "raw tcp forward", status: Fail, whatHas: "its unix-socket door", fixHas: "--tcp=8443 off"},
		{name: "S5e raw forward to another socket", serve: raw(8443, &ipn.TCPPortHandler{TCPForward: "unix:" + filepath.Join(dir, "other.sock")}), socket: sock,
			check: "raw tcp forward", status: OK, whatHas: "none reaches fleet"},
		{name: "S5e raw forward beside the unix door", serve: func() *ipn.ServeConfig {
			sc := serveConfig(443, false, "/", "unix:"+sock)
			sc.TCP[8443] = &ipn.TCPPortHandler{TCPForward: "unix:" + sock}
			return sc
		}(), socket: sock, check: "raw tcp forward", status: Fail, whatHas: "its unix-socket door", fixHas: "--tcp=8443 off"},
		{name: "S5e raw forward in a foreground session", serve: &ipn.ServeConfig{Foreground: map[string]*ipn.ServeConfig{
			"sess": {TCP: map[uint16]*ipn.TCPPortHandler{9000: {TCPForward: "127.0.0.1:" + p}}}}},
			check: "raw tcp forward", status: Fail, whatHas: "port 9000", fixHas: "--tcp=9000 off"},
		{name: "S5e raw forward in a Service", serve: &ipn.ServeConfig{Services: map[tailcfg.ServiceName]*ipn.ServiceConfig{
			"svc:fleet": {TCP: map[uint16]*ipn.TCPPortHandler{9001: {TCPForward: "127.0.0.1:" + p}}}}},
			check: "raw tcp forward", status: Fail, whatHas: "port 9001", fixHas: "--tcp=9001 off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthyTailscaled(port)
			f.prefs, f.prefsErr, f.serve = tt.prefs, tt.prefErr, tt.serve
			checks := Run(context.Background(), Config{StateHome: home, LocalAPI: f, Socket: tt.socket})
			want(t, checks, tt.check, tt.status, tt.whatHas, tt.fixHas)
			if tt.status == Fail && !Failed(checks) {
				t.Errorf("Failed = false with a FAIL")
			}
			noToken(t, home, checks)
		})
	}
}

// The unix-socket door beside Tailscale SSH is the set-up deploy/ leads with: Serve and SSH say
// OK; the only word about the socket is its place, which is a test folder below /tmp here.
func TestUnixDoorBesideSSH_S5e(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	sock := filepath.Join(t.TempDir(), "run", "serve.sock")
	f := healthyTailscaled(port)
	f.prefs = &ipn.Prefs{WantRunning: true, RunSSH: true}
	f.serve = serveConfig(443, false, "/", "unix:"+sock)
	checks := runWith(context.Background(), Config{StateHome: home, LocalAPI: f, Socket: sock, TailscaledArgs: cleanArgs}, testFoldersFine())
	want(t, checks, "tailscale serve", OK, "unix:"+sock, "")
	want(t, checks, "tailscale ssh", OK, "on", "")
	want(t, checks, "raw tcp forward", OK, "none", "")
	for _, c := range checks {
		if c.Status != OK && c.Name != "unix socket" { // nothing listens on sock in this test
			t.Errorf("not OK: %s", c)
		}
	}
	if strings.Contains(report(checks), "tcp-forwardable") {
		t.Errorf("the unix door is called forwardable:\n%s", report(checks))
	}
}
