package tailnet

// SPEC S5e: tailscaled's uid proves that tailscaled opened a connection, not that Serve's HTTP
// proxy did. Tailscale SSH port forwards (`ssh -L 9000:127.0.0.1:7420`) and Serve's raw TCP
// forwards (`serve --tcp`, `--tls-terminated-tcp`, TCPForward in the Serve config) are dialled by
// tailscaled too, and carry the bytes a peer wrote, X-Forwarded-For included. So a door is judged
// "tcp-forwardable" while tailscaled could carry a peer's raw bytes to it:
//
//   - the TCP door: while prefs say RunSSH, or a raw forward in any Serve config (the node's, a
//     Service's, a foreground session's) may reach 127.0.0.1:<its port>, or tailscaled's command
//     line turns on one of its outbound proxies (--socks5-server, --outbound-http-proxy-listen:
//     they dial 127.0.0.1 as tailscaled for whoever reaches them — any local process, and with
//     userspace networking any tailnet peer allowed to — and no LocalAPI call shows them), or
//     that command line cannot be read (Config.TailscaledArgs; fleet serve reads
//     /proc/<pid>/cmdline of the process listening on the LocalAPI socket);
//   - the unix door: while a raw forward names its socket (TCPForward "unix:PATH"). Tailscale
//     SSH forwards unix sockets only below the login's home, /tmp and /run/user/<uid>, which the
//     socket's folder never is (supervisor.ListenUnix).
//
// fleet learns them by polling the LocalAPI (GetPrefs, GetServeConfig) and tailscaled's command
// line every forwardPollInterval. It fails closed:
//
//   - until it has an answer, after a failed poll, and when its latest answer is older than
//     forwardMaxAge (5 s), every /c/ request is 401 unverified (a request that finds the answer
//     too old asks tailscaled itself, once for all waiting requests);
//   - a connection is judged by every answer since it was accepted, not only by the latest: one
//     opened through a forward that was removed since (or while fleet could not tell) stays
//     refused, and the 401 closes it. Otherwise a peer could open a connection through the
//     forward, wait for the operator to remove it, and then speak. Serve's own keep-alive
//     connection from that time is refused once, and tailscaled opens a new one.
//
// What polling cannot see is a forward that came and went between two polls (at most
// forwardPollInterval apart); SPEC S5e allows 5 s.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phase-console/fleet/internal/state"
	"github.com/phase-console/fleet/internal/tsargs"
	"github.com/phase-console/fleet/proxy"
	"tailscale.com/ipn"
	"tailscale.com/util/singleflight"
)

const (
	// forwardPollInterval is how often tailscaled's prefs and Serve config are asked.
	forwardPollInterval = 2 * time.Second
	// forwardMaxAge is how old an answer may be and still be used (SPEC S5e: 5 s). Two polls
	// start at most forwardPollInterval + forwardCallTimeout apart, well within it.
	forwardMaxAge = 5 * time.Second
	// forwardCallTimeout bounds one poll.
	forwardCallTimeout = 2 * time.Second
)

// doorKey names one watched door: the TCP door by its port on 127.0.0.1, the unix door by its
// socket's path.
type doorKey struct {
	port uint16
	sock string
}

func doorKeyOf(a net.Addr) (doorKey, bool) {
	switch a := a.(type) {
	case *net.TCPAddr:
		if a.Port > 0 && a.Port < 1<<16 {
			return doorKey{port: uint16(a.Port)}, true
		}
	case *net.UnixAddr:
		if a.Name != "" {
			return doorKey{sock: a.Name}, true
		}
	}
	return doorKey{}, false
}

// forwardView is one answer of tailscaled: its prefs' RunSSH, every raw TCP forward in its
// Serve config and whether its command line turns on an outbound proxy, or why it could not be
// asked.
type forwardView struct {
	asked    time.Time // when the calls that gave it were started
	err      error     // not nil: nothing is known
	runSSH   bool
	forwards []string // every TCPForward target
	proxy    string   // the argument that turns on an outbound proxy ("": none)
	argsErr  error    // not nil: tailscaled's command line could not be read (the TCP door only)
}

// doorState is what the answers so far say about one door.
type doorState struct {
	now     *proxy.Refusal // the latest answer's verdict; nil: not forwardable
	dirtyAt uint64         // the last answer under which the door was forwardable or unknown
	dirty   *proxy.Refusal // that answer's verdict
}

// forwardWatch follows tailscaled's prefs and Serve config and answers, for a connection, whether
// its door is (or was, since the connection was accepted) reachable through a raw forward.
type forwardWatch struct {
	api      LocalAPI
	args     func(ctx context.Context) ([]string, error) // tailscaled's command line
	now      func() time.Time
	interval time.Duration

	flight   singleflight.Group[string, struct{}]
	loopOnce sync.Once

	mu    sync.Mutex
	epoch uint64 // how many answers have been recorded
	cur   forwardView
	doors map[doorKey]*doorState
}

func newForwardWatch(api LocalAPI, args func(ctx context.Context) ([]string, error), now func() time.Time) *forwardWatch {
	return &forwardWatch{api: api, args: args, now: now, interval: forwardPollInterval, doors: map[doorKey]*doorState{}}
}

// Watch starts judging the door listening at addr for raw forwards (SPEC S5e), and (once) the
// polling of tailscaled that keeps the answer fresh until stop is closed. It asks tailscaled once
// before it returns. Call it before accepting the first connection on addr: a request on a door
// that is not watched, or on a connection accepted before any answer, is never verified.
func (v *Verifier) Watch(addr net.Addr, stop <-chan struct{}) { v.forwards.watch(addr, stop) }

// Refresh asks tailscaled now what the forward watch follows (prefs, the Serve config, its
// command line), as the next poll would, and records the answer before it returns (unless ctx
// ends first: an answer nobody waited for is not recorded).
func (v *Verifier) Refresh(ctx context.Context) { v.forwards.poll(ctx) }

// watch starts judging the door listening at addr, and (once) the polling that keeps the answer
// fresh until stop is closed. It asks tailscaled once before it returns, so that the door's
// first connections find an answer. Call it before accepting connections on addr: a connection
// accepted before any answer is never served.
func (w *forwardWatch) watch(addr net.Addr, stop <-chan struct{}) {
	if k, ok := doorKeyOf(addr); ok {
		w.mu.Lock()
		if w.doors[k] == nil {
			// Nothing was accepted on this door before now, so only the latest answer and
			// those after it count.
			ds := &doorState{dirtyAt: w.epoch, dirty: unverified("fleet had not yet asked tailscaled whether raw forwards reach this door")}
			if !w.cur.asked.IsZero() && w.cur.err == nil && w.now().Sub(w.cur.asked) <= forwardMaxAge {
				ds.now = w.cur.judge(k)
				if ds.now != nil {
					ds.dirty = ds.now
				} else if w.epoch > 0 {
					ds.dirtyAt = w.epoch - 1
				}
			} else {
				ds.now = ds.dirty
			}
			w.doors[k] = ds
		}
		w.mu.Unlock()
	}
	w.loopOnce.Do(func() {
		w.poll(context.Background())
		go w.loop(stop)
	})
}

func (w *forwardWatch) loop(stop <-chan struct{}) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.poll(context.Background())
		}
	}
}

// poll asks tailscaled once (one call at a time, however many ask) and records the answer. A
// call given up by every caller that waited for it records nothing: a client that hangs up must
// not make fleet forget what it knew.
func (w *forwardWatch) poll(ctx context.Context) {
	<-w.flight.DoChanContext(ctx, "poll", func(ctx context.Context) (struct{}, error) {
		v := w.ask(ctx)
		if ctx.Err() == nil {
			w.record(v)
		}
		return struct{}{}, nil
	})
}

// ask reads RunSSH, the Serve config and tailscaled's command line.
func (w *forwardWatch) ask(ctx context.Context) forwardView {
	v := forwardView{asked: w.now()}
	ctx, cancel := context.WithTimeout(ctx, forwardCallTimeout)
	defer cancel()
	prefs, err := w.api.GetPrefs(ctx)
	if err == nil && prefs == nil {
		err = errors.New("no prefs")
	}
	if err != nil {
		v.err = fmt.Errorf("reading tailscaled's prefs: %w", err)
		return v
	}
	sc, err := w.api.GetServeConfig(ctx)
	if err != nil {
		v.err = fmt.Errorf("reading tailscaled's Serve config: %w", err)
		return v
	}
	v.runSSH = prefs.RunSSH
	v.forwards = rawForwards(sc, nil)
	if args, err := w.args(ctx); err != nil {
		v.argsErr = err
	} else {
		v.proxy = tsargs.OutboundProxy(args)
	}
	return v
}

// rawForwards appends every TCPForward target in sc, its Services and its foreground sessions.
func rawForwards(sc *ipn.ServeConfig, out []string) []string {
	if sc == nil {
		return out
	}
	add := func(tcp map[uint16]*ipn.TCPPortHandler) {
		for _, h := range tcp {
			if h != nil && h.TCPForward != "" {
				out = append(out, h.TCPForward)
			}
		}
	}
	add(sc.TCP)
	for _, svc := range sc.Services {
		if svc != nil {
			add(svc.TCP)
		}
	}
	for _, fg := range sc.Foreground {
		out = rawForwards(fg, out)
	}
	return out
}

// record makes v the latest answer and judges every door by it.
func (w *forwardWatch) record(v forwardView) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A gap — no answer before, a failed one, or one too old — is a time fleet knows nothing
	// about: connections accepted during it are judged as if a forward had been there.
	gap := w.cur.asked.IsZero() || w.cur.err != nil || v.asked.Sub(w.cur.asked) > forwardMaxAge
	w.epoch++
	for k, ds := range w.doors {
		if gap {
			ds.dirtyAt, ds.dirty = w.epoch-1, unverified("fleet could not tell whether raw forwards reached this door when this connection was opened")
		}
		if v.err != nil {
			// The error may name tailscaled's socket (in its owner's home): the log's only.
			ds.now = unverified("cannot tell whether tailscaled forwards raw TCP or runs Tailscale SSH: it did not answer; is tailscaled running? This machine's log (fleet.rejected) says more")
			ds.now.LogDetail = v.err.Error()
		} else {
			ds.now = v.judge(k)
		}
		if ds.now != nil {
			ds.dirtyAt, ds.dirty = w.epoch, ds.now
		}
	}
	w.cur = v
}

// epochNow is the number of answers recorded so far: a connection keeps it from its accept.
func (w *forwardWatch) epochNow() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epoch
}

// judgeConn answers S5e for a request on a connection to door, accepted when epoch answers had
// been recorded. A too-old answer is refreshed first.
func (w *forwardWatch) judgeConn(ctx context.Context, door doorKey, epoch uint64) *proxy.Refusal {
	if !w.fresh() {
		w.poll(ctx)
		if !w.fresh() {
			return unverified("cannot tell whether tailscaled forwards raw TCP or runs Tailscale SSH: it did not answer in time")
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ds := w.doors[door]
	switch {
	case ds == nil:
		return unverified("this door is not watched for raw forwards")
	case ds.now != nil:
		return ds.now
	case ds.dirtyAt >= epoch:
		return &proxy.Refusal{Status: http.StatusUnauthorized, Reason: ds.dirty.Reason,
			Detail:    "this connection was opened before fleet last saw this door safe, so it is closed (a new connection is judged afresh). What fleet saw: " + ds.dirty.Detail,
			LogDetail: ds.dirty.LogDetail}
	}
	return nil
}

func (w *forwardWatch) fresh() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.cur.asked.IsZero() && w.now().Sub(w.cur.asked) <= forwardMaxAge
}

const unixDoorFix = "publish fleet on its unix-socket door instead: run 'fleet serve --socket PATH' and publish it with 'tailscale serve unix:PATH'"

// What a tcp-forwardable page says. The page answers whoever sent the request — a Funnel visitor
// from the internet and a tagged node too, as S5e is judged before S5c — so it names the fix and
// nothing of this machine's set-up: which of tailscaled's features, its flags and listen
// addresses, a forward's target, a socket's path (which names its owner's uid or home) go to the
// log line only (forwardable's why).
const (
	forwardableTCPPage = "tailscaled can carry bytes that a peer wrote to this door — through Tailscale SSH, " +
		"a raw TCP forward of Tailscale Serve or an outbound proxy of tailscaled's, or fleet cannot rule that out — " +
		"so nothing here proves who sent a request, X-Forwarded-For included. This machine's log (fleet.rejected) " +
		"and 'fleet doctor' say which. Turn it off, or " + unixDoorFix
	forwardableUnixPage = "a raw TCP forward of Tailscale Serve reaches this door's socket, so a tailnet peer writes " +
		"the request bytes itself, X-Forwarded-For included; this machine's log (fleet.rejected) names it. Remove that " +
		"forward and publish the socket with Serve's HTTP proxy: 'tailscale serve unix:PATH'"
)

// forwardable is 401 tcp-forwardable: page, the generic sentence above; why, for the log only,
// what fleet saw on this machine.
func forwardable(page, why string) *proxy.Refusal {
	return &proxy.Refusal{Status: http.StatusUnauthorized, Reason: "tcp-forwardable", Detail: page, LogDetail: why}
}

// judge is the verdict of v for door k: nil, or 401 tcp-forwardable naming the fix.
func (v forwardView) judge(k doorKey) *proxy.Refusal {
	if k.sock != "" {
		for _, fw := range v.forwards {
			if unixTargetIs(fw, k.sock) {
				return forwardable(forwardableUnixPage, fmt.Sprintf(
					"Tailscale Serve forwards raw TCP to this door's socket %s (TCPForward %q)", k.sock, fw))
			}
		}
		return nil
	}
	if v.runSSH {
		return forwardable(forwardableTCPPage,
			"Tailscale SSH is on (prefs RunSSH): an SSH login can forward a port to this door (ssh -L) and write any request")
	}
	if v.proxy != "" {
		return forwardable(forwardableTCPPage, fmt.Sprintf(
			"tailscaled runs an outbound proxy (%s): whoever reaches it — any local process, and with userspace networking any tailnet peer allowed to — has tailscaled dial this door and write any request", v.proxy))
	}
	if v.argsErr != nil {
		return forwardable(forwardableTCPPage, fmt.Sprintf(
			"fleet cannot read tailscaled's command line (%v), so it cannot rule out tailscaled's outbound proxy (--socks5-server, --outbound-http-proxy-listen), which has tailscaled dial this door for whoever reaches it", v.argsErr))
	}
	for _, fw := range v.forwards {
		if tcpTargetReaches(fw, k.port) {
			return forwardable(forwardableTCPPage, fmt.Sprintf(
				"Tailscale Serve forwards raw TCP to this door's port %d (TCPForward %q): a tailnet peer writes the request bytes itself", k.port, fw))
		}
	}
	return nil
}

// tcpTargetReaches reports whether tailscaled, dialling the TCPForward target, may reach
// 127.0.0.1:port. It is generous (fail closed): any host name (it may resolve to loopback), an
// empty host, any loopback or unspecified address; and any target it cannot read.
func tcpTargetReaches(target string, port uint16) bool {
	if strings.HasPrefix(target, "unix:") {
		return false
	}
	host, p, err := net.SplitHostPort(target)
	if err != nil {
		return true
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		named, lerr := net.LookupPort("tcp", p)
		if lerr != nil {
			return true
		}
		n = uint64(named)
	}
	if n != uint64(port) {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return true // a name, or empty: the local system
	}
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsUnspecified()
}

// unixTargetIs reports whether a TCPForward target "unix:PATH" may reach the socket at sock. It
// is generous (fail closed), as tcpTargetReaches is: the same path once cleaned or resolved, or
// the same file; a relative PATH (relative to tailscaled's working folder, which fleet cannot
// know); a PATH fleet cannot resolve or look at (a folder fleet cannot read may hold a link to
// sock); and a missing PATH where someone else could make one (state.CheckSocketPlace: below
// /tmp, or a folder others can write), for it may be a link to sock by the next dial.
func unixTargetIs(target, sock string) bool {
	p, ok := strings.CutPrefix(target, "unix:")
	if !ok {
		return false
	}
	if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) == filepath.Clean(sock) {
		return true
	}
	rp, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		return state.CheckSocketPlace(p) != nil
	}
	if err != nil {
		return true
	}
	if rs, err := filepath.EvalSymlinks(sock); err == nil && rp == rs {
		return true
	}
	sp, err1 := os.Stat(p)
	ss, err2 := os.Stat(sock)
	return err1 != nil || err2 == nil && os.SameFile(sp, ss)
}
