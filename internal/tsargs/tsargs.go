// Package tsargs reads tailscaled's command line for the flags that matter to fleet: those that
// change who can make tailscaled dial fleet's doors but that no LocalAPI call shows (SPEC S5e).
// The supervisor's forward watch and fleet doctor both read the flags here, so that the doctor
// says what the door does.
//
// It only reads arguments already in hand. It must not find or read the command line itself
// (internal/peercred.SocketServerArgs does, and fails closed), nor judge a door or say what is
// refused (its callers do). And it must stay generous: a flag it cannot read for certain counts
// as on, never as off.
package tsargs

import "strings"

// outboundProxyFlags are tailscaled's flags that start a proxy which dials any address for
// whoever connects to it, 127.0.0.1 included, as tailscaled's uid (cmd/tailscaled/proxy.go, and
// TS_SOCKS5_SERVER / TS_OUTBOUND_HTTP_PROXY_LISTEN in Tailscale's container image).
var outboundProxyFlags = [...]string{"socks5-server", "outbound-http-proxy-listen"}

// OutboundProxy returns the argument of tailscaled's command line (args[0] is the program)
// that turns on an outbound proxy, with its value, or "". It reads flags as Go's flag package
// does (-name or --name, with =value or the next argument as the value), and generously: every
// argument is looked at, and such a flag with no value to read counts as on.
func OutboundProxy(args []string) string {
	for i := 1; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		name, value, hasValue := strings.Cut(name, "=")
		for _, f := range outboundProxyFlags {
			if name != f {
				continue
			}
			switch {
			case hasValue && value == "":
				// off
			case hasValue:
				return args[i]
			case i+1 >= len(args):
				return args[i]
			case args[i+1] != "":
				return args[i] + " " + args[i+1]
			}
		}
	}
	return ""
}
