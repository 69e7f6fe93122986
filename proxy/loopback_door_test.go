package proxy_test

import (
	"net"
	"net/http"

	"github.com/phase-console/fleet/proxy"
	"github.com/phase-console/fleet/proxy/fastloop"
)

// The loopback door serves its connections with its own loop in front of net/http
// (fastloop.ConnServer): every door test of this package runs through it, as the loopback door
// does, so that a rule proven here is proven on the fast loop too. (Package proxy does not import
// fastloop; its tests do, from here.)
func init() {
	proxy.ServeDoorConns = func(d *proxy.Door, srv *http.Server, ln net.Listener) func() {
		cs := &fastloop.ConnServer{Door: d, Server: srv}
		go cs.Serve(ln)
		return func() { cs.Close() }
	}
}
