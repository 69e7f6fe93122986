// Package doctor checks that a machine's fleet set-up is sound and says how to fix what is not.
// `fleet doctor` prints its checks, one line each:
//
//	OK   tailscaled: reachable, version 1.102.5, sup.tailnet.ts.net
//	WARN tailscaled mode: userspace networking (TUN:false): … — fix: …
//	FAIL tailscale serve: nothing proxies to http://127.0.0.1:7420 — fix: tailscale serve --bg http://127.0.0.1:7420
//
// What it checks (rules of ../shared/SPEC.md):
//   - tailscaled answers on its LocalAPI, is Running, and its version (1.94+ for a unix socket);
//   - the tailscaled mode: a kernel TUN is OK; userspace networking is WARN, because then a
//     tailnet peer can reach 127.0.0.1 ports straight through netstack and the supervisor must
//     ask WhoIs about every connection to tell (S5b);
//   - the Serve config points at this supervisor — http://127.0.0.1:<port> or unix:<socket> — at
//     the root, in the background (S2);
//   - Funnel is off for the names that publish fleet;
//   - the state folder and its files are private (F1), the token is well-formed;
//   - supervisor.addr is there, names a loopback address, and the supervisor there answers the
//     fleet API with this folder's token (and so does the unix socket, when one is given).
//
// It only reads: it changes no file, no mode and no Serve config. It never prints the token, and
// it sends the bearer only to a loopback literal address or the given unix socket, never through
// an environment proxy.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
	"github.com/phase-console/fleet/internal/state"
	"tailscale.com/ipn"
	"tailscale.com/ipn/ipnstate"
)

// LocalAPI is the part of tailscaled's LocalAPI that the doctor reads. *local.Client satisfies it.
type LocalAPI interface {
	StatusWithoutPeers(ctx context.Context) (*ipnstate.Status, error)
	GetServeConfig(ctx context.Context) (*ipn.ServeConfig, error)
}

// DefaultPort is the supervisor's default port (SPEC S1), used when neither Config.Port nor
// supervisor.addr says otherwise.
const DefaultPort = 7420

// unixServeMinVersion is the first tailscaled that can serve to a unix socket.
var unixServeMinVersion = [2]int{1, 94}

// Config is what Run checks.
type Config struct {
	StateHome       string   // <stateHome>
	LocalAPI        LocalAPI // tailscaled's LocalAPI
	TailscaleSocket string   // only for messages: where LocalAPI talks to

	// Port is the supervisor's TCP port. Zero: the port in supervisor.addr, else DefaultPort.
	Port int
	// Socket is the unix socket of `fleet serve --socket`, if the set-up uses one.
	Socket string

	// HTTPClient probes the supervisor. Nil: a client with a short timeout and no proxy.
	HTTPClient *http.Client
	// Timeout bounds each LocalAPI call and probe. Zero: 5 s.
	Timeout time.Duration
}

// Status is the outcome of one check.
type Status int

const (
	OK Status = iota
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case Warn:
		return "WARN"
	default:
		return "FAIL"
	}
}

// A Check is one line of the doctor's report.
type Check struct {
	Status Status
	Name   string // what was checked: "tailscaled", "tailscale serve", "fleet.token", …
	What   string // what was found
	Fix    string // for Warn and Fail: the command or step that fixes it
}

// String is the check's line: "FAIL name: what — fix: fix".
func (c Check) String() string {
	s := fmt.Sprintf("%-4s %s: %s", c.Status, c.Name, c.What)
	if c.Status != OK && c.Fix != "" {
		s += " — fix: " + c.Fix
	}
	return s
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Run runs every check and returns them in order. It never fails as a whole: what cannot be
// checked is itself a check.
func Run(ctx context.Context, cfg Config) []Check {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{
			Timeout: cfg.Timeout,
			// Never an environment proxy: the bearer goes to this machine only.
			// And only to a supervisor run by this same user (never a squatter on its port).
			Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, DialContext: peercred.DialOwn},
		}
	}
	r := &run{cfg: cfg}
	port, portSource := r.port()
	r.checkTailscale(ctx, port)
	r.checkState()
	r.checkSupervisor(ctx, port, portSource)
	if cfg.Socket != "" {
		r.checkSocket(ctx)
	}
	return r.checks
}

type run struct {
	cfg    Config
	checks []Check
	token  string // the fleet token, when it could be read; never printed
}

func (r *run) add(s Status, name, what, fix string) {
	r.checks = append(r.checks, Check{Status: s, Name: name, What: what, Fix: fix})
}

func (r *run) fleetFile(name string) string {
	return filepath.Join(state.FleetDir(r.cfg.StateHome), name)
}

// port is the supervisor's port: the flag, else supervisor.addr's, else the default.
func (r *run) port() (int, string) {
	if r.cfg.Port > 0 {
		return r.cfg.Port, "--port"
	}
	if ap, err := readAddr(r.fleetFile(state.AddrFile)); err == nil {
		return int(ap.Port()), "supervisor.addr"
	}
	return DefaultPort, "default"
}

func readAddr(path string) (netip.AddrPort, error) {
	b, err := state.ReadPrivateFile(path)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.ParseAddrPort(strings.TrimSpace(string(b)))
}

// --- tailscaled and Serve ---

func (r *run) checkTailscale(ctx context.Context, port int) {
	if r.cfg.LocalAPI == nil {
		r.add(Fail, "tailscaled", "no LocalAPI to ask", "pass --tailscale-socket")
		return
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	st, err := r.cfg.LocalAPI.StatusWithoutPeers(sctx)
	cancel()
	if err != nil {
		r.add(Fail, "tailscaled", fmt.Sprintf("cannot reach its LocalAPI%s (%s)", r.socketNote(), shortErr(err)),
			"start tailscaled (Linux: sudo systemctl start tailscaled), or pass --tailscale-socket PATH")
		return
	}
	self := ""
	if st.Self != nil {
		self = strings.TrimSuffix(st.Self.DNSName, ".")
	}
	if st.BackendState != ipn.Running.String() {
		r.add(Fail, "tailscaled", fmt.Sprintf("version %s is %s, not Running", shortVersion(st.Version), st.BackendState), "tailscale up")
		return
	}
	what := fmt.Sprintf("reachable, version %s, Running", shortVersion(st.Version))
	if self != "" {
		what += ", " + self
	}
	r.add(OK, "tailscaled", what, "")

	if st.TUN {
		r.add(OK, "tailscaled mode", "kernel TUN: no tailnet peer can reach 127.0.0.1 ports directly", "")
	} else {
		r.add(Warn, "tailscaled mode",
			"userspace networking (TUN:false): a tailnet peer can reach 127.0.0.1 ports straight through netstack, so fleet must ask WhoIs about every connection (S5b)",
			"run tailscaled with a kernel TUN (drop --tun=userspace-networking; in a container give it /dev/net/tun and CAP_NET_ADMIN)")
	}

	if r.cfg.Socket != "" {
		if v, ok := parseVersion(st.Version); ok && (v[0] < unixServeMinVersion[0] || (v[0] == unixServeMinVersion[0] && v[1] < unixServeMinVersion[1])) {
			r.add(Fail, "tailscaled version", fmt.Sprintf("%s cannot serve to a unix socket (needs %d.%d or later)", shortVersion(st.Version), unixServeMinVersion[0], unixServeMinVersion[1]),
				"update tailscale, or publish the TCP door: tailscale serve --bg http://127.0.0.1:"+strconv.Itoa(port))
		}
	}

	gctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	sc, err := r.cfg.LocalAPI.GetServeConfig(gctx)
	cancel()
	if err != nil {
		r.add(Fail, "tailscale serve", fmt.Sprintf("cannot read the Serve config: %v", err), "check 'tailscale serve status'")
		return
	}
	r.checkServe(sc, self, port)
}

func (r *run) socketNote() string {
	if r.cfg.TailscaleSocket == "" {
		return ""
	}
	return " at " + r.cfg.TailscaleSocket
}

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

// shortVersion is "1.102.5" of "1.102.5-t0123abcd-gdeadbeef".
func shortVersion(v string) string {
	if v == "" {
		return "(unknown)"
	}
	s, _, _ := strings.Cut(v, "-")
	return s
}

func parseVersion(v string) ([2]int, bool) {
	parts := strings.SplitN(shortVersion(v), ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return [2]int{maj, minor}, err1 == nil && err2 == nil
}

// --- state files (F1) ---

func (r *run) checkState() {
	home := r.cfg.StateHome
	fleetDir := state.FleetDir(home)
	for _, dir := range []string{home, fleetDir} {
		switch err := checkDir(dir); {
		case errors.Is(err, fs.ErrNotExist):
			r.add(Warn, "state folder", dir+" does not exist yet", "start the supervisor once (fleet serve) to create it")
			return
		case err != nil:
			r.add(Fail, "state folder", errText(err), fixOf(err, "move it out of the way"))
			return
		}
	}
	r.add(OK, "state folder", fleetDir+" is private (0700)", "")

	tokPath := filepath.Join(fleetDir, state.TokenFile)
	tok, err := state.ReadToken(tokPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Warn, "fleet.token", tokPath+" does not exist yet", "start the supervisor once (fleet serve) to create it")
	case err != nil:
		var me *state.ModeError
		if errors.As(err, &me) {
			r.add(Fail, "fleet.token", errText(err), fixOf(err, ""))
		} else {
			// ReadToken's errors never contain the token.
			r.add(Fail, "fleet.token", err.Error(), "move it away and restart fleet serve: a new token is made, and consoles read it within 2 s")
		}
	default:
		r.token = tok
		r.add(OK, "fleet.token", tokPath+" is private (0600) and well-formed", "")
	}

	regPath := filepath.Join(fleetDir, state.RegistryFile)
	data, err := state.ReadPrivateFile(regPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(OK, "consoles.json", "no console registered yet", "")
	case err != nil:
		r.add(Fail, "consoles.json", errText(err), fixOf(err, ""))
	case !json.Valid(data):
		r.add(Fail, "consoles.json", regPath+" does not parse; fleet serve refuses to start with it", "repair it, or move it away (consoles register again when they start)")
	default:
		r.add(OK, "consoles.json", regPath+" is private (0600)", "")
	}
}

// checkDir is state.EnsureDir without the creating: an existing folder of ours, no group or
// world bits.
func checkDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return &state.ModeError{Path: dir, Mode: st.Mode(), Why: "is not a folder", Fix: "move it out of the way"}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return &state.ModeError{Path: dir, Mode: st.Mode(), Why: fmt.Sprintf("is owned by uid %d, not by this user (uid %d)", sys.Uid, os.Geteuid()),
			Fix: fmt.Sprintf("chown %d %s", os.Geteuid(), dir)}
	}
	if st.Mode().Perm()&0o077 != 0 {
		return &state.ModeError{Path: dir, Mode: st.Mode(), Why: "is group- or world-accessible", Fix: "chmod 700 " + dir}
	}
	return nil
}

// errText is an error without its fix (the fix has its own place on the line).
func errText(err error) string {
	var me *state.ModeError
	if errors.As(err, &me) {
		return fmt.Sprintf("%s %s (mode %04o)", me.Path, me.Why, me.Mode.Perm())
	}
	return err.Error()
}

func fixOf(err error, otherwise string) string {
	var me *state.ModeError
	if errors.As(err, &me) && me.Fix != "" {
		return me.Fix
	}
	return otherwise
}

// --- the running supervisor ---

func (r *run) checkSupervisor(ctx context.Context, port int, portSource string) {
	addrPath := r.fleetFile(state.AddrFile)
	b, err := state.ReadPrivateFile(addrPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Fail, "supervisor", addrPath+" is missing: no supervisor has started with this state folder",
			"start it: fleet serve (as a service: systemctl --user enable --now fleet)")
		return
	case err != nil:
		r.add(Fail, "supervisor", errText(err), fixOf(err, ""))
		return
	}
	addr := strings.TrimSpace(string(b))
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		r.add(Fail, "supervisor", fmt.Sprintf("%s holds %q, not a loopback address; the bearer is never sent there", addrPath, addr),
			"restart fleet serve (it rewrites the file)")
		return
	}
	if portSource == "--port" && int(ap.Port()) != port {
		r.add(Fail, "supervisor", fmt.Sprintf("supervisor.addr says %s, but --port is %d", addr, port),
			fmt.Sprintf("pass --port %d, or restart fleet serve --port %d", ap.Port(), port))
		return
	}
	r.probe(ctx, "supervisor", "http://"+ap.String(), r.cfg.HTTPClient, "start it: fleet serve (as a service: systemctl --user start fleet)")
}

func (r *run) checkSocket(ctx context.Context) {
	sock := r.cfg.Socket
	if err := checkDir(filepath.Dir(sock)); err != nil {
		r.add(Fail, "unix socket", errText(err), fixOf(err, "start fleet serve --socket "+sock))
		return
	}
	st, err := os.Lstat(sock)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Fail, "unix socket", sock+" does not exist: no supervisor listens there", "start fleet serve --socket "+sock)
		return
	case err != nil:
		r.add(Fail, "unix socket", err.Error(), "")
		return
	case st.Mode().Type() != fs.ModeSocket:
		r.add(Fail, "unix socket", sock+" is not a socket", "move it away and start fleet serve --socket "+sock)
		return
	case st.Mode().Perm()&0o077 != 0:
		r.add(Fail, "unix socket", fmt.Sprintf("%s is group- or world-accessible (mode %04o)", sock, st.Mode().Perm()), "chmod 600 "+sock)
		return
	}
	c := &http.Client{
		Timeout: r.cfg.Timeout,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
				if err != nil {
					return nil, err
				}
				if err := peercred.CheckOwn(c); err != nil {
					c.Close()
					return nil, err
				}
				return c, nil
			},
		},
	}
	r.probe(ctx, "unix socket", "http://localhost", c, "start fleet serve --socket "+sock)
}

// probe asks the fleet API at base for the consoles, with this folder's bearer when it has one.
func (r *run) probe(ctx context.Context, name, base string, c *http.Client, startFix string) {
	where := strings.TrimPrefix(base, "http://")
	if name == "unix socket" {
		where = r.cfg.Socket
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, base+"/fleet/v1/consoles", nil)
	if err != nil {
		r.add(Fail, name, err.Error(), "")
		return
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := c.Do(req)
	if err != nil {
		r.add(Fail, name, fmt.Sprintf("nothing answers at %s (%v)", where, shortErr(err)), startFix)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	reason := resp.Header.Get("X-Fleet-Reason")
	switch {
	case resp.StatusCode == http.StatusOK && r.token != "":
		var list struct {
			Consoles []struct {
				Up bool `json:"up"`
			} `json:"consoles"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			r.add(Fail, name, fmt.Sprintf("%s answers, but not like fleet's API", where), "check what listens there")
			return
		}
		up := 0
		for _, c := range list.Consoles {
			if c.Up {
				up++
			}
		}
		r.add(OK, name, fmt.Sprintf("answering at %s: %d console(s), %d up", where, len(list.Consoles), up), "")
	case reason == "":
		r.add(Fail, name, fmt.Sprintf("%s answers %d, but it is not fleet", where, resp.StatusCode), "stop what listens there, then start fleet serve")
	case r.token == "":
		r.add(Warn, name, fmt.Sprintf("fleet answers at %s, but without a readable token it cannot be asked more", where), "fix fleet.token (above)")
	case resp.StatusCode == http.StatusUnauthorized:
		r.add(Fail, name, fmt.Sprintf("the supervisor at %s does not take this state folder's token: it runs with another state folder", where),
			"pass that supervisor's --state-dir, or stop it and start fleet serve with this one")
	default:
		r.add(Fail, name, fmt.Sprintf("the supervisor at %s answered %d %s", where, resp.StatusCode, reason), "see the supervisor's log (fleet.rejected lines)")
	}
}

// shortErr drops the URL from a client error, keeping the cause.
func shortErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}
