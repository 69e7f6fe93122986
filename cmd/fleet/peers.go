package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/paths"

	"github.com/phase-console/fleet/tailnet"
)

const peersSummary = "List the tailnet's online machines that this machine can reach and which of them answer as fleet, with each answer's time."

func init() {
	addCommand(&command{name: "peers", summary: peersSummary, run: runPeers})
}

// peersEnv is where `fleet peers` learns the tailnet's peers and how it reaches them; a test
// replaces it (peersTestEnv).
type peersEnv struct {
	status tailnet.PeerStatusAPI
	// dial opens a TCP connection to host:port through the tailnet (tailscaled's LocalAPI
	// dial, which works on a kernel TUN and on userspace networking alike).
	dial func(ctx context.Context, host string, port uint16) (net.Conn, error)
	tls  *tls.Config // nil: the system's roots, the peer's MagicDNS name as the server name
	// stopwatch starts timing one answer: the func it returns says how long it took so far.
	stopwatch func() func() time.Duration
}

// realStopwatch times with the wall clock.
func realStopwatch() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

var peersTestEnv *peersEnv

// peersConcurrency bounds the peers asked at once.
const peersConcurrency = 16

// A peerAnswer is what one peer answered `fleet peers`.
type peerAnswer struct {
	Name     string   `json:"name"`
	Owner    string   `json:"owner,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	Answer   string   `json:"answer"`           // fleet, fleet-refused, not-fleet, fleet-http-only, no-answer
	Reason   string   `json:"reason,omitempty"` // a fleet refusal's reason word
	Status   int      `json:"status,omitempty"` // the HTTP status, when one came
	Consoles *int     `json:"consoles,omitempty"`
	Millis   *int64   `json:"answer_ms,omitempty"`
	Error    string   `json:"error,omitempty"` // why there was no answer (over HTTPS, for fleet-http-only)
}

// runPeers is `fleet peers [--timeout 2s] [--json] [--tailscale-socket PATH]` (SPEC G2): it asks
// every online peer's https://<name>/ for the index's JSON, from this machine — with this
// machine's own tailnet identity, not a person's — and says which answered as fleet.
func runPeers(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("peers", peersSummary+"\nEach peer is asked GET https://<peer>/ for JSON, as this machine's own tailnet node: a fleet that"+
		"\nanswers, even with a refusal, answers as fleet. Exit status: 1 when tailscaled cannot list the peers.", stdout, stderr)
	tsSocket := fs.String("tailscale-socket", "", "tailscaled's LocalAPI socket (default: tailscaled's usual socket)")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for each peer's answer")
	asJSON := fs.Bool("json", false, "print one JSON object per peer instead of a table")
	if st, done := parseFlags(fs, args); done {
		return st
	}
	if *timeout <= 0 {
		fmt.Fprintln(stderr, "fleet peers: --timeout must be positive")
		return 2
	}
	env := peersTestEnv
	if env == nil {
		if *tsSocket == "" {
			*tsSocket = paths.DefaultTailscaledSocket()
		}
		lc := &local.Client{Socket: *tsSocket, UseSocketOnly: true}
		env = &peersEnv{status: lc, dial: lc.DialTCP, stopwatch: realStopwatch}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := env.status.Status(sctx)
	cancel()
	var list *tailnet.PeerList
	if err == nil {
		list, err = tailnet.ReadPeers(st)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleet peers: cannot list the tailnet's peers: %v (is tailscaled running? 'tailscale status'; --tailscale-socket)\n", err)
		return 1
	}
	var online []tailnet.Peer
	offline := 0
	for _, p := range list.Peers {
		if p.Online {
			online = append(online, p)
		} else {
			offline++
		}
	}
	answers := askPeers(ctx, env, online, *timeout)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, a := range answers {
			enc.Encode(a)
		}
		return 0
	}
	if list.SelfTagged {
		fmt.Fprintln(stdout, "This machine is a tagged node: other fleets refuse tagged nodes (SPEC S5, 403 tagged-node), so this shows only which peers answer as fleet, not what they would list for you.")
	}
	if len(answers) == 0 {
		fmt.Fprintln(stdout, "No other machine of the tailnet is online.")
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PEER\tOWNER\tANSWER\tTIME")
		for _, a := range answers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, ownerOf(a), describeAnswer(a, list.SelfTagged), answerTime(a))
		}
		tw.Flush()
	}
	if offline > 0 {
		fmt.Fprintf(stdout, "%d offline peer(s) not asked.\n", offline)
	}
	return 0
}

func ownerOf(a peerAnswer) string {
	if len(a.Tags) > 0 {
		return strings.Join(a.Tags, ",")
	}
	if a.Owner == "" {
		return "-"
	}
	return a.Owner
}

func answerTime(a peerAnswer) string {
	if a.Millis == nil {
		return "-"
	}
	return strconv.FormatInt(*a.Millis, 10) + " ms"
}

// describeAnswer is the table's ANSWER cell.
func describeAnswer(a peerAnswer, selfTagged bool) string {
	switch a.Answer {
	case "fleet":
		if selfTagged {
			return "answers as fleet"
		}
		return fmt.Sprintf("fleet: %d console(s) for this machine's owner", *a.Consoles)
	case "fleet-refused":
		if selfTagged {
			return "answers as fleet"
		}
		return "answers as fleet, refused (" + a.Reason + ")"
	case "not-fleet":
		return fmt.Sprintf("answers, not as fleet (HTTP %d)", a.Status)
	case "fleet-http-only":
		return "answers as fleet over HTTP only, not HTTPS (" + a.Error + "): publish it with HTTPS there (tailscale serve --bg …) for the fleet page"
	}
	return "no answer"
}

// askPeers asks every peer at once (at most peersConcurrency at a time), each within timeout,
// and returns the answers in the peers' order.
func askPeers(ctx context.Context, env *peersEnv, peers []tailnet.Peer, timeout time.Duration) []peerAnswer {
	tlsConf := env.tls
	if tlsConf == nil {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	client := &http.Client{
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, portText, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				port, err := strconv.ParseUint(portText, 10, 16)
				if err != nil {
					return nil, err
				}
				return env.dial(ctx, host, uint16(port))
			},
			TLSClientConfig:   tlsConf,
			DisableKeepAlives: true,
		},
		// A fleet's index answers itself; a redirect is not a fleet's answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	out := make([]peerAnswer, len(peers))
	slots := make(chan struct{}, peersConcurrency)
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i] = askPeer(ctx, client, env.stopwatch, p, timeout)
		}()
	}
	wg.Wait()
	return out
}

// maxPeerAnswer bounds the index answer read from a peer.
const maxPeerAnswer = 1 << 20

// askPeer asks one peer for its index's JSON over HTTPS and judges whether the answer is a
// fleet's: the index's JSON (an object with a list of consoles), or any answer naming a fleet
// reason word (X-Fleet-Reason, which every fleet refusal carries). A peer that gives no answer
// over HTTPS before the timeout — nothing on 443, or no TLS there — is asked the same over plain
// HTTP, within what is left of the timeout (O8): a fleet that answers there is published over
// HTTP only (fleet-http-only), which the fleet-wide page, an HTTPS page, cannot read; one that
// answers on neither gives no answer.
func askPeer(ctx context.Context, client *http.Client, stopwatch func() func() time.Duration, p tailnet.Peer, timeout time.Duration) peerAnswer {
	a := peerAnswer{Name: p.Name, Owner: p.Owner, Tags: p.Tags, Answer: "no-answer"}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	elapsed := stopwatch()
	err := askIndex(ctx, client, p.Origin()+"/", &a)
	if err == nil {
		ms := elapsed().Milliseconds()
		a.Millis = &ms
		return a
	}
	a.Error = err.Error()
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		a.Error = "no answer within " + timeout.String()
		return a
	}
	overHTTP := peerAnswer{Answer: "no-answer"}
	if askIndex(ctx, client, "http://"+p.Name+"/", &overHTTP) == nil && (overHTTP.Answer == "fleet" || overHTTP.Answer == "fleet-refused") {
		ms := elapsed().Milliseconds()
		a.Answer, a.Status, a.Reason, a.Consoles, a.Millis = "fleet-http-only", overHTTP.Status, overHTTP.Reason, overHTTP.Consoles, &ms
	}
	return a
}

// askIndex asks url for the index's JSON and fills a's Answer, Status, Reason and Consoles from
// the answer; an error says no answer came.
func askIndex(ctx context.Context, client *http.Client, url string, a *peerAnswer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer))
	if err != nil {
		return err
	}
	a.Status = resp.StatusCode
	if reason := resp.Header.Get("X-Fleet-Reason"); reason != "" {
		a.Answer, a.Reason = "fleet-refused", reason
		return nil
	}
	var index map[string]json.RawMessage
	var consoles []json.RawMessage
	if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &index) == nil && index["consoles"] != nil &&
		json.Unmarshal(index["consoles"], &consoles) == nil {
		n := len(consoles)
		a.Answer, a.Consoles = "fleet", &n
		return nil
	}
	a.Answer = "not-fleet"
	return nil
}
