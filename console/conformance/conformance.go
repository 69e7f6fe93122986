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
