// Command soakd is scripts/soak's load generator and event driver. It is a measuring tool, not
// part of fleet: nothing in the product imports it.
//
//	soakd freeport
//	soakd run -fleet BIN -benchd BIN -state DIR -pid PID -loopback 127.0.0.1:P -door 127.0.0.1:D \
//	          -backend 127.0.0.1:B -password-file FILE [-minutes 10] [-rate 200]
//
// `run` starts the console (benchd backend) and registers it, pairs a first device on the
// direct-reach door, then for -minutes sends -rate requests a second, half through each door of
// one `fleet serve`: the loopback door as a verified tailnet caller (the headers Tailscale Serve
// writes; a fake tailscaled LocalAPI verifies them), the direct-reach door as the paired device
// over TLS that trusts only the door's root. Meanwhile it kills and restarts the console every
// -restart, and revokes the device and pairs a new one every -revoke. Every -report it prints
// one line: elapsed, requests ok, expected failures, unexpected errors, fleet's RSS and open
// descriptors; at the end a summary. Exit 1 when any error was unexpected.
//
// What is expected, and nothing else:
//
//   - 502 console-down, or a response cut off, for a request that overlaps a console restart
//     (from the kill until a second after the new console listens);
//   - the revoked device's cookie refused (303 to /pair, or 429 once its source is held back),
//     for a request that started after `fleet reach revoke` returned. The same cookie answered
//     200 there is an UNEXPECTED error.
//
// Each paired device talks from its own loopback source (127.0.1.k): fleet counts a revoked
// cookie as a failure of its source (SPEC R6), so probes of the old cookie would otherwise hold
// back the next device's source. The old cookie is probed five times in all (three at once, two
// 30 s later), which keeps the door's overall failure count below its limit of fifty in ten
// minutes, over which a new pairing would be refused.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/phase-console/fleet/pairing"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: soakd freeport | soakd run [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "freeport":
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "soakd:", err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	case "run":
		os.Exit(run(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "soakd: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

const (
	consoleID      = "soak"
	callerIP       = "100.64.0.7" // the fake LocalAPI's one tailnet caller
	requestTimeout = 10 * time.Second
	restartGrace   = time.Second // after the new console listens, stale failures still count as the restart's
	smallBody      = "hello, fleet\n"
	bigLen         = 64 << 10
)

type config struct {
	fleet, benchd, state, passwordFile  string
	loopback, door, backend             string
	pid                                 int
	minutes                             float64
	rate                                int
	restartEvery, revokeEvery, reportEv time.Duration
}

type soak struct {
	cfg      config
	password string
	start    time.Time
	rootPool *x509.CertPool

	mu         sync.Mutex
	sent       int64 // load requests started (the old-cookie probes aside)
	ok         int64
	expected   map[string]int64
	unexpected map[string]int64
	examples   []string // the first unexpected errors, verbatim
	skipped    map[string]int64
	restarts   []window // console restarts, newest last
	samples    []sample

	backend *exec.Cmd
	dev     atomic.Pointer[device]
	pairs   int // devices paired so far (the next one's number)

	loopKeep, loopFresh *http.Client
	wg                  sync.WaitGroup // in-flight requests and delayed probes
}

type window struct{ from, to time.Time } // to is zero while the console is down

type sample struct {
	at       time.Duration
	rss, fds int64
}

// A device is one paired device: its credential, its own source address and its clients.
type device struct {
	n           int
	id6, cookie string
	src         net.IP
	keep, fresh *http.Client
	revokedAt   time.Time // zero until revoked
}

func run(args []string) int {
	c, err := parseConfig(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakd run:", err)
		return 2
	}
	pw, err := os.ReadFile(c.passwordFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakd:", err)
		return 1
	}
	s := &soak{cfg: c, password: strings.TrimSpace(string(pw)), expected: map[string]int64{},
		unexpected: map[string]int64{}, skipped: map[string]int64{}}
	defer s.stopBackend()
	if err := s.setUp(); err != nil {
		fmt.Fprintln(os.Stderr, "soakd: set-up:", err)
		return 1
	}
	s.load()
	return s.summary()
}

// parseConfig reads run's flags: every path, address and the pid are required, the rate is at
// least 2 (one a second per door), the length and every period positive.
func parseConfig(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.fleet, "fleet", "", "the fleet binary")
	fs.StringVar(&c.benchd, "benchd", "", "the benchd binary (its backend is the console)")
	fs.StringVar(&c.state, "state", "", "fleet serve's state folder")
	fs.StringVar(&c.passwordFile, "password-file", "", "file holding the pairing password")
	fs.StringVar(&c.loopback, "loopback", "", "the loopback door, 127.0.0.1:P")
	fs.StringVar(&c.door, "door", "", "the direct-reach door, 127.0.0.1:D")
	fs.StringVar(&c.backend, "backend", "", "the console's address, 127.0.0.1:B")
	fs.IntVar(&c.pid, "pid", 0, "fleet serve's pid (RSS and descriptors)")
	fs.Float64Var(&c.minutes, "minutes", 10, "how long to load")
	fs.IntVar(&c.rate, "rate", 200, "requests a second, in all (half through each door)")
	fs.DurationVar(&c.restartEvery, "restart", 60*time.Second, "restart the console this often")
	fs.DurationVar(&c.revokeEvery, "revoke", 90*time.Second, "revoke and re-pair the device this often")
	fs.DurationVar(&c.reportEv, "report", 10*time.Second, "print a line this often")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.fleet == "" || c.benchd == "" || c.state == "" || c.passwordFile == "" || c.loopback == "" ||
		c.door == "" || c.backend == "" || c.pid == 0 {
		return config{}, fmt.Errorf("-fleet -benchd -state -password-file -loopback -door -backend -pid are required")
	}
	if c.rate < 2 {
		return config{}, fmt.Errorf("-rate %d: at least 2 (half goes through each door)", c.rate)
	}
	if c.minutes <= 0 {
		return config{}, fmt.Errorf("-minutes %v: must be positive", c.minutes)
	}
	if c.restartEvery <= 0 || c.revokeEvery <= 0 || c.reportEv <= 0 {
		return config{}, fmt.Errorf("-restart, -revoke and -report must be positive")
	}
	return c, nil
}

// setUp starts and registers the console, fetches the door's root and pairs the first device.
func (s *soak) setUp() error {
	if err := s.startBackend(); err != nil {
		return err
	}
	if err := s.register(); err != nil {
		return err
	}
	s.loopKeep = &http.Client{Timeout: requestTimeout, CheckRedirect: noRedirect,
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}
	s.loopFresh = &http.Client{Timeout: requestTimeout, CheckRedirect: noRedirect,
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	// The root, fetched once without verification (as a person compares its fingerprint) and
	// the only one trusted from then on.
	insecure := &http.Client{Timeout: requestTimeout,
		Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := insecure.Get("https://" + s.cfg.door + "/ca.crt")
	if err != nil {
		return fmt.Errorf("GET /ca.crt: %w", err)
	}
	pem, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	insecure.CloseIdleConnections()
	s.rootPool = x509.NewCertPool()
	if !s.rootPool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("/ca.crt is not a PEM certificate (%s)", resp.Status)
	}
	s.start = time.Now()
	d, err := s.pair()
	if err != nil {
		return fmt.Errorf("first pairing: %w", err)
	}
	s.dev.Store(d)
	return nil
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// load runs the fixed-rate load and the events for the configured time, then waits for what is
// in flight (each request is bounded by requestTimeout).
func (s *soak) load() {
	total := time.Duration(s.cfg.minutes * float64(time.Minute))
	s.start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	fmt.Printf("soak: %s, %d req/s (half per door), console restart every %s, device revoke+re-pair every %s\n",
		total, s.cfg.rate, s.cfg.restartEvery, s.cfg.revokeEvery)
	var loops sync.WaitGroup
	loops.Add(5)
	go func() { defer loops.Done(); s.drive(ctx, "loopback") }()
	go func() { defer loops.Done(); s.drive(ctx, "reach") }()
	go func() { defer loops.Done(); s.every(ctx, s.cfg.restartEvery, s.cfg.restartEvery, s.restartConsole) }()
	go func() { defer loops.Done(); s.every(ctx, s.cfg.revokeEvery/2, s.cfg.revokeEvery, s.revokeAndRepair) }()
	go func() { defer loops.Done(); s.report(ctx) }()
	loops.Wait()
	s.wg.Wait()
	s.sample() // the last word on RSS, after the load
}

// every calls fn at first, then every period, until ctx ends. fn runs in this goroutine, so
// one event of a kind never overlaps the next.
func (s *soak) every(ctx context.Context, first, period time.Duration, fn func(context.Context)) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
			t.Reset(period)
		}
	}
}

// drive sends rate/2 requests a second through one door until ctx ends: every tenth is 64 KiB,
// every twentieth on a new connection. The rate holds on a busy machine: a late tick sends what
// fell due since the last one (at most a second's worth; older ones are skipped and counted).
// At most 64 are in flight per door; a request that finds them all busy is skipped and counted.
func (s *soak) drive(ctx context.Context, doorName string) {
	perSecond := s.cfg.rate / 2
	per := time.Second / time.Duration(perSecond)
	t := time.NewTicker(per)
	defer t.Stop()
	sem := make(chan struct{}, 64)
	start := time.Now()
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int(time.Since(start) / per)
		if late := due - i; late > perSecond {
			s.skipN(doorName+": generator behind (CPU)", int64(late-perSecond))
			i = due - perSecond
		}
		for ; i < due; i++ {
			s.send(doorName, i, sem)
		}
	}
}

// send starts request number i through one door, unless its 64 slots are busy.
func (s *soak) send(doorName string, i int, sem chan struct{}) {
	path := "/c/" + consoleID + "/small"
	if i%10 == 5 {
		path = "/c/" + consoleID + "/big"
	}
	fresh := i%20 == 0
	var client *http.Client
	var base string
	var dev *device
	if doorName == "loopback" {
		client, base = s.loopKeep, "http://"+s.cfg.loopback
		if fresh {
			client = s.loopFresh
		}
	} else {
		dev = s.dev.Load()
		if dev == nil {
			s.skip("reach: no device while re-pairing")
			return
		}
		client, base = dev.keep, "https://"+s.cfg.door
		if fresh {
			client = dev.fresh
		}
	}
	select {
	case sem <- struct{}{}:
	default:
		s.skip(doorName + ": 64 requests in flight")
		return
	}
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-sem }()
		s.request(doorName, client, base+path, dev)
	}()
}

// request sends one GET and judges its outcome.
func (s *soak) request(doorName string, client *http.Client, u string, dev *device) {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if dev == nil {
		req.Header.Set("X-Forwarded-For", callerIP)
		req.Header.Set("Tailscale-User-Login", "alice@example.com")
	} else {
		req.AddCookie(&http.Cookie{Name: pairing.CookieName, Value: dev.cookie})
	}
	from := time.Now()
	resp, err := client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	to := time.Now()
	restart := s.duringRestart(from, to)
	switch {
	case err != nil && restart:
		s.expect("console restart: connection error")
	case err != nil:
		s.fail(doorName+": transport error", fmt.Sprintf("%s %s: %v", doorName, u, err))
	case resp.StatusCode == http.StatusOK:
		want := len(smallBody)
		if strings.HasSuffix(u, "/big") {
			want = bigLen
		}
		if len(body) != want {
			s.fail(doorName+": short body", fmt.Sprintf("%s %s: 200 with %d bytes, want %d", doorName, u, len(body), want))
			return
		}
		s.succeed()
	case resp.StatusCode == http.StatusBadGateway && resp.Header.Get("X-Fleet-Reason") == "console-down" && restart:
		s.expect("console restart: 502 console-down")
	default:
		reason := resp.Header.Get("X-Fleet-Reason")
		s.fail(fmt.Sprintf("%s: %d %s", doorName, resp.StatusCode, reason),
			fmt.Sprintf("%s %s: %s reason=%q restart=%v", doorName, u, resp.Status, reason, restart))
	}
}

// probeOld sends the revoked device's cookie from its own source: it must be refused.
func (s *soak) probeOld(d *device) {
	req, _ := http.NewRequest(http.MethodGet, "https://"+s.cfg.door+"/c/"+consoleID+"/small", nil)
	req.AddCookie(&http.Cookie{Name: pairing.CookieName, Value: d.cookie})
	from := time.Now()
	resp, err := d.keep.Do(req)
	if err != nil {
		s.fail("reach: old-cookie probe failed", fmt.Sprintf("old cookie of %s: %v", d.id6, err))
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK && from.After(d.revokedAt):
		s.fail("reach: REVOKED COOKIE ACCEPTED", fmt.Sprintf("old cookie of %s answered 200 %s after revocation", d.id6, from.Sub(d.revokedAt)))
	case resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(resp.Header.Get("Location"), "/pair"),
		resp.StatusCode == http.StatusTooManyRequests:
		s.expect(fmt.Sprintf("revoked cookie refused (%d)", resp.StatusCode))
	default:
		s.fail(fmt.Sprintf("reach: old cookie %d", resp.StatusCode), fmt.Sprintf("old cookie of %s: %s", d.id6, resp.Status))
	}
}

func (s *soak) succeed() { s.mu.Lock(); s.ok++; s.mu.Unlock() }
func (s *soak) expect(kind string) {
	s.mu.Lock()
	s.expected[kind]++
	s.mu.Unlock()
}
func (s *soak) skip(kind string) { s.skipN(kind, 1) }
func (s *soak) skipN(kind string, n int64) {
	s.mu.Lock()
	s.skipped[kind] += n
	s.mu.Unlock()
}
func (s *soak) fail(kind, example string) {
	s.mu.Lock()
	s.unexpected[kind]++
	if len(s.examples) < 10 {
		s.examples = append(s.examples, fmt.Sprintf("%6.1fs %s", time.Since(s.start).Seconds(), example))
	}
	s.mu.Unlock()
}

// duringRestart reports whether [from, to] overlaps a console restart, counted from the kill to
// restartGrace after the new console listens.
func (s *soak) duringRestart(from, to time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.restarts) - 1; i >= 0; i-- {
		w := s.restarts[i]
		if w.from.After(to) {
			continue
		}
		if w.to.IsZero() || !from.After(w.to.Add(restartGrace)) {
			return true
		}
		if w.to.Add(restartGrace).Before(from) {
			return false // older windows end earlier still
		}
	}
	return false
}

// restartConsole kills the console (SIGKILL: mid-request, as a crash), waits a second so that
// requests meet it down, starts it again and registers it again, as a console does at start-up.
func (s *soak) restartConsole(ctx context.Context) {
	s.mu.Lock()
	s.restarts = append(s.restarts, window{from: time.Now()})
	idx := len(s.restarts) - 1
	s.mu.Unlock()
	s.stopBackend()
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	err := s.startBackend()
	if err == nil {
		err = s.register()
	}
	s.mu.Lock()
	s.restarts[idx].to = time.Now()
	down := s.restarts[idx].to.Sub(s.restarts[idx].from)
	s.mu.Unlock()
	if err != nil {
		s.fail("console restart failed", err.Error())
		return
	}
	s.event("console killed and restarted (down %.1fs)", down.Seconds())
}

// revokeAndRepair revokes the current device, probes its cookie (it must be refused) and pairs
// a new device from a new source.
func (s *soak) revokeAndRepair(ctx context.Context) {
	old := s.dev.Swap(nil) // no new request uses the old cookie from here, but the probes
	if old != nil {
		out, err := s.fleetCmd("reach", "revoke", old.id6)
		if err != nil {
			s.fail("revoke failed", fmt.Sprintf("fleet reach revoke %s: %v: %s", old.id6, err, out))
		} else {
			old.revokedAt = time.Now()
			if ids, err := s.deviceIDs(); err != nil {
				s.fail("devices failed", err.Error())
			} else if _, still := ids[old.name()]; still {
				s.fail("revoked device still listed", old.id6)
			}
			for i := 0; i < 3; i++ {
				s.probeOld(old)
				time.Sleep(100 * time.Millisecond)
			}
			s.wg.Add(1)
			go func() { // two more, later: revocation holds, also on the same keep-alive connection
				defer s.wg.Done()
				select {
				case <-ctx.Done():
					return
				case <-time.After(30 * time.Second):
				}
				s.probeOld(old)
				s.probeOld(old)
				old.keep.CloseIdleConnections()
			}()
		}
	}
	d, err := s.pair()
	if err != nil {
		s.fail("re-pair failed", err.Error()) // the next round pairs again; until then the door idles
		return
	}
	s.dev.Store(d)
	prev := "-"
	if old != nil {
		prev = old.id6
	}
	s.event("device %s revoked and its cookie probed, device %s paired from %s", prev, d.id6, d.src)
}

func (d *device) name() string { return fmt.Sprintf("soak-%d", d.n) }

// pair issues a code with `fleet reach pair`, pairs a new device from its own source as the
// pairing page does (POST /pair, same Origin) and reads its id6 from `fleet reach devices`.
func (s *soak) pair() (*device, error) {
	s.pairs++
	d := &device{n: s.pairs, src: net.IPv4(127, 0, byte(1+s.pairs/250), byte(1+s.pairs%250))}
	out, err := s.fleetCmd("reach", "pair", "--name", d.name())
	if err != nil {
		return nil, fmt.Errorf("fleet reach pair: %v: %s", err, out)
	}
	code := ""
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "Pairing code:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				code = f[0]
			}
		}
	}
	if code == "" {
		return nil, fmt.Errorf("no code in fleet reach pair's output")
	}
	mk := func(keepAlive bool) *http.Client {
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: d.src}, Timeout: 5 * time.Second}
		return &http.Client{Timeout: requestTimeout, CheckRedirect: noRedirect, Transport: &http.Transport{
			Proxy: nil, DialContext: dialer.DialContext, DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 64,
			TLSClientConfig: &tls.Config{RootCAs: s.rootPool}, ForceAttemptHTTP2: false,
		}}
	}
	d.keep, d.fresh = mk(true), mk(false)
	form := url.Values{"code": {code}, "password": {s.password}, "name": {d.name()}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+s.cfg.door+"/pair", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://"+s.cfg.door)
	resp, err := d.fresh.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /pair: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == pairing.CookieName {
			d.cookie = c.Value
		}
	}
	if resp.StatusCode != http.StatusSeeOther || d.cookie == "" {
		return nil, fmt.Errorf("POST /pair: %s (reason %q), cookie set: %v", resp.Status, resp.Header.Get("X-Fleet-Reason"), d.cookie != "")
	}
	ids, err := s.deviceIDs()
	if err != nil {
		return nil, err
	}
	if d.id6 = ids[d.name()]; d.id6 == "" {
		return nil, fmt.Errorf("%s paired but not in fleet reach devices", d.name())
	}
	return d, nil
}

// deviceIDs is `fleet reach devices --json` as name → id6.
func (s *soak) deviceIDs() (map[string]string, error) {
	out, err := s.fleetCmd("reach", "devices", "--json")
	if err != nil {
		return nil, fmt.Errorf("fleet reach devices: %v: %s", err, out)
	}
	var list []struct{ ID6, Name string }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("fleet reach devices --json: %v", err)
	}
	m := map[string]string{}
	for _, d := range list {
		m[d.Name] = d.ID6
	}
	return m, nil
}

// fleetCmd runs the fleet binary with the state folder, for at most 30 s.
func (s *soak) fleetCmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--state-dir", s.cfg.state)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, s.cfg.fleet, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (s *soak) register() error {
	out, err := s.fleetCmd("register", "--id", consoleID, "--addr", s.cfg.backend, "--name", "Soak")
	if err != nil {
		return fmt.Errorf("fleet register: %v: %s", err, out)
	}
	return nil
}

// startBackend starts the console and waits (at most 5 s) until it accepts connections.
func (s *soak) startBackend() error {
	cmd := exec.Command(s.cfg.benchd, "backend", "-addr", s.cfg.backend)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	s.backend = cmd
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp4", s.cfg.backend, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the console does not listen on %s", s.cfg.backend)
}

func (s *soak) stopBackend() {
	if s.backend != nil && s.backend.Process != nil {
		s.backend.Process.Signal(syscall.SIGKILL)
		s.backend.Wait()
		s.backend = nil
	}
}

// report prints one line every reportEv until ctx ends.
func (s *soak) report(ctx context.Context) {
	t := time.NewTicker(s.cfg.reportEv)
	defer t.Stop()
	s.sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sm := s.sample()
		s.mu.Lock()
		ok, exp, unexp, skip := s.ok, sum(s.expected), sum(s.unexpected), sum(s.skipped)
		s.mu.Unlock()
		fmt.Printf("t=%4.0fs ok=%7d expected=%4d unexpected=%d skipped=%d rss_kib=%6d fds=%d\n",
			sm.at.Seconds(), ok, exp, unexp, skip, sm.rss, sm.fds)
	}
}

func (s *soak) event(format string, a ...any) {
	fmt.Printf("t=%4.0fs   event: %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, a...))
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// sample reads fleet's RSS and open descriptors and keeps them.
func (s *soak) sample() sample {
	sm := sample{at: time.Since(s.start), rss: -1, fds: -1}
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cfg.pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				sm.rss, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			}
		}
		f.Close()
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cfg.pid)); err == nil {
		sm.fds = int64(len(ents))
	}
	s.mu.Lock()
	s.samples = append(s.samples, sm)
	s.mu.Unlock()
	return sm
}

// cpuSeconds is fleet's user+system CPU time so far.
func (s *soak) cpuSeconds() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cfg.pid))
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ is 100 on Linux
}

// summary prints the totals and the RSS verdict; 1 when any error was unexpected.
func (s *soak) summary() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	elapsed := time.Since(s.start)
	fmt.Printf("\nsoak summary after %s (%d devices paired, %d console restarts):\n",
		elapsed.Round(time.Second), s.pairs, len(s.restarts))
	fmt.Printf("  requests sent: %d (%.0f/s), ok: %d\n", s.sent, float64(s.sent)/elapsed.Seconds(), s.ok)
	printKinds("  expected failures", s.expected)
	printKinds("  skipped ticks (not sent)", s.skipped)
	printKinds("  UNEXPECTED errors", s.unexpected)
	for _, e := range s.examples {
		fmt.Printf("    %s\n", e)
	}
	// The mean says what an operator sees; the floor (lowest sample) is what a leak would raise,
	// and it is not moved by a passing peak (a burst of kept console connections, say).
	first, last := s.window(0, time.Minute), s.window(elapsed-time.Minute, elapsed+time.Minute)
	if first.n > 0 && last.n > 0 {
		fmt.Printf("  fleet RSS, first minute vs last minute: mean %d -> %d KiB (%+d KiB, %+.1f%%), floor %d -> %d KiB (%+d KiB)\n",
			first.rss, last.rss, last.rss-first.rss, 100*float64(last.rss-first.rss)/float64(first.rss),
			first.min, last.min, last.min-first.min)
		fmt.Printf("  fleet open fds, first minute vs last minute: mean %d -> %d\n", first.fds, last.fds)
	}
	h1, h2 := s.window(0, elapsed/2), s.window(elapsed/2, elapsed+time.Minute)
	if h1.n > 0 && h2.n > 0 {
		fmt.Printf("  fleet RSS floor, first half vs second half: %d -> %d KiB (%+d KiB); peak %d KiB\n",
			h1.min, h2.min, h2.min-h1.min, max(h1.max, h2.max))
	}
	if cpu := s.cpuSeconds(); cpu >= 0 {
		fmt.Printf("  fleet CPU: %.1f s in %s (%.0f%% of one core)\n", cpu, elapsed.Round(time.Second), 100*cpu/elapsed.Seconds())
	}
	n := sum(s.unexpected)
	fmt.Printf("  unexpected errors: %d (must be 0)\n", n)
	if n > 0 {
		return 1
	}
	return 0
}

// stats are the samples taken in a window: their count, mean RSS and fds, lowest and highest RSS.
type stats struct{ n, rss, fds, min, max int64 }

// window sums up the samples taken in [from, to).
func (s *soak) window(from, to time.Duration) stats {
	var st stats
	for _, sm := range s.samples {
		if sm.at >= from && sm.at < to && sm.rss > 0 {
			if st.n == 0 || sm.rss < st.min {
				st.min = sm.rss
			}
			st.max = max(st.max, sm.rss)
			st.n++
			st.rss += sm.rss
			st.fds += sm.fds
		}
	}
	if st.n > 0 {
		st.rss /= st.n
		st.fds /= st.n
	}
	return st
}

func printKinds(title string, m map[string]int64) {
	fmt.Printf("%s: %d\n", title, sum(m))
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Printf("    %-44s %d\n", k, m[k])
	}
}
