// Package conformance is the console conformance checker (`fleet check-console`): it sends probes
// for every C rule of the spec — the order of checks and the reason words included — to a running
// console, in any language, and says for each one PASS or FAIL.
//
// It speaks the reference console's endpoint shapes (docs/console-contract.md):
//
//	GET  /whoami                    → {"scope":"local"|"remote","login":"…"}
//	POST /presence                  → 2xx for a local caller (C5)
//	POST /runs                      → 2xx {"id":"…","token":"…"} for a local caller
//	DELETE /runs/<id>               → 2xx
//	POST /hooks/permission-request  → 2xx with "Authorization: Bearer <run token>" (C6)
//	POST /settings/reach            → 2xx for a local caller, {"mode":"off"} (C7)
//
// A refusal's reason word is read from the X-Fleet-Reason response header, else from the body.
//
// The checker sends the real fleet token, so it talks only to a loopback literal (CheckURL), uses no
// proxy, follows no redirect, and never prints a token: what it sent is written with placeholders
// such as <fleet token> or <fleet token, last byte changed>, and every token is cut out of what it
// got before that is printed.
//
// It cannot see timing, so it cannot prove a comparison constant-time; it proves that a bearer one
// byte off — first byte, last byte, one short, one too long — is refused, which catches prefix and
// length-limited comparisons.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
)

// A Result is the outcome of one probe.
type Result struct {
	Rule string // "C1" … "C7": the rule the probe proves (for an order probe, the rule that must win)
	What string // what the probe tries, in a few words
	OK   bool
	Sent string // the request, with every secret as a placeholder
	Got  string // the answer: status, reason, and a short body with every token cut out
}

// String is the line `fleet check-console` prints: "PASS <rule> <what>" or
// "FAIL <rule> <what>: sent …, got …".
func (r Result) String() string {
	if r.OK {
		return fmt.Sprintf("PASS %s %s", r.Rule, r.What)
	}
	return fmt.Sprintf("FAIL %s %s: sent %s, got %s", r.Rule, r.What, r.Sent, r.Got)
}

// CheckURL accepts the console's base URL: http, a loopback IP literal (127.0.0.0/8 or [::1]) and a
// port, no path beyond "/", no user, query or fragment. Without a scheme ("127.0.0.1:9001") it is
// http. A name, even localhost, is refused: the checker sends the real fleet token.
func CheckURL(raw string) (*url.URL, error) {
	withScheme := raw
	if !strings.Contains(raw, "://") {
		withScheme = "http://" + raw
	}
	u, err := url.Parse(withScheme)
	if err != nil {
		return nil, fmt.Errorf("--url %q: %v", raw, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("--url %q: want http://127.0.0.1:PORT (the checker speaks plain HTTP to loopback only)", raw)
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil || !ap.Addr().IsLoopback() || ap.Addr().Zone() != "" || ap.Addr().Is4In6() || ap.Port() == 0 {
		return nil, fmt.Errorf("--url %q: not a loopback IP literal with a port (want http://127.0.0.1:PORT); the checker sends the real fleet token", raw)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("--url %q: give the console's root, http://127.0.0.1:PORT", raw)
	}
	return &url.URL{Scheme: "http", Host: u.Host}, nil
}

// newClient is the checker's HTTP client: no proxy, no redirects, and the connection only to a
// server of this same user (peercred.DialOwn): the real token goes to nobody else.
func newClient() *http.Client {
	return peercred.OwnClient(10*time.Second, false)
}

// Errors of Preflight.
var (
	// ErrNoAnswer: nothing listens at the URL.
	ErrNoAnswer = errors.New("nothing answers there")
	// ErrSupervisor: the URL is the fleet supervisor's door, not a console.
	ErrSupervisor = errors.New("that is the fleet supervisor, not a console")
	// ErrOtherUser: the server there is run by another user; the token is never sent to it.
	ErrOtherUser = errors.New("the server there is run by another user; the checker sends the fleet token only to your own console")
)

// Preflight makes sure a console of this user answers at baseURL before any probe (and any
// token) is sent, so that a wrong URL is one clear error rather than a FAIL per probe. It sends no
// secret: GET /fleet/v1/consoles without a bearer, which the supervisor alone answers with 401
// and WWW-Authenticate: Bearer realm="fleet".
func Preflight(ctx context.Context, baseURL string) error {
	u, err := CheckURL(baseURL)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "GET", u.String()+"/fleet/v1/consoles", nil)
	if err != nil {
		return err
	}
	resp, err := newClient().Do(req)
	switch {
	case errors.Is(err, peercred.ErrOtherUser):
		return fmt.Errorf("%s: %w", u.Host, ErrOtherUser)
	case err != nil:
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("%s: %w (is the console running, and on that port?)", u.Host, ErrNoAnswer)
		}
		return fmt.Errorf("%s: %w", u.Host, err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized && strings.Contains(resp.Header.Get("WWW-Authenticate"), `realm="fleet"`) {
		return fmt.Errorf("%s: %w; give the console's own address (fleet consoles lists them)", u.Host, ErrSupervisor)
	}
	return nil
}

// Check runs every probe against the console at baseURL (see CheckURL) with the fleet token and
// returns one Result per probe, in order. It stops early only when ctx is done.
func Check(ctx context.Context, baseURL, token string) []Result {
	u, err := CheckURL(baseURL)
	if err != nil {
		return []Result{{Rule: "URL", What: "console URL is a loopback literal", Sent: "nothing", Got: err.Error()}}
	}
	c := &checker{base: u, token: token, client: newClient()}
	_, c.port, _ = net.SplitHostPort(u.Host)
	return c.run(ctx)
}

type checker struct {
	base     *url.URL
	port     string
	token    string
	runID    string
	runToken string
	client   *http.Client
	results  []Result
}

// A header line of a probe: the name exactly as sent, the value with placeholders.
type hv struct{ name, value string }

// expect is what a probe wants back.
type expect struct {
	status []int  // any of these; nil with ok2xx
	ok2xx  bool   // any 2xx
	reason string // the reason word, in X-Fleet-Reason or the body
	// when scope is set, the body must be JSON {"scope":scope,"login":login}
	scope, login string
}

type probe struct {
	rule, what   string
	method, path string
	host         string // Host header; "" is the URL's host:port; "{port}" is replaced
	hs           []hv
	body         string
	want         expect
}

const (
	alice  = "alice@example.com"
	device = "device:phone#abc234"
	hook   = "/hooks/permission-request"

	// Placeholders: what a probe's description shows, replaced by a secret when sent.
	phFleet      = "<fleet token>"
	phFleetLast  = "<fleet token, last byte changed>"
	phFleetFirst = "<fleet token, first byte changed>"
	phFleetShort = "<fleet token, last byte cut>"
	phFleetLong  = "<fleet token, one byte added>"
	phRun        = "<run token>"
	phRunLast    = "<run token, last byte changed>"
)

func flipByte(s string, i int) string {
	if s == "" {
		return "x"
	}
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func (c *checker) expand(s string) string {
	short := ""
	if c.token != "" {
		short = c.token[:len(c.token)-1]
	}
	return strings.NewReplacer(
		phFleetLast, flipByte(c.token, max(len(c.token)-1, 0)),
		phFleetFirst, flipByte(c.token, 0),
		phFleetShort, short,
		phFleetLong, c.token+"A",
		phFleet, c.token,
		phRunLast, flipByte(c.runToken, max(len(c.runToken)-1, 0)),
		phRun, c.runToken,
	).Replace(s)
}

var (
	// base64url runs long enough to hold a token or most of one.
	tokenLike = regexp.MustCompile(`[A-Za-z0-9_-]{16,}`)
	// a "token" member of a JSON answer, such as POST /runs gives.
	tokenMember = regexp.MustCompile(`"token"\s*:\s*"[^"]*"`)
)

// redact cuts every token out of s, and every run of base64url that shares 16 characters with
// one (a console may echo a bearer one byte off, which is the token but for a byte), and the value
// of every JSON "token" member.
func (c *checker) redact(s string) string {
	s = tokenMember.ReplaceAllString(s, `"token":"<redacted>"`)
	return tokenLike.ReplaceAllStringFunc(s, func(m string) string {
		for i := 0; i+16 <= len(m); i++ {
			w := m[i : i+16]
			if (len(c.token) >= 16 && strings.Contains(c.token, w)) || (len(c.runToken) >= 16 && strings.Contains(c.runToken, w)) {
				return "<redacted>"
			}
		}
		return m
	})
}

func assertion(bearer, login string) []hv {
	return []hv{{"X-Phase-Console-Fleet", bearer}, {"X-Phase-Console-Fleet-Login", login}}
}

func with(hs ...[]hv) []hv {
	var out []hv
	for _, h := range hs {
		out = append(out, h...)
	}
	return out
}

func want(status int, reason string) expect { return expect{status: []int{status}, reason: reason} }
func remote(login string) expect            { return expect{status: []int{200}, scope: "remote", login: login} }

var (
	refusedRun  = expect{status: []int{401, 403}}
	notLocal    = expect{status: []int{403}, reason: "not local"}
	proxyHeader = []hv{{"Tailscale-User-Login", alice}}
	loginOnly   = func(v string) []hv { return []hv{{"X-Phase-Console-Fleet-Login", v}} }
	bearerOnly  = func(v string) []hv { return []hv{{"X-Phase-Console-Fleet", v}} }
	runBearer   = func(v string) []hv { return []hv{{"Authorization", "Bearer " + v}} }
)

func (c *checker) run(ctx context.Context) []Result {
	good := assertion(phFleet, alice)
	bad := assertion(phFleetLast, alice)
	whoami := func(rule, what string, host string, hs []hv, w expect) probe {
		return probe{rule: rule, what: what, method: "GET", path: "/whoami", host: host, hs: hs, want: w}
	}
	e401 := want(401, "fleet-bad-token")
	e421 := want(421, "fleet-not-loopback")
	e403p := want(403, "fleet-and-proxy")

	c.probes(ctx, []probe{
		whoami("C4", "no assertion: scope local (baseline)", "", nil, expect{status: []int{200}, scope: "local", login: ""}),

		whoami("C1", "right bearer believed: scope remote, login as asserted", "", good, remote(alice)),
		whoami("C1", "bearer wrong by one byte (last) → 401 fleet-bad-token", "", bad, e401),
		whoami("C1", "bearer wrong by one byte (first) → 401 fleet-bad-token", "", assertion(phFleetFirst, alice), e401),
		whoami("C1", "bearer one byte short → 401 fleet-bad-token", "", assertion(phFleetShort, alice), e401),
		whoami("C1", "bearer one byte too long → 401 fleet-bad-token", "", assertion(phFleetLong, alice), e401),
		whoami("C1", "empty bearer → 401 fleet-bad-token", "", assertion("", alice), e401),
		whoami("C1", "malformed: empty login → 401 fleet-bad-token", "", assertion(phFleet, ""), e401),
		whoami("C1", "malformed: bearer without login → 401 fleet-bad-token", "", bearerOnly(phFleet), e401),
		whoami("C1", "malformed: login without bearer → 401 fleet-bad-token", "", loginOnly(alice), e401),
		whoami("C1", "malformed: empty login header alone → 401 fleet-bad-token", "", loginOnly(""), e401),
		whoami("C1", "malformed: two bearer values → 401 fleet-bad-token", "", with(good, bearerOnly(phFleet)), e401),
		whoami("C1", "malformed: two login values → 401 fleet-bad-token", "", with(good, loginOnly("bob@example.com")), e401),
		whoami("C1", "spelling X_Phase_Console_Fleet with a wrong bearer → 401 fleet-bad-token", "", []hv{{"X_Phase_Console_Fleet", phFleetLast}, {"X-Phase-Console-Fleet-Login", alice}}, e401),
		whoami("C1", "spelling X_Phase_Console_Fleet_Login alone → 401 fleet-bad-token", "", []hv{{"X_Phase_Console_Fleet_Login", alice}}, e401),

		whoami("C2", "Host evil.example with the right bearer → 421 fleet-not-loopback", "evil.example", good, e421),
		whoami("C2", "Host 127.0.0.1.evil.example → 421 fleet-not-loopback", "127.0.0.1.evil.example:{port}", good, e421),
		whoami("C2", "Host localhost.evil.example → 421 fleet-not-loopback", "localhost.evil.example", good, e421),
		whoami("C2", "Host 127.0.0.2 → 421 fleet-not-loopback", "127.0.0.2:{port}", good, e421),
		whoami("C2", "Host localhost believed", "localhost:{port}", good, remote(alice)),
		whoami("C2", "Host [::1] believed", "[::1]:{port}", good, remote(alice)),
		whoami("C2", "Host 127.0.0.1 without a port believed", "127.0.0.1", good, remote(alice)),
		whoami("C2", "foreign Host without an assertion → 421 (DNS rebinding)", "evil.example", nil, expect{status: []int{421}}),

		whoami("C3", "proxy header beside the right assertion → 403 fleet-and-proxy", "", with(good, proxyHeader), e403p),
		whoami("C3", "proxy header spelled tailscale_user_login → 403 fleet-and-proxy", "", with(good, []hv{{"tailscale_user_login", alice}}), e403p),
		whoami("C3", "order: proxy header + foreign Host + bad bearer → 403 fleet-and-proxy (C3 before C2, C1)", "evil.example", with(bad, proxyHeader), e403p),
		whoami("C3", "order: proxy header + bad bearer → 403 fleet-and-proxy (C3 before C1)", "", with(bad, proxyHeader), e403p),
		whoami("C2", "order: foreign Host + bad bearer → 421 fleet-not-loopback (C2 before C1)", "evil.example", bad, e421),
		whoami("C2", "order: foreign Host + malformed assertion → 421 fleet-not-loopback (C2 before C1)", "evil.example", loginOnly(""), e421),

		whoami("C4", "asserted from a loopback peer with X-Forwarded-For 127.0.0.1: remote", "", with(assertion(phFleet, "root"), []hv{{"X-Forwarded-For", "127.0.0.1"}}), remote("root")),
		whoami("C4", "asserted login \"local\": remote", "", assertion(phFleet, "local"), remote("local")),
		whoami("C4", "asserted device login: remote", "", assertion(phFleet, device), remote(device)),
		// Only the supervisor's assertion makes a caller remote: a proxy's word is not one.
		whoami("C4", "no assertion, proxy header only: not believed as that login", "", proxyHeader, expect{status: []int{401, 403}}),
		whoami("C4", "no assertion, X-Forwarded-For: not believed", "", []hv{{"X-Forwarded-For", "100.101.102.103"}}, expect{status: []int{401, 403}}),

		{rule: "C5", what: "presence open to a local caller", method: "POST", path: "/presence", body: "{}", want: expect{ok2xx: true}},
		{rule: "C5", what: "presence shut to scope remote → 403", method: "POST", path: "/presence", body: "{}", hs: good, want: expect{status: []int{403}}},
		{rule: "C5", what: "runs shut to scope remote → 403", method: "POST", path: "/runs", body: "{}", hs: good, want: expect{status: []int{403}}},

		{rule: "C7", what: "device login cannot change reach settings → 403 reach-settings", method: "POST", path: "/settings/reach", body: `{"mode":"off"}`, hs: assertion(phFleet, device), want: want(403, "reach-settings")},
		{rule: "C7", what: "a local caller can change reach settings", method: "POST", path: "/settings/reach", body: `{"mode":"off"}`, want: expect{ok2xx: true}},
	})

	// C6 needs a run.
	if !c.startRun(ctx) {
		return c.results
	}
	hk := func(what string, host string, hs []hv, w expect) probe {
		return probe{rule: "C6", what: what, method: "POST", path: hook, host: host, hs: hs, body: `{"tool":"Bash"}`, want: w}
	}
	run := runBearer(phRun)
	c.probes(ctx, []probe{
		hk("run token accepted", "", run, expect{ok2xx: true}),
		hk("no bearer → refused", "", nil, refusedRun),
		hk("run token wrong by one byte → refused", "", runBearer(phRunLast), refusedRun),
		hk("the fleet token as the run bearer → refused", "", runBearer(phFleet), refusedRun),
		hk("run token + X-Forwarded-For → 403 not local", "", with(run, []hv{{"X-Forwarded-For", "127.0.0.1"}}), notLocal),
		hk("run token + X-Forwarded-Host → 403 not local", "", with(run, []hv{{"X-Forwarded-Host", "127.0.0.1"}}), notLocal),
		hk("run token + X_Forwarded_For → 403 not local", "", with(run, []hv{{"X_Forwarded_For", "127.0.0.1"}}), notLocal),
		hk("run token + Forwarded → 403 not local", "", with(run, []hv{{"Forwarded", "for=127.0.0.1"}}), notLocal),
		hk("run token + X-Real-Ip → 403 not local", "", with(run, []hv{{"X-Real-Ip", "127.0.0.1"}}), notLocal),
		hk("run token + proxy header → 403 not local", "", with(run, proxyHeader), notLocal),
		hk("run token + the right assertion (C5) → 403 not local", "", with(run, good), notLocal),
		hk("order: run token + assertion with a bad bearer → 403 not local (before C1)", "", with(run, bad), notLocal),
		hk("order: run token + proxy header + assertion + foreign Host → 403 not local (before C3, C2)", "evil.example", with(run, good, proxyHeader), notLocal),
		hk("order: no bearer + X-Forwarded-For → 403 not local (before the token)", "", []hv{{"X-Forwarded-For", "127.0.0.1"}}, notLocal),
	})
	c.endRun(ctx)
	c.probes(ctx, []probe{
		hk("run token right after the run ended → refused", "", run, refusedRun),
	})
	return c.results
}

func (c *checker) probes(ctx context.Context, ps []probe) {
	for _, p := range ps {
		if ctx.Err() != nil {
			return
		}
		c.results = append(c.results, c.probe(ctx, p))
	}
}

// describe writes the request with placeholders, never a secret.
func (c *checker) describe(p probe) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s Host=%s", p.method, p.path, c.hostOf(p))
	for _, h := range p.hs {
		fmt.Fprintf(&b, " %s=%s", h.name, h.value)
		if h.value == "" {
			b.WriteString(`""`)
		}
	}
	return b.String()
}

func (c *checker) hostOf(p probe) string {
	if p.host == "" {
		return c.base.Host
	}
	return strings.ReplaceAll(p.host, "{port}", c.port)
}

type answer struct {
	status int
	reason string
	body   []byte
}

func (c *checker) send(ctx context.Context, p probe) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, p.method, c.base.String()+p.path, strings.NewReader(p.body))
	if err != nil {
		return answer{}, err
	}
	req.Host = c.hostOf(p)
	if p.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range p.hs {
		req.Header[h.name] = append(req.Header[h.name], c.expand(h.value))
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return answer{}, errors.New(c.redact(err.Error()))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a := answer{status: resp.StatusCode, reason: resp.Header.Get("X-Fleet-Reason"), body: body}
	if a.reason == "" {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil {
			a.reason = e.Error
		}
	}
	return a, nil
}

func (c *checker) show(a answer) string {
	s := fmt.Sprintf("%d", a.status)
	if a.reason != "" {
		s += " " + c.redact(a.reason)
	}
	body := strings.TrimSpace(string(bytes.ToValidUTF8(a.body, []byte("?"))))
	body = strings.Join(strings.Fields(c.redact(body)), " ")
	if len(body) > 120 {
		body = body[:120] + "…"
	}
	if body != "" {
		s += " " + body
	}
	return s
}

func (c *checker) probe(ctx context.Context, p probe) Result {
	r := Result{Rule: p.rule, What: p.what, Sent: c.describe(p)}
	a, err := c.send(ctx, p)
	if err != nil {
		r.Got = "no answer: " + err.Error()
		return r
	}
	r.Got = c.show(a)
	r.OK = c.match(p.want, a)
	return r
}

func (c *checker) match(w expect, a answer) bool {
	if w.ok2xx {
		if a.status < 200 || a.status > 299 {
			return false
		}
	} else if !slices.Contains(w.status, a.status) {
		return false
	}
	if w.reason != "" && a.reason != w.reason && !bytes.Contains(a.body, []byte(w.reason)) {
		return false
	}
	if w.scope != "" {
		var who struct {
			Scope *string `json:"scope"`
			Login *string `json:"login"`
		}
		if json.Unmarshal(a.body, &who) != nil || who.Scope == nil || who.Login == nil ||
			*who.Scope != w.scope || *who.Login != w.login {
			return false
		}
	}
	return true
}

// startRun asks for a run token (POST /runs, local). On failure it records a FAIL for C6.
func (c *checker) startRun(ctx context.Context) bool {
	p := probe{rule: "C6", what: "start a run (POST /runs, local) for the hook probes", method: "POST", path: "/runs", body: "{}"}
	r := Result{Rule: p.rule, What: p.what, Sent: c.describe(p)}
	a, err := c.send(ctx, p)
	if err != nil {
		r.Got = "no answer: " + err.Error()
		c.results = append(c.results, r)
		return false
	}
	var run struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if a.status < 200 || a.status > 299 || json.Unmarshal(a.body, &run) != nil || run.ID == "" || run.Token == "" {
		r.Got = c.show(a) + ` (want 2xx {"id":"…","token":"…"})`
		c.results = append(c.results, r)
		return false
	}
	c.runID, c.runToken = run.ID, run.Token
	r.OK = true
	c.results = append(c.results, r)
	return true
}

// endRun ends the run (DELETE /runs/<id>, local) and records the result.
func (c *checker) endRun(ctx context.Context) {
	p := probe{rule: "C6", what: "end the run (DELETE /runs/<id>, local)", method: "DELETE", path: "/runs/" + url.PathEscape(c.runID), want: expect{ok2xx: true}}
	c.results = append(c.results, c.probe(ctx, p))
}
