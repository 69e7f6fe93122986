package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestPeersHTTPOnly_O8: a fleet published over plain HTTP only (nothing on 443) is told apart from
// a machine that does not answer: fleet-http-only, with why HTTPS gave nothing; a peer whose HTTP
// answer is not a fleet's, or that answers on neither port, gives no answer.
func TestPeersHTTPOnly_O8(t *testing.T) {
	st := peerStatus(nil,
		statusPeer{name: "box", user: 1, online: true},
		statusPeer{name: "plain", user: 1, online: true},
		statusPeer{name: "plainrefuses", user: 1, online: true},
		statusPeer{name: "web", user: 1, online: true},
		statusPeer{name: "gone", user: 1, online: true},
	)
	peersWorld(t, st, map[string]http.Handler{"box": fleetIndex(2)})
	overHTTP := map[string]string{}
	for name, h := range map[string]http.Handler{"plain": fleetIndex(3), "plainrefuses": fleetRefusal("not-granted"), "web": http.NotFoundHandler()} {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		overHTTP[name+".tail1234.ts.net"] = srv.Listener.Addr().String()
	}
	tlsDial := peersTestEnv.dial
	peersTestEnv.dial = func(ctx context.Context, host string, port uint16) (net.Conn, error) {
		if port == 80 {
			addr, ok := overHTTP[host]
			if !ok {
				return nil, errors.New("connection refused")
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
		if _, httpOnly := overHTTP[host]; httpOnly {
			return nil, errors.New("dial failure: connection refused")
		}
		return tlsDial(ctx, host, port)
	}

	rows, out := peersRows(t)
	for _, want := range []string{
		"box.tail1234.ts.net alice@example.com fleet: 2 console(s) for this machine's owner 7 ms",
		"plain.tail1234.ts.net alice@example.com answers as fleet over HTTP only, not HTTPS (",
		"plainrefuses.tail1234.ts.net alice@example.com answers as fleet over HTTP only, not HTTPS (",
		"web.tail1234.ts.net alice@example.com no answer -",
		"gone.tail1234.ts.net alice@example.com no answer -",
	} {
		if !slices.ContainsFunc(rows, func(r string) bool { return strings.HasPrefix(r, want) }) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	code, out, _ := runPeersCmd(t, "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	got := map[string]peerAnswer{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var a peerAnswer
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		got[strings.TrimSuffix(a.Name, ".tail1234.ts.net")] = a
	}
	if a := got["plain"]; a.Answer != "fleet-http-only" || a.Consoles == nil || *a.Consoles != 3 || !strings.Contains(a.Error, "connection refused") {
		t.Errorf("plain: %+v", a)
	}
	if a := got["plainrefuses"]; a.Answer != "fleet-http-only" || a.Reason != "not-granted" || a.Status != http.StatusForbidden {
		t.Errorf("plainrefuses: %+v", a)
	}
	if got["web"].Answer != "no-answer" || got["gone"].Answer != "no-answer" || got["box"].Answer != "fleet" {
		t.Errorf("--json:\n%s", out)
	}
}
