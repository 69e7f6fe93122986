package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"tailscale.com/ipn/ipnstate"
	"tailscale.com/tailcfg"
	"tailscale.com/types/key"
	"tailscale.com/types/views"
)

// fakePeerStatus is tailscaled's status of peers for `fleet peers`.
type fakePeerStatus struct {
	st  *ipnstate.Status
	err error
}

func (f fakePeerStatus) Status(context.Context) (*ipnstate.Status, error) { return f.st, f.err }

type statusPeer struct {
	name   string
	user   tailcfg.UserID
	tags   []string
	online bool
}

func peerStatus(selfTags []string, peers ...statusPeer) *ipnstate.Status {
	st := &ipnstate.Status{
		BackendState:   "Running",
		CurrentTailnet: &ipnstate.TailnetStatus{MagicDNSSuffix: "tail1234.ts.net"},
		Self:           &ipnstate.PeerStatus{DNSName: "sup.tail1234.ts.net."},
		Peer:           map[key.NodePublic]*ipnstate.PeerStatus{},
		User: map[tailcfg.UserID]tailcfg.UserProfile{
			1: {ID: 1, LoginName: "alice@example.com"},
			2: {ID: 2, LoginName: "tagged-devices"},
		},
	}
	if selfTags != nil {
		tags := views.SliceOf(selfTags)
		st.Self.Tags = &tags
	}
	for _, p := range peers {
		ps := &ipnstate.PeerStatus{DNSName: p.name + ".tail1234.ts.net.", UserID: p.user, Online: p.online}
		if p.tags != nil {
			tags := views.SliceOf(p.tags)
			ps.Tags = &tags
		}
		st.Peer[key.NewNode().Public()] = ps
	}
	return st
}

// peersWorld stands up one TLS server per peer that answers, and a dial that reaches them by
// MagicDNS name (and fails for every other name, as an unreachable peer does).
func peersWorld(t *testing.T, st *ipnstate.Status, handlers map[string]http.Handler) {
	t.Helper()
	addrs := map[string]string{}
	var conf *tls.Config
	for name, h := range handlers {
		srv := httptest.NewTLSServer(h)
		t.Cleanup(srv.Close)
		addrs[name+".tail1234.ts.net"] = srv.Listener.Addr().String()
		conf = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	}
	conf.ServerName = "example.com" // httptest's certificate
	peersTestEnv = &peersEnv{
		status: fakePeerStatus{st: st},
		dial: func(ctx context.Context, host string, port uint16) (net.Conn, error) {
			addr, ok := addrs[host]
			if !ok || port != 443 {
				return nil, errors.New("no route to " + host)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		tls:       conf,
		stopwatch: func() func() time.Duration { return func() time.Duration { return 7 * time.Millisecond } },
	}
	t.Cleanup(func() { peersTestEnv = nil })
}

func fleetIndex(consoles int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" || r.Header.Get("Accept") != "application/json" {
			http.NotFound(w, r)
			return
		}
		list := make([]map[string]string, consoles)
		for i := range list {
			list[i] = map[string]string{"id": "c"}
		}
		json.NewEncoder(w).Encode(map[string]any{"login": "alice@example.com", "consoles": list})
	})
}

func fleetRefusal(reason string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Fleet-Reason", reason)
		w.WriteHeader(http.StatusForbidden)
	})
}

func runPeersCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	st := run(append([]string{"peers"}, args...), &out, &errb)
	return st, out.String(), errb.String()
}

// peersRows runs `fleet peers`, which must succeed with nothing on stderr, and returns its output
// and each line of it with its runs of spaces made one (the table's columns are aligned).
func peersRows(t *testing.T) (rows []string, out string) {
	t.Helper()
	code, out, errs := runPeersCmd(t)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, l := range strings.Split(out, "\n") {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	return rows, out
}

// TestPeers_G2: fleet peers asks every online peer for the index, as this machine, and tells a
// fleet's answer (a refusal too) from another server's and from no answer, each with its time.
func TestPeers_G2(t *testing.T) {
	st := peerStatus(nil,
		statusPeer{name: "box", user: 1, online: true},
		statusPeer{name: "ci", user: 2, tags: []string{"tag:ci"}, online: true},
		statusPeer{name: "nas", user: 1, online: true},
		statusPeer{name: "phone", user: 1, online: true},
		statusPeer{name: "old", user: 1, online: false},
	)
	peersWorld(t, st, map[string]http.Handler{
		"box": fleetIndex(2),
		"ci":  fleetRefusal("not-granted"),
		"nas": http.NotFoundHandler(),
	})
	rows, out := peersRows(t)
	for _, want := range []string{
		"PEER OWNER ANSWER TIME",
		"box.tail1234.ts.net alice@example.com fleet: 2 console(s) for this machine's owner 7 ms",
		"ci.tail1234.ts.net tag:ci answers as fleet, refused (not-granted) 7 ms",
		"nas.tail1234.ts.net alice@example.com answers, not as fleet (HTTP 404) 7 ms",
		"phone.tail1234.ts.net alice@example.com no answer -",
		"1 offline peer(s) not asked.",
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "old.tail1234") || strings.Contains(out, "tagged node") {
		t.Errorf("output:\n%s", out)
	}

	code, out, _ := runPeersCmd(t, "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	var lines []peerAnswer
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var a peerAnswer
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		lines = append(lines, a)
	}
	if len(lines) != 4 || lines[0].Answer != "fleet" || *lines[0].Consoles != 2 || lines[1].Answer != "fleet-refused" ||
		lines[1].Reason != "not-granted" || lines[2].Answer != "not-fleet" || lines[3].Answer != "no-answer" || lines[3].Error == "" {
		t.Errorf("--json:\n%s", out)
	}
}

// TestPeersTagged_G2: on a tagged machine, fleet peers says that other fleets refuse tagged nodes
// (S5) and shows only which peers answer as fleet.
func TestPeersTagged_G2(t *testing.T) {
	st := peerStatus([]string{"tag:ci"},
		statusPeer{name: "box", user: 1, online: true},
		statusPeer{name: "phone", user: 1, online: true},
	)
	peersWorld(t, st, map[string]http.Handler{"box": fleetRefusal("tagged-node")})
	code, out, _ := runPeersCmd(t)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"other fleets refuse tagged nodes (SPEC S5", "box.tail1234.ts.net", "answers as fleet", "no answer"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "refused (tagged-node)") {
		t.Errorf("a tagged machine's list names the refusal as if it were news:\n%s", out)
	}
}

// TestPeersFailsClosed_G2: without tailscaled's status, or without a MagicDNS suffix, fleet
// peers lists nothing and exits 1, saying why.
func TestPeersFailsClosed_G2(t *testing.T) {
	for name, status := range map[string]fakePeerStatus{
		"G2 tailscaled down":   {err: errors.New("connection refused")},
		"G2 no MagicDNS suffx": {st: &ipnstate.Status{Self: &ipnstate.PeerStatus{DNSName: "sup."}}},
	} {
		t.Run(name, func(t *testing.T) {
			peersTestEnv = &peersEnv{status: status, stopwatch: realStopwatch}
			t.Cleanup(func() { peersTestEnv = nil })
			code, out, errs := runPeersCmd(t)
			if code != 1 || out != "" || !strings.Contains(errs, "cannot list the tailnet's peers") {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
			}
		})
	}
}
