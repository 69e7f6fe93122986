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
// A console need not have those routes (SPEC N5). The checker asks each of them first as a local
// caller — GET /whoami, POST /presence, POST /settings/reach, POST /runs — and takes an answer of
// 404, 405 or 501 (for /whoami also a 2xx that is not the JSON above, such as a single-page app's
// fallback) to mean the console lacks the route. A probe that needs a route the console lacks is
// SKIP, naming the route; a probe that wants a refusal, which a console's verifier gives before any
// routing, is sent to "/" instead of a route the console lacks, so it still runs. Only a probe that
// ran and got the wrong answer is FAIL.
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
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/phase-console/fleet/internal/peercred"
)

// A Result is the outcome of one probe.
type Result struct {
	Rule string // "C1" … "C7": the rule the probe proves (for an order probe, the rule that must win)
	What string // what the probe tries, in a few words
	OK   bool
	// Needs, when set, is the route the probe needs and the console lacks ("/whoami"): the probe
	// was not sent, and the result is SKIP (OK is false, Failed is false).
	Needs string
	Sent  string // the request, with every secret as a placeholder
	Got   string // the answer: status, reason, and a short body with every token cut out
}

// Skipped reports whether the probe was not sent because the console lacks the route it needs.
func (r Result) Skipped() bool { return r.Needs != "" }

// Failed reports whether the probe ran and got a wrong answer: a real violation.
func (r Result) Failed() bool { return !r.OK && r.Needs == "" }

// String is the line `fleet check-console` prints: "PASS <rule> <what>",
// "FAIL <rule> <what>: sent …, got …" or "SKIP <rule> <what>: needs <route>".
func (r Result) String() string {
	switch {
	case r.OK:
		return fmt.Sprintf("PASS %s %s", r.Rule, r.What)
	case r.Needs != "":
		return fmt.Sprintf("SKIP %s %s: needs %s", r.Rule, r.What, r.Needs)
	}
	return fmt.Sprintf("FAIL %s %s: sent %s, got %s", r.Rule, r.What, r.Sent, r.Got)
}

// Required is r as `fleet check-console --require-all` prints and counts it: a SKIP becomes a
// FAIL that names the route the console lacks.
func (r Result) Required() Result {
	if r.Needs == "" {
		return r
	}
	return Result{Rule: r.Rule, What: r.What, Sent: "nothing", Got: "the console lacks " + r.Needs + " (--require-all)"}
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
	c := &checker{base: u, token: token, client: newClient(), lacks: map[string]bool{}}
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
	lacks    map[string]bool // the probe routes the console answered 404, 405 or 501 (see the package doc)
}
