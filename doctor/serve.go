package doctor

// The Serve config: what publishes fleet, and how.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"tailscale.com/ipn"
)

// A route is one Serve web handler that proxies to this supervisor, through either door.
type route struct {
	hp         ipn.HostPort
	scheme     string // https or http
	mount      string
	target     string
	foreground bool
	path       string // a path the proxy prepends; fleet wants none
	unix       bool   // the unix-socket door; else the TCP door
	loose      string // why the target may reach someone other than fleet; "" when it cannot
}

// A rawForward is one raw TCP forward (serve --tcp, --tls-terminated-tcp) to either door: the
// bytes a peer writes reach fleet as they are, X-Forwarded-For included (S5e).
type rawForward struct {
	port         uint16
	terminateTLS bool
	target       string
}

// servePlan is what a Serve config does with fleet.
type servePlan struct {
	routes []route
	raw    []rawForward
}

func (r *run) wantTargets(port int) string {
	s := "http://127.0.0.1:" + strconv.Itoa(port)
	if r.cfg.Socket != "" {
		s = "unix:" + r.cfg.Socket + " or " + s
	}
	return s
}

// serveFix is the command that publishes fleet: its unix-socket door when one is given or when
// Tailscale SSH or tailscaled's outbound proxy rules the TCP door out (S5e), else its TCP door.
func (r *run) serveFix(port int) string {
	switch {
	case r.cfg.Socket != "":
		return "sudo tailscale serve --bg unix:" + r.cfg.Socket
	case r.ssh != sshOff, r.proxy.state == proxyOn, r.proxy.state == proxyUnreadable:
		return unixDoorFix()
	default:
		return "tailscale serve --bg http://127.0.0.1:" + strconv.Itoa(port)
	}
}

// unixDoorFix says how to move to the unix-socket door, at the place deploy/ uses.
func unixDoorFix() string {
	return "publish the unix-socket door instead: " + unixDoorCommands()
}

// unixDoorCommands start and publish the unix-socket door at the place deploy/ uses.
func unixDoorCommands() string {
	sock := DefaultSocketPath()
	return "fleet serve --socket " + shellWord(sock) + ", then sudo tailscale serve --bg " + shellWord("unix:"+sock)
}

// shellWord quotes s for a shell when it needs it (macOS's "Application Support").
func shellWord(s string) string {
	if strings.ContainsAny(s, " \t'\"$`\\") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}

// checkServe judges the Serve config: what publishes fleet (S2), what lets a peer's own bytes
// reach it (S5e), and Funnel.
func (r *run) checkServe(ctx context.Context, sc *ipn.ServeConfig, port int) {
	plan := r.readServe(sc, port)
	r.checkRawForwards(plan.raw)
	r.checkRoutes(ctx, plan.routes, port)
	r.checkSSH(plan.routes, port)
	r.checkOutboundProxy(plan.routes, port)
	if len(plan.routes) > 0 {
		r.checkFunnel(sc, plan.routes)
	}
}

// readServe finds every handler that reaches fleet, in the background config, in each
// foreground session's and in each Service's.
func (r *run) readServe(sc *ipn.ServeConfig, port int) servePlan {
	var plan servePlan
	r.collect(&plan, sc, false, port)
	if sc != nil {
		for _, fg := range sc.Foreground {
			r.collect(&plan, fg, true, port)
		}
	}
	sort.Slice(plan.routes, func(i, j int) bool {
		a, b := plan.routes[i], plan.routes[j]
		return a.hp < b.hp || (a.hp == b.hp && a.mount < b.mount)
	})
	sort.Slice(plan.raw, func(i, j int) bool { return plan.raw[i].port < plan.raw[j].port })
	return plan
}

func (r *run) collect(plan *servePlan, c *ipn.ServeConfig, foreground bool, port int) {
	if c == nil {
		return
	}
	r.collectListener(plan, c.TCP, c.Web, foreground, port)
	for _, svc := range c.Services {
		if svc != nil {
			r.collectListener(plan, svc.TCP, svc.Web, foreground, port)
		}
	}
}

// collectListener adds the raw forwards and web routes of one set of Serve listeners.
func (r *run) collectListener(plan *servePlan, tcp map[uint16]*ipn.TCPPortHandler, web map[ipn.HostPort]*ipn.WebServerConfig, foreground bool, port int) {
	for p, h := range tcp {
		if h != nil && h.TCPForward != "" && r.isRawFleetTarget(h.TCPForward, port) {
			plan.raw = append(plan.raw, rawForward{port: p, terminateTLS: h.TerminateTLS != "", target: h.TCPForward})
		}
	}
	for hp, wsc := range web {
		if wsc == nil {
			continue
		}
		scheme := "https"
		if p, err := hp.Port(); err == nil && tcp[p] != nil && tcp[p].HTTP {
			scheme = "http"
		}
		for mount, h := range wsc.Handlers {
			if h == nil || h.Proxy == "" {
				continue
			}
			rt, ok := r.matchProxy(h.Proxy, port)
			if !ok {
				continue
			}
			rt.hp, rt.scheme, rt.mount, rt.target, rt.foreground = hp, scheme, mount, h.Proxy, foreground
			plan.routes = append(plan.routes, rt)
		}
	}
}

// checkRawForwards: a raw TCP forward to either door hands fleet the bytes a peer wrote, so fleet
// refuses every /c/ request on that door while one exists (S5e).
func (r *run) checkRawForwards(raw []rawForward) {
	if len(raw) == 0 {
		r.add(OK, "raw tcp forward", "none reaches fleet", "")
		return
	}
	for _, f := range raw {
		door := "its TCP door"
		if strings.HasPrefix(f.target, "unix:") {
			door = "its unix-socket door"
		}
		flag := "--tcp"
		if f.terminateTLS {
			flag = "--tls-terminated-tcp"
		}
		r.add(Fail, "raw tcp forward",
			fmt.Sprintf("port %d forwards raw TCP to %s (%s): a peer writes its own X-Forwarded-For there, so fleet refuses every /c/ request on that door (401 tcp-forwardable)", f.port, f.target, door),
			fmt.Sprintf("tailscale serve %s=%d off", flag, f.port))
	}
}

// checkRoutes is the "tailscale serve" line: one background route at the root, to fleet itself,
// whose HTTPS addresses each present a valid certificate to a peer (O6, tlsserve.go).
func (r *run) checkRoutes(ctx context.Context, routes []route, port int) {
	var good, fg, odd, loose []route
	for _, rt := range routes {
		switch {
		case rt.loose != "":
			loose = append(loose, rt)
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
		h := r.checkCertificates(ctx, good)
		r.add(h.status, "tailscale serve", describe(good)+h.what, h.fix)
	case len(loose) > 0:
		r.add(Fail, "tailscale serve", describe(loose)+": "+loose[0].loose, r.serveFix(port))
	case len(fg) > 0:
		r.add(Warn, "tailscale serve", describe(fg)+" only in the foreground: it stops when that 'tailscale serve' command exits", r.serveFix(port))
	case len(odd) > 0:
		r.add(Fail, "tailscale serve", describe(odd)+": fleet must be served at the root with no path (its pages link to /c/<id>/)", r.serveFix(port))
	default:
		r.add(Fail, "tailscale serve", "nothing proxies to "+r.wantTargets(port), r.serveFix(port))
	}
}

// checkSSH: Tailscale SSH port forwards are dialled by tailscaled, like Serve's own requests, so
// while SSH is on fleet cannot tell them apart on its TCP door and refuses every /c/ request there
// (S5e). Its unix-socket door is out of their reach (see checkSocketPlace).
func (r *run) checkSSH(routes []route, port int) {
	tcpDoor := tcpDoorRoutes(routes)
	switch {
	case r.ssh == sshOff:
		r.add(OK, "tailscale ssh", "off: no SSH login can forward to fleet's doors", "")
	case len(tcpDoor) > 0:
		on := "on"
		if r.ssh == sshUnknown {
			on = "perhaps on (the prefs could not be read)"
		}
		r.add(Fail, "tailscale ssh",
			fmt.Sprintf("%s while Serve publishes the TCP door (%s): an SSH login can forward to 127.0.0.1:%d and write its own X-Forwarded-For, so fleet refuses every /c/ request there (401 tcp-forwardable)", on, describe(tcpDoor), port),
			r.tcpDoorFix()+" (or turn Tailscale SSH off: tailscale set --ssh=false)")
	case r.ssh == sshOn:
		r.add(OK, "tailscale ssh", "on, and Serve does not publish the TCP door that SSH forwards could reach", "")
	}
}

// tcpDoorRoutes are the routes that publish fleet's TCP door.
func tcpDoorRoutes(routes []route) []route {
	var tcpDoor []route
	for _, rt := range routes {
		if !rt.unix {
			tcpDoor = append(tcpDoor, rt)
		}
	}
	return tcpDoor
}

// tcpDoorFix moves a published TCP door that fleet refuses (S5e) to the unix-socket door: the
// given socket, else the place deploy/ uses.
func (r *run) tcpDoorFix() string {
	if r.cfg.Socket != "" {
		return "publish the unix-socket door instead: sudo tailscale serve --bg unix:" + r.cfg.Socket
	}
	return unixDoorFix()
}

// checkFunnel: Funnel must be off for every name that publishes fleet.
func (r *run) checkFunnel(sc *ipn.ServeConfig, routes []route) {
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
	if len(funnel) == 0 {
		r.add(OK, "funnel", "off for every name that publishes fleet", "")
		return
	}
	fix := make([]string, 0, len(funnel))
	for _, hp := range funnel {
		p, _ := ipn.HostPort(hp).Port()
		fix = append(fix, fmt.Sprintf("tailscale funnel --https=%d off", p))
	}
	r.add(Fail, "funnel", "Funnel is on for "+strings.Join(funnel, ", ")+": the public internet reaches fleet's door (it refuses them, 403 funnel, but nothing public should get there)",
		strings.Join(fix, "; "))
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
// "127.0.0.1:7420", "http://localhost:7420", "unix:/path") reaches this supervisor, as a route
// whose hp, scheme, mount and target the caller fills in.
func (r *run) matchProxy(target string, port int) (route, bool) {
	if rest, ok := strings.CutPrefix(target, "unix:"); ok {
		return route{unix: true}, r.cfg.Socket != "" && samePath(rest, r.cfg.Socket)
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
		return route{}, false
	}
	loose, ok := tcpDoorTarget(u.Host, port)
	if !ok {
		return route{}, false
	}
	rt := route{loose: loose}
	if u.Path != "" && u.Path != "/" {
		rt.path = u.Path
	}
	return rt, true
}

// tcpDoorTarget reports whether hostport names fleet's TCP port on this machine: 127.0.0.1, or a
// name or address that may reach it or its port's other half — localhost, [::1] — with why those
// are loose (fleet holds 127.0.0.1 only).
func tcpDoorTarget(hostport string, port int) (loose string, ok bool) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil || p != strconv.Itoa(port) {
		return "", false
	}
	if strings.EqualFold(host, "localhost") {
		return "tailscaled resolves localhost at every dial and may reach [::1], which fleet does not hold and any local user can listen on", true
	}
	ip, err := netip.ParseAddr(host)
	switch {
	case err != nil || ip.Zone() != "":
		return "", false
	case ip.Unmap() == netip.AddrFrom4([4]byte{127, 0, 0, 1}):
		return "", true
	case ip == netip.IPv6Loopback():
		return "fleet does not listen on [::1]: any local user can, and would get fleet's traffic", true
	}
	return "", false
}

// isRawFleetTarget reports whether a raw TCP forward's target ("127.0.0.1:7420", "localhost:7420",
// "[::1]:7420", "unix:/path") reaches either of fleet's doors.
func (r *run) isRawFleetTarget(target string, port int) bool {
	if rest, ok := strings.CutPrefix(target, "unix:"); ok {
		return r.cfg.Socket != "" && samePath(rest, r.cfg.Socket)
	}
	_, ok := tcpDoorTarget(target, port)
	return ok
}

// samePath reports whether two socket paths name the same file: equal once cleaned, equal once
// their symlinks are resolved, or the same file on disk. A relative path is taken from /, the
// working folder of tailscaled as a service.
func samePath(a, b string) bool {
	a, b = absFromRoot(a), absFromRoot(b)
	if a == b || resolvePath(a) == resolvePath(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

func absFromRoot(p string) string {
	if !filepath.IsAbs(p) {
		p = "/" + p
	}
	return filepath.Clean(p)
}

// resolvePath is p with its symlinks resolved: all of them when p exists, else its folder's.
func resolvePath(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(dir, filepath.Base(p))
	}
	return filepath.Clean(p)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
