package tsargs

import "testing"

// TestOutboundProxy_S5e: tailscaled's flags read as Go's flag package reads them, generously.
func TestOutboundProxy_S5e(t *testing.T) {
	for _, row := range []struct {
		args []string
		want string
	}{
		{[]string{"tailscaled"}, ""},
		{[]string{"tailscaled", "--state=/var/lib/tailscale/tailscaled.state", "--port=41641"}, ""},
		{[]string{"tailscaled", "--socks5-server=localhost:1055"}, "--socks5-server=localhost:1055"},
		{[]string{"tailscaled", "-socks5-server=:1055"}, "-socks5-server=:1055"},
		{[]string{"tailscaled", "--socks5-server", "localhost:1055"}, "--socks5-server localhost:1055"},
		{[]string{"tailscaled", "-outbound-http-proxy-listen", "127.0.0.1:8080"}, "-outbound-http-proxy-listen 127.0.0.1:8080"},
		{[]string{"tailscaled", "--outbound-http-proxy-listen=localhost:8080"}, "--outbound-http-proxy-listen=localhost:8080"},
		{[]string{"tailscaled", "--socks5-server="}, ""},
		{[]string{"tailscaled", "--socks5-server", ""}, ""},
		{[]string{"tailscaled", "--socks5-server"}, "--socks5-server"},
		{[]string{"tailscaled", "--socks5-server=", "--outbound-http-proxy-listen=:8080"}, "--outbound-http-proxy-listen=:8080"},
		{[]string{"tailscaled", "--tun=userspace-networking", "--", "--socks5-server=:1"}, "--socks5-server=:1"},
		{[]string{"--socks5-server=:1"}, ""}, // args[0] is the program
	} {
		if got := OutboundProxy(row.args); got != row.want {
			t.Errorf("OutboundProxy(%q) = %q, want %q", row.args, got, row.want)
		}
	}
}
