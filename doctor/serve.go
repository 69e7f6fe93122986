package doctor

// The Serve config: what publishes fleet, and how.

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"tailscale.com/ipn"
)

// A route is one Serve handler that proxies to this supervisor.
type route struct {
	hp         ipn.HostPort
	scheme     string // https or http
	mount      string
	target     string
	foreground bool
	path       string // a path the proxy prepends; fleet wants none
	byName     bool   // the target names localhost: it may resolve to [::1], which fleet does not hold
}

func (r *run) wantTargets(port int) string {
	s := "http://127.0.0.1:" + strconv.Itoa(port)
	if r.cfg.Socket != "" {
		s += " or unix:" + r.cfg.Socket
	}
	return s
}

func (r *run) serveFix(port int) string {
	if r.cfg.Socket != "" {
		return "sudo tailscale serve --bg unix:" + r.cfg.Socket
	}
	return "tailscale serve --bg http://127.0.0.1:" + strconv.Itoa(port)
}

func (r *run) checkServe(sc *ipn.ServeConfig, self string, port int) {
	var routes []route
	var rawTCP []string
	collect := func(c *ipn.ServeConfig, foreground bool) {
		if c == nil {
			return
		}
		webs := []struct {
			tcp map[uint16]*ipn.TCPPortHandler
			web map[ipn.HostPort]*ipn.WebServerConfig
		}{{c.TCP, c.Web}}
		for _, svc := range c.Services {
			if svc != nil {
				webs = append(webs, struct {
					tcp map[uint16]*ipn.TCPPortHandler
					web map[ipn.HostPort]*ipn.WebServerConfig
				}{svc.TCP, svc.Web})
			}
		}
		for _, w := range webs {
			for p, h := range w.tcp {
				if h != nil && h.TCPForward != "" && r.isFleetTarget(h.TCPForward, port, true) {
					rawTCP = append(rawTCP, fmt.Sprintf("port %d", p))
				}
			}
			for hp, wsc := range w.web {
				if wsc == nil {
					continue
				}
				scheme := "https"
				if p, err := hp.Port(); err == nil && w.tcp[p] != nil && w.tcp[p].HTTP {
					scheme = "http"
				}
				for mount, h := range wsc.Handlers {
					if h == nil || h.Proxy == "" {
						continue
					}
					ok, extraPath := r.matchProxy(h.Proxy, port)
					if !ok {
						continue
					}
					routes = append(routes, route{hp: hp, scheme: scheme, mount: mount, target: h.Proxy, foreground: foreground, path: extraPath,
						byName: strings.Contains(strings.ToLower(h.Proxy), "localhost")})
				}
			}
		}
	}
	collect(sc, false)
	if sc != nil {
		for _, fg := range sc.Foreground {
			collect(fg, true)
		}
	}
	sort.Slice(routes, func(i, j int) bool {
		return routes[i].hp < routes[j].hp || (routes[i].hp == routes[j].hp && routes[i].mount < routes[j].mount)
	})

	if len(rawTCP) > 0 {
		r.add(Fail, "tailscale serve", fmt.Sprintf("forwards raw TCP to fleet (%s): fleet then gets no X-Forwarded-For and refuses every request", strings.Join(rawTCP, ", ")),
			"tailscale serve --tcp=<port> off, then "+r.serveFix(port))
	}
	var good, fg, odd, named []route
	for _, rt := range routes {
		switch {
		case rt.byName:
			named = append(named, rt)
		case rt.mount != "/" || rt.path != "":
			odd = append(odd, rt)
		case rt.foreground:
			fg = append(fg, rt)
		default:
			good = append(good, rt)
		}
	}
	switch {
	case len(good) > 0:
		r.add(OK, "tailscale serve", describe(good), "")
	case len(named) > 0:
		r.add(Fail, "tailscale serve", describe(named)+": tailscaled resolves localhost at every dial and may reach [::1], "+
			"which fleet does not hold and any local user can listen on", r.serveFix(port))
	case len(fg) > 0:
		r.add(Warn, "tailscale serve", describe(fg)+" only in the foreground: it stops when that 'tailscale serve' command exits", r.serveFix(port))
	case len(odd) > 0:
		r.add(Fail, "tailscale serve", describe(odd)+": fleet must be served at the root with no path (its pages link to /c/<id>/)", r.serveFix(port))
	default:
		r.add(Fail, "tailscale serve", "nothing proxies to "+r.wantTargets(port), r.serveFix(port))
	}
	if len(routes) == 0 {
		return
	}

	var funnel []string
	seen := map[ipn.HostPort]bool{}
	for _, rt := range routes {
		if seen[rt.hp] {
			continue
		}
		seen[rt.hp] = true
		on := sc.AllowFunnel[rt.hp]
		for _, f := range sc.Foreground {
			if f != nil && f.AllowFunnel[rt.hp] {
				on = true
			}
		}
		if on {
			funnel = append(funnel, string(rt.hp))
		}
	}
	if len(funnel) > 0 {
		fix := make([]string, 0, len(funnel))
		for _, hp := range funnel {
			p, _ := ipn.HostPort(hp).Port()
			fix = append(fix, fmt.Sprintf("tailscale funnel --https=%d off", p))
		}
		r.add(Fail, "funnel", "Funnel is on for "+strings.Join(funnel, ", ")+": the public internet reaches fleet's door (it refuses them, 403 funnel, but nothing public should get there)",
			strings.Join(fix, "; "))
	} else {
		r.add(OK, "funnel", "off for every name that publishes fleet", "")
	}
}

func describe(rs []route) string {
	parts := make([]string, 0, len(rs))
	for _, rt := range rs {
		host, port, _ := net.SplitHostPort(string(rt.hp))
		u := rt.scheme + "://" + host
		if !(rt.scheme == "https" && port == "443") && !(rt.scheme == "http" && port == "80") {
			u += ":" + port
		}
		parts = append(parts, u+rt.mount+" → "+rt.target)
	}
	return strings.Join(parts, ", ")
}

// matchProxy reports whether a Serve proxy target (as tailscaled reads it: "7420",
// "127.0.0.1:7420", "http://localhost:7420", "unix:/path") reaches this supervisor, and any path
// the proxy would prepend.
func (r *run) matchProxy(target string, port int) (bool, string) {
	if rest, ok := strings.CutPrefix(target, "unix:"); ok {
		return r.cfg.Socket != "" && samePath(rest, r.cfg.Socket), ""
	}
	s := target
	switch {
	case allDigits(s):
		s = "http://127.0.0.1:" + s
	case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"), strings.HasPrefix(s, "https+insecure://"):
	default:
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" {
		return false, ""
	}
	if !r.isFleetTarget(u.Host, port, false) {
		return false, ""
	}
	if u.Path != "" && u.Path != "/" {
		return true, u.Path
	}
	return true, ""
}

// isFleetTarget reports whether hostport (or "unix:/path" when tcp allows it) is this supervisor.
func (r *run) isFleetTarget(hostport string, port int, tcp bool) bool {
	if rest, ok := strings.CutPrefix(hostport, "unix:"); ok {
		return tcp && r.cfg.Socket != "" && samePath(rest, r.cfg.Socket)
	}
	host, p, err := net.SplitHostPort(hostport)
	if err != nil || p != strconv.Itoa(port) {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap() == netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

func samePath(a, b string) bool {
	if path.Clean(a) == path.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
