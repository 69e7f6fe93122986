package reach

// The access log on the direct-reach door (SPEC G3), from raw requests over TLS: a paired
// device's request forwarded, its WebSocket when it closes, its refusal after it was identified
// (not-granted); no line for a stranger nor for a refusal made before the door asserts who is
// calling (hooks); and no cookie, query, pairing code or password in the file.

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/accesslog"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/pairing"
)

func TestAccessLogReach_G3(t *testing.T) {
	fleetDir := filepath.Join(t.TempDir(), "fleet")
	if err := os.Mkdir(fleetDir, 0o700); err != nil {
		t.Fatal(err)
	}
	log, err := accesslog.Open(fleetDir)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	beta := heldConsole(t)
	d := startTestDoor(t, func(c *Config) {
		c.Audit = log
		c.Consoles.(consoleMap)["beta"] = beta.Addr()
	})
	path := filepath.Join(fleetDir, accesslog.FileName)
	only, err := access.ParseList("alpha")
	if err != nil {
		t.Fatal(err)
	}
	dev, cred, err := d.register.AddFor("phone", only, d.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	cookie := "Cookie: theme=dark; " + pairing.CookieName + "=" + cred
	start := d.clock.Now()

	// No line: a stranger's request and refusal, the pairing POST, and a paired device's
	// refusal decided before the door asserts who is calling (S7 hooks).
	for _, req := range []string{
		d.req("GET", "/c/alpha/x"),
		reqHost("GET", "/c/alpha/x", "wrong.example", cookie),
		d.req("POST", "/pair", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 34") + "code=PAIRCODE99&password=PAIRPASS7",
		d.req("GET", "/c/alpha/hooks/x", cookie),
	} {
		d.Raw(req)
	}

	if r := d.Raw(d.req("GET", "/c/alpha/page?code=QUERYSECRET123", cookie)); r.Status != 200 {
		t.Fatalf("forwarded: %d", r.Status)
	}
	doortest.AccessLog(t, path, 1) // recorded once complete, maybe just after the caller has it
	if r := d.Raw(d.req("GET", "/c/beta/x", cookie)); r.Status != 403 || r.Header.Get("X-Fleet-Reason") != "not-granted" {
		t.Fatalf("beta: %d %s", r.Status, r.Header.Get("X-Fleet-Reason"))
	}
	doortest.AccessLog(t, path, 2)
	conn, br, resp := d.Open(d.req("GET", "/c/alpha/ws?code=QUERYSECRET123", cookie, "Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	io.WriteString(conn, "hello\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo:hello\n" {
		t.Fatalf("echo %q %v", line, err)
	}
	d.clock.Advance(2 * time.Second)
	conn.Close()
	lines := doortest.AccessLog(t, path, 3)

	at := start.UTC().Format(audit.TimeLayout)
	want := []audit.Line{
		{Time: at, Door: "reach", Login: dev.Login(), Console: "alpha", Method: "GET", Path: "/page", Status: 200, Bytes: int64(len("echo /page")), Peer: "127.0.0.1"},
		{Time: at, Door: "reach", Login: dev.Login(), Console: "beta", Method: "GET", Path: "/x", Status: 403, Bytes: lines[1].Bytes, Peer: "127.0.0.1", Reason: "not-granted"},
		{Time: at, Door: "reach", Login: dev.Login(), Console: "alpha", Method: "GET", Path: "/ws", Status: 101, Bytes: int64(len("echo:hello\n")), DurationMS: 2000, Peer: "127.0.0.1"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %+v", len(lines), len(want), lines)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d\n got %+v\nwant %+v", i, lines[i], want[i])
		}
	}
	b, _ := os.ReadFile(path)
	for _, s := range []string{cred, "theme", "QUERYSECRET123", "PAIRCODE99", "PAIRPASS7", fleetToken, "?"} {
		if strings.Contains(string(b), s) {
			t.Errorf("the access log holds %q", s)
		}
	}
}
