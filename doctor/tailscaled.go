package doctor

// tailscaled itself: reachable, Running, its mode and version; its prefs and command line, read
// here and judged with the Serve config (serve.go, tsproxy.go).

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"tailscale.com/ipn"
)

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

	r.checkVersion(st.Version, port)

	r.readPrefs(ctx)
	r.readTailscaledArgs(ctx)

	gctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	sc, err := r.cfg.LocalAPI.GetServeConfig(gctx)
	cancel()
	if err != nil {
		r.add(Fail, "tailscale serve", fmt.Sprintf("cannot read the Serve config: %v", err), "check 'tailscale serve status'")
		return
	}
	r.checkServe(ctx, sc, port)
}

// checkVersion is tailscaled's version on a line of its own (O6): OK, unless the unix-socket
// door is asked of a tailscaled too old to serve to a socket (FAIL), or tailscaled did not say
// (WARN: what the doctor cannot know is never OK).
func (r *run) checkVersion(version string, port int) {
	v, ok := parseVersion(version)
	switch {
	case !ok:
		r.add(Warn, "tailscaled version", fmt.Sprintf("tailscaled did not say a version fleet can read (%q)", version),
			"tailscale version")
	case r.cfg.Socket != "" && (v[0] < unixServeMinVersion[0] || (v[0] == unixServeMinVersion[0] && v[1] < unixServeMinVersion[1])):
		r.add(Fail, "tailscaled version", fmt.Sprintf("%s cannot serve to a unix socket (needs %d.%d or later)", shortVersion(version), unixServeMinVersion[0], unixServeMinVersion[1]),
			"update tailscale, or publish the TCP door: tailscale serve --bg http://127.0.0.1:"+strconv.Itoa(port))
	default:
		r.add(OK, "tailscaled version", shortVersion(version), "")
	}
}

// sshState is what tailscaled's prefs say about Tailscale SSH.
type sshState int

const (
	sshUnknown sshState = iota // not asked, or the prefs could not be read: judged as on
	sshOff
	sshOn
)

// readPrefs learns whether tailscaled runs Tailscale SSH. fleet itself refuses every /c/ request
// while it cannot tell (S5e), so an unreadable prefs is a FAIL of its own.
func (r *run) readPrefs(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	prefs, err := r.cfg.LocalAPI.GetPrefs(pctx)
	cancel()
	switch {
	case err != nil || prefs == nil:
		why := "no prefs"
		if err != nil {
			why = shortErr(err)
		}
		r.add(Fail, "tailscaled prefs", fmt.Sprintf("cannot read them (%s): fleet cannot tell whether Tailscale SSH is on, so it refuses every /c/ request (401 unverified)", why),
			"check that this user may read tailscaled's LocalAPI: tailscale debug prefs")
	case prefs.RunSSH:
		r.ssh = sshOn
	default:
		r.ssh = sshOff
	}
}

func (r *run) socketNote() string {
	if r.cfg.TailscaleSocket == "" {
		return ""
	}
	return " at " + r.cfg.TailscaleSocket
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
