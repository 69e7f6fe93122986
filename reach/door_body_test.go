package reach

// The door's own answers to a request whose body it never reads (S9).

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/pairing"
)

// TestOwnAnswerDoesNotAwaitAnUnreadBody_S9: a request the door answers itself — anything not
// forwarded to a console — is answered at once, even when its body never comes, and the door
// then lets go of the connection. net/http, to keep a connection, reads what is left of an
// unread body (up to 256 KiB) before it writes the answer and again when it closes the body,
// under no read deadline on this door: a stranger who sent a head with "Content-Length: 1000"
// and nothing more got no answer and held a connection, a goroutine and a descriptor for ever
// (the redirect to /pair is no failure, so nothing bounded how many). "Connection: close" on
// the answer alone got the answer out but left the door reading. Every row sends its head and
// no byte of its body; a forwarded request, body and all, keeps its connection. The rows marked
// shared are answered by proxy.Door for a device's console path, not by this door's own code.
func TestOwnAnswerDoesNotAwaitAnUnreadBody_S9(t *testing.T) {
	d := startTestDoor(t, func(c *Config) {
		c.PairingFor = func(door *Door) http.Handler { // the real pairing pages
			return pairing.NewHandler(pairing.HandlerConfig{
				Dir: filepath.Dir(c.TLSDir), Register: c.Devices.(*pairing.Register),
				Fingerprint: door.Fingerprint(), Origin: "https://" + door.Addr().String(),
				OnFailure: door.Failure, Logger: slog.New(slog.DiscardHandler), Now: c.Now,
			})
		}
	})
	_, cookie := d.pair("phone")
	const body = "Content-Length: 1000"
	held := "127.0.0.2" // a source the limiter holds back
	for range SourceLimit {
		d.door.limiter.Failure(netip.MustParseAddr(held))
	}
	for _, row := range []struct {
		name, src, req string
		status         int
		reason         string
		// shared: answered by proxy.Door, the judgement both doors share, not by this door:
		// whether it lets go of the connection is proxy's (WriteRefusal, its redirect).
		shared bool
	}{
		{"R7 an unpaired caller sent to /pair", "", d.req("POST", "/c/alpha/x", body), 303, "", false},
		{"R7 /ca.crt", "", d.req("GET", "/ca.crt", body), 200, "", false},
		{"pairing POST refused for its Origin", "", d.req("POST", "/pair", "Origin: https://evil.example",
			"Content-Type: application/x-www-form-urlencoded", body), 403, "cross-origin", false},
		{"pairing POST not a form", "", d.req("POST", "/pair", "Content-Type: text/plain", body), 415, "pairing-form", false},
		{"pairing page with a body", "", d.req("GET", "/pair", body), 200, "", false},
		{"pairing path not canonical", "", d.req("POST", "/pair/%2e%2e/x", body), 404, "not-found", false},
		{"R5 host", "", reqHost("POST", "/pair", "192.0.2.1:7443", body), 421, "host", false},
		{"R6 a source held back", held, d.req("POST", "/pair", "Content-Type: application/x-www-form-urlencoded", body), 429, "rate-limited", false},
		{"R1 reach-settings, a device", "", d.req("POST", "/fleet/v1/reach", cookie, body), 403, "reach-settings", false},
		{"no such page, a device", "", d.req("POST", "/nowhere", cookie, body), 404, "not-found", false},
		{"S7 hooks, a device", "", d.req("POST", "/c/alpha/hooks", cookie, body), 403, "hooks", true},
		{"unknown console, a device", "", d.req("POST", "/c/nobody/x", cookie, body), 404, "unknown-console", true},
		{"the console's root without its slash, a device", "", d.req("POST", "/c/alpha", cookie, body), 308, "", true},
		{"the index, a device", "", d.req("GET", "/", cookie, "Transfer-Encoding: chunked"), 200, "", false},
	} {
		t.Run(row.name, func(t *testing.T) {
			conn := d.dialFrom(row.src, "")
			defer conn.Close()
			if _, err := io.WriteString(conn, row.req); err != nil { // the head, and no byte of the body
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(doortest.WaitLimit))
			br := bufio.NewReader(conn)
			method, _, _ := strings.Cut(row.req, " ")
			res, err := http.ReadResponse(br, &http.Request{Method: method})
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("S9 no answer: the door waits for a body it never reads")
			}
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != row.status || res.Header.Get("X-Fleet-Reason") != row.reason {
				t.Errorf("%d %q, want %d %q", res.StatusCode, res.Header.Get("X-Fleet-Reason"), row.status, row.reason)
			}
			if !res.Close {
				t.Error(`the answer does not say "Connection: close": its connection waits for the body`)
			}
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Errorf("S9 after its answer the door kept the connection (%v): it reads a body it never uses, with no deadline", err)
			}
		})
	}
	if n := d.Alpha.Count(); n != 0 {
		t.Errorf("the console saw %d requests", n)
	}

	// A request that is forwarded, body and all, is the console's to answer: its connection stays.
	conn := d.dial("")
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := range 2 {
		io.WriteString(conn, d.req("POST", "/c/alpha/x", cookie, "Content-Length: 5")+"hello")
		res, err := http.ReadResponse(br, &http.Request{Method: "POST"})
		if err != nil {
			t.Fatalf("forwarded request %d on one connection: %v", i+1, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Close {
			t.Fatalf("forwarded request %d: %d, closes: %v; want 200 on a kept connection", i+1, res.StatusCode, res.Close)
		}
	}
}
