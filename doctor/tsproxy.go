package doctor

// tailscaled's outbound proxies (SPEC S5e). `tailscaled --socks5-server` and
// `--outbound-http-proxy-listen` dial any address, 127.0.0.1 included, as tailscaled for whoever
// reaches them — any local process, and with userspace networking any tailnet peer allowed to —
// so on fleet's TCP door their connections look like Serve's own, with bytes someone else wrote.
// No LocalAPI call shows them: fleet reads tailscaled's command line (the process listening on
// the LocalAPI socket, /proc/<pid>/cmdline) and, while it turns one on or cannot be read, refuses
// every /c/ request on the TCP door (401 tcp-forwardable). They dial TCP only: the unix-socket
// door is out of their reach. The doctor reads the command line as fleet does
// (peercred.SocketServerArgs, tsargs.OutboundProxy), so it says what the door does.

import (
	"context"
	"fmt"
	"strings"

	"github.com/phase-console/fleet/internal/tsargs"
)

// proxyState is what tailscaled's command line says about its outbound proxies.
type proxyState int

const (
	proxyNotAsked   proxyState = iota // no way to read the command line (no socket, no Config.TailscaledArgs)
	proxyUnreadable                   // it could not be read: fleet counts that as on
	proxyOff
	proxyOn
)

// tsProxy is one reading of tailscaled's command line.
type tsProxy struct {
	state proxyState
	arg   string // proxyOn: the argument that turns the proxy on, with its value
	err   error  // proxyUnreadable: why
}

// readTailscaledArgs reads tailscaled's command line for its outbound proxies.
func (r *run) readTailscaledArgs(ctx context.Context) {
	if r.cfg.TailscaledArgs == nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	args, err := r.cfg.TailscaledArgs(actx)
	cancel()
	switch {
	case err != nil:
		r.proxy = tsProxy{state: proxyUnreadable, err: err}
	case tsargs.OutboundProxy(args) != "":
		r.proxy = tsProxy{state: proxyOn, arg: tsargs.OutboundProxy(args)}
	default:
		r.proxy = tsProxy{state: proxyOff}
	}
}

// checkOutboundProxy: while tailscaled's command line turns an outbound proxy on, or cannot be
// read, fleet refuses every /c/ request on its TCP door (S5e). That is a FAIL while Serve
// publishes the TCP door, and a WARN otherwise: nothing is refused now, but the TCP door would be.
func (r *run) checkOutboundProxy(routes []route, port int) {
	const name = "tailscaled proxy"
	tcpDoor := tcpDoorRoutes(routes)
	var on, allow string // what was found; how to undo it
	switch r.proxy.state {
	case proxyOff:
		r.add(OK, name, "no outbound proxy (--socks5-server, --outbound-http-proxy-listen) on tailscaled's command line", "")
		return
	case proxyNotAsked:
		r.add(Warn, name, "unknown: no tailscaled socket to find tailscaled's command line by, so the doctor cannot tell whether an outbound proxy (--socks5-server, --outbound-http-proxy-listen) is on; while one is, or fleet cannot read that command line, fleet refuses every /c/ request on the TCP door (401 tcp-forwardable)",
			"pass --tailscale-socket PATH")
		return
	case proxyOn:
		on = "on (" + r.proxy.arg + ")"
		flag := proxyFlag(r.proxy.arg)
		allow = "run tailscaled without " + flag + ", which Tailscale's container sets from " + proxyEnv(flag)
	default: // proxyUnreadable
		on = "perhaps on (tailscaled's command line cannot be read: " + strings.TrimPrefix(shortErr(r.proxy.err), "peercred: ") + ")"
		allow = "let this user read tailscaled's command line: /proc/<pid>/cmdline of the process on tailscaled's socket, which another pid namespace or /proc mounted hidepid hides"
	}
	if len(tcpDoor) > 0 {
		r.add(Fail, name,
			fmt.Sprintf("%s while Serve publishes the TCP door (%s): whoever reaches an outbound proxy — any local process, and with userspace networking any tailnet peer allowed to — has tailscaled dial 127.0.0.1:%d and write its own X-Forwarded-For, so fleet refuses every /c/ request there (401 tcp-forwardable)", on, describe(tcpDoor), port),
			r.tcpDoorFix()+" (or "+allow+")")
		return
	}
	r.add(Warn, name,
		on+", and Serve does not publish the TCP door, which an outbound proxy can reach: nothing is refused now, but fleet would refuse every /c/ request on the TCP door (401 tcp-forwardable)",
		"keep fleet on the unix-socket door, or "+allow)
}

// proxyFlag is the flag of an argument tsargs.OutboundProxy returned: "--socks5-server" of
// "--socks5-server=localhost:1055" or "--socks5-server localhost:1055".
func proxyFlag(arg string) string {
	f, _, _ := strings.Cut(arg, " ")
	f, _, _ = strings.Cut(f, "=")
	return f
}

// proxyEnv is the variable of Tailscale's container image that sets a proxy flag:
// TS_SOCKS5_SERVER for --socks5-server.
func proxyEnv(flag string) string {
	return "TS_" + strings.ToUpper(strings.ReplaceAll(strings.TrimLeft(flag, "-"), "-", "_"))
}
