package doctor

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"tailscale.com/ipn"

	"github.com/phase-console/fleet/internal/testdirs"
)

// argsSay is a TailscaledArgs that reads args; argsFail one that cannot read them.
func argsSay(args ...string) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return args, nil }
}

func argsFail(err error) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return nil, err }
}

// S5e: tailscaled's outbound proxies dial 127.0.0.1 as tailscaled for whoever reaches them, and
// fleet refuses every /c/ request on its TCP door while tailscaled's command line turns one on or
// cannot be read. Beside a published TCP door that is a FAIL whose fix is the unix-socket door;
// beside the unix-socket door alone a WARN (nothing is refused now); with no way to read the
// command line, a WARN that says so.
func TestOutboundProxy_S5e(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	p := strconv.Itoa(port)
	sock := filepath.Join(t.TempDir(), "run", "serve.sock")
	tcpServe := serveConfig(443, false, "/", "http://127.0.0.1:"+p)
	unixServe := serveConfig(443, false, "/", "unix:"+sock)
	unreadable := errors.New("peercred: the command line of /run/tailscale/tailscaled.sock's server (pid 812): open /proc/812/cmdline: permission denied")

	tests := []struct {
		name    string
		args    func(context.Context) ([]string, error) // nil: not asked (no socket either)
		serve   *ipn.ServeConfig
		socket  string
		status  Status
		whatHas []string
		fixHas  []string
	}{
		{name: "S5e no proxy, TCP door", args: cleanArgs, serve: tcpServe,
			status: OK, whatHas: []string{"no outbound proxy (--socks5-server, --outbound-http-proxy-listen) on tailscaled's command line"}},
		{name: "S5e proxy flag empty, TCP door", args: argsSay("tailscaled", "--socks5-server="), serve: tcpServe,
			status: OK, whatHas: []string{"no outbound proxy"}},
		{name: "S5e no proxy, unix door", args: cleanArgs, serve: unixServe, socket: sock,
			status: OK, whatHas: []string{"no outbound proxy"}},

		{name: "S5e socks5, TCP door", args: argsSay("/usr/sbin/tailscaled", "--tun=userspace-networking", "--socks5-server=localhost:1055"), serve: tcpServe,
			status: Fail,
			whatHas: []string{"on (--socks5-server=localhost:1055) while Serve publishes the TCP door (https://" + supName + "/ → http://127.0.0.1:" + p + ")",
				"has tailscaled dial 127.0.0.1:" + p, "fleet refuses every /c/ request there (401 tcp-forwardable)"},
			fixHas: []string{"publish the unix-socket door instead: fleet serve --socket " + DefaultSocketPath(),
				"(or run tailscaled without --socks5-server, which Tailscale's container sets from TS_SOCKS5_SERVER)"}},
		{name: "S5e http proxy in two arguments, TCP door, socket given", args: argsSay("tailscaled", "-outbound-http-proxy-listen", "127.0.0.1:8080"),
			serve: tcpServe, socket: sock, status: Fail,
			whatHas: []string{"on (-outbound-http-proxy-listen 127.0.0.1:8080) while Serve publishes the TCP door", "401 tcp-forwardable"},
			fixHas:  []string{"publish the unix-socket door instead: sudo tailscale serve --bg unix:" + sock, "run tailscaled without -outbound-http-proxy-listen, which Tailscale's container sets from TS_OUTBOUND_HTTP_PROXY_LISTEN)"}},
		{name: "S5e command line unreadable, TCP door", args: argsFail(unreadable), serve: tcpServe,
			status: Fail,
			whatHas: []string{"perhaps on (tailscaled's command line cannot be read: the command line of /run/tailscale/tailscaled.sock's server (pid 812): open /proc/812/cmdline: permission denied) while Serve publishes the TCP door",
				"401 tcp-forwardable"},
			fixHas: []string{"publish the unix-socket door instead", "let this user read tailscaled's command line", "hidepid"}},
		{name: "S5e socks5, TCP door in a foreground session", args: argsSay("tailscaled", "--socks5-server", "localhost:1055"),
			serve:  &ipn.ServeConfig{Foreground: map[string]*ipn.ServeConfig{"sess": tcpServe}},
			status: Fail, whatHas: []string{"on (--socks5-server localhost:1055) while Serve publishes the TCP door"}, fixHas: []string{"unix-socket door"}},

		{name: "S5e socks5, unix door only", args: argsSay("tailscaled", "--socks5-server=localhost:1055"), serve: unixServe, socket: sock,
			status:  Warn,
			whatHas: []string{"on (--socks5-server=localhost:1055), and Serve does not publish the TCP door", "nothing is refused now", "401 tcp-forwardable"},
			fixHas:  []string{"keep fleet on the unix-socket door, or run tailscaled without --socks5-server"}},
		{name: "S5e command line unreadable, unix door only", args: argsFail(unreadable), serve: unixServe, socket: sock,
			status:  Warn,
			whatHas: []string{"perhaps on (tailscaled's command line cannot be read: ", "nothing is refused now"},
			fixHas:  []string{"keep fleet on the unix-socket door, or let this user read tailscaled's command line"}},
		{name: "S5e socks5, nothing published", args: argsSay("tailscaled", "--socks5-server=:1055"), serve: &ipn.ServeConfig{},
			status: Warn, whatHas: []string{"on (--socks5-server=:1055), and Serve does not publish the TCP door"}, fixHas: []string{"run tailscaled without --socks5-server"}},

		{name: "S5e not asked, TCP door", serve: tcpServe,
			status:  Warn,
			whatHas: []string{"unknown: no tailscaled socket to find tailscaled's command line by", "401 tcp-forwardable"},
			fixHas:  []string{"pass --tailscale-socket PATH"}},
		{name: "S5e not asked, unix door", serve: unixServe, socket: sock,
			status: Warn, whatHas: []string{"unknown"}, fixHas: []string{"--tailscale-socket"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthyTailscaled(port)
			f.serve = tt.serve
			checks := runWith(context.Background(), Config{StateHome: home, LocalAPI: f, Socket: tt.socket, TailscaledArgs: tt.args}, testFoldersFine())
			c, ok := find(checks, "tailscaled proxy")
			if !ok {
				t.Fatalf("no tailscaled proxy check in\n%s", report(checks))
			}
			t.Log(c.String())
			if c.Status != tt.status {
				t.Fatalf("got %q, want %v\n%s", c.String(), tt.status, report(checks))
			}
			for _, w := range tt.whatHas {
				if !strings.Contains(c.What, w) {
					t.Errorf("got %q, want it to say %q", c.What, w)
				}
			}
			for _, w := range tt.fixHas {
				if !strings.Contains(c.Fix, w) {
					t.Errorf("fix %q, want it to say %q", c.Fix, w)
				}
			}
			if c.Status != OK && c.Fix == "" {
				t.Errorf("%v without a fix", c.Status)
			}
			if c.Status == Fail && !Failed(checks) {
				t.Errorf("Failed = false with a FAIL")
			}
			noToken(t, home, checks)
		})
	}
}

// With nothing published and an outbound proxy on, the fix for the missing Serve config is the
// unix-socket door: the TCP door would be refused (S5e).
func TestOutboundProxyServeFix_S5e(t *testing.T) {
	home := newHome(t)
	port := startSupervisor(t, home)
	f := healthyTailscaled(port)
	f.serve = &ipn.ServeConfig{}
	checks := Run(context.Background(), Config{StateHome: home, LocalAPI: f, TailscaledArgs: argsSay("tailscaled", "--socks5-server=:1055")})
	want(t, checks, "tailscale serve", Fail, "nothing proxies", "publish the unix-socket door instead: fleet serve --socket")
	checks = Run(context.Background(), Config{StateHome: home, LocalAPI: f, TailscaledArgs: cleanArgs})
	want(t, checks, "tailscale serve", Fail, "nothing proxies", "tailscale serve --bg http://127.0.0.1:"+strconv.Itoa(port))
}

// TestOutboundProxyReadsTheSocket_S5e: with no TailscaledArgs, the doctor reads the command line
// of the process listening on TailscaleSocket, as fleet serve does: here this test, whose command
// line turns on no proxy. Once nobody listens there, it cannot be read: FAIL beside the TCP door.
func TestOutboundProxyReadsTheSocket_S5e(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peercred.SocketServerArgs reads /proc")
	}
	home := newHome(t)
	port := startSupervisor(t, home)
	api, stop := testdirs.ServedSocket(t) // tailscaled's socket, this process its tailscaled
	cfg := Config{StateHome: home, LocalAPI: healthyTailscaled(port), TailscaleSocket: api}
	want(t, Run(context.Background(), cfg), "tailscaled proxy", OK, "no outbound proxy", "")
	stop()
	want(t, Run(context.Background(), cfg), "tailscaled proxy", Fail, "perhaps on (tailscaled's command line cannot be read: ", "unix-socket door")
}
