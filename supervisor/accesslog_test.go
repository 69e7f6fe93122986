package supervisor

// The access log on the loopback door (SPEC G3), from raw requests over net.Dial: what one line
// holds for a request forwarded (on the fast loop and on net/http's path), for a WebSocket when
// it closes, for a refusal after the caller was identified; that a refusal before it writes no
// line; and that no secret the caller or fleet sent ever reaches the file.

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/audit/accesslog"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/fulldisk"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// stepClock is a fake clock that moves only when the test says.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (d *door) accessLogPath() string {
	return filepath.Join(d.home, "fleet", accesslog.FileName)
}

const (
	secretQuery  = "code=QUERYSECRET123"
	secretCookie = "Cookie: session=COOKIESECRET456"
)

func TestAccessLogLoopback_G3(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state")
	writeProfile(t, home, "access:\n  mode: grants\n")
	tn := doortest.NewFakeTailscaled()
	p := tn.Peers[doortest.AliceIP]
	p.Caps = grantsOf(`{"consoles":["alpha"]}`)
	tn.Peers[doortest.AliceIP] = p
	clock := &stepClock{now: time.Date(2026, 12, 1, 22, 1, 2, 345e6, time.UTC)}
	d := startDoorAt(t, home, tn, func(c *Config) { c.Now = clock.Now })
	d.addConsole(t, "beta") // registered, and not granted to alice
	// Every entry the door records, before the access log is told of it: so that once a line
	// is in the file, every entry recorded before it is here.
	all := &keptEntries{}
	d.srv.door.Audit = audit.Recorders{all, d.srv.door.Audit}

	// Before identification: no line (each followed by requests that write one, in order).
	for _, req := range []string{
		doortest.ServeReq("GET", "/c/alpha/hooks/x"),                            // S7 hooks
		"GET /c/alpha/x HTTP/1.1\r\nHost: " + doortest.TSName + "\r\n\r\n",      // S5 unverified
		doortest.ServeReq("GET", "/c/alpha/x", "X-Phase-Console-Fleet: forged"), // S3
	} {
		if r := d.Raw(rawhttp.CRLF(req)); r.Status < 400 {
			t.Fatalf("%q: %d", req, r.Status)
		}
	}

	// Forwarded, on the fast loop (a plain GET) and on net/http's path (a body), both carrying a
	// query and a cookie that the log never holds.
	if r := d.Raw(doortest.ServeReq("GET", "/c/alpha/page?"+secretQuery, secretCookie)); r.Status != 200 || r.Body != "echo /page" {
		t.Fatalf("GET: %d %q", r.Status, r.Body)
	}
	// A door records an answer once it is complete, which may be just after the caller has it:
	// each line is waited for before the clock moves.
	doortest.AccessLog(t, d.accessLogPath(), 1)
	clock.Advance(time.Second)
	if r := d.Raw(doortest.ServeReq("POST", "/c/alpha/form?"+secretQuery, secretCookie, "Content-Length: 4") + "abcd"); r.Status != 200 {
		t.Fatalf("POST: %d", r.Status)
	}
	doortest.AccessLog(t, d.accessLogPath(), 2)
	// Refused after identification: one line each.
	if r := d.Raw(doortest.ServeReq("GET", "/c/beta/x?"+secretQuery)); r.Status != 403 || r.Header.Get("X-Fleet-Reason") != "not-granted" {
		t.Fatalf("beta: %d %s", r.Status, r.Header.Get("X-Fleet-Reason"))
	}
	doortest.AccessLog(t, d.accessLogPath(), 3)

	// A WebSocket: one line when it closes, with its duration and the bytes sent to the caller.
	conn, br, resp := d.Open(wsReq("/c/alpha/ws?" + secretQuery))
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	io.WriteString(conn, "hello\n")
	if got := readN(t, br, len("echo:hello\n")); got != "echo:hello\n" {
		t.Fatalf("echo %q", got)
	}
	clock.Advance(1500 * time.Millisecond)
	conn.Close()
	lines := doortest.AccessLog(t, d.accessLogPath(), 4)

	want := []audit.Line{
		{Time: "2026-12-01T22:01:02.345Z", Door: "loopback", Login: doortest.Alice, Console: "alpha", Method: "GET", Path: "/page", Status: 200, Bytes: int64(len("echo /page")), Peer: doortest.AliceIP},
		{Time: "2026-12-01T22:01:03.345Z", Door: "loopback", Login: doortest.Alice, Console: "alpha", Method: "POST", Path: "/form", Status: 200, Bytes: int64(len("echo /form")), Peer: doortest.AliceIP},
		{Time: "2026-12-01T22:01:03.345Z", Door: "loopback", Login: doortest.Alice, Console: "beta", Method: "GET", Path: "/x", Status: 403, Bytes: lines[2].Bytes, Peer: doortest.AliceIP, Reason: "not-granted"},
		{Time: "2026-12-01T22:01:03.345Z", Door: "loopback", Login: doortest.Alice, Console: "alpha", Method: "GET", Path: "/ws", Status: 101, Bytes: int64(len("echo:hello\n")), DurationMS: 1500, Peer: doortest.AliceIP},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %+v", len(lines), len(want), lines)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d\n got %+v\nwant %+v", i, lines[i], want[i])
		}
	}
	if lines[2].Bytes == 0 {
		t.Error("the refusal's page: 0 bytes")
	}

	// alice's grant covers alpha only: a console that does not exist is not-granted too (G1),
	// and one more line.
	if r := d.Raw(doortest.ServeReq("GET", "/c/nosuch/x")); r.Status != 403 {
		t.Fatalf("nosuch: %d", r.Status)
	}
	lines = doortest.AccessLog(t, d.accessLogPath(), 5)
	if l := lines[4]; l.Console != "nosuch" || l.Login != doortest.Alice || l.Reason != "not-granted" {
		t.Errorf("nosuch: %+v", l)
	}

	assertNoSecret(t, d.accessLogPath(), d.Token)

	// Exactly one entry per request answered: the five lines, and the three refusals made
	// before alice was identified, which name nobody (metrics count them; the log does not).
	got := all.reasons()
	wantReasons := []string{"", "", "", "assertion-sent", "hooks", "not-granted", "not-granted", "unverified"}
	if slices.Sort(got); strings.Join(got, ",") != strings.Join(wantReasons, ",") {
		t.Errorf("entries recorded %q, want %q", got, wantReasons)
	}
	for _, e := range all.entries() {
		if e.Identified != (e.Login != "") || e.Identified != e.Audited() {
			t.Errorf("%s: identified %v as %q", e.Reason, e.Identified, e.Login)
		}
	}
}

// keptEntries keeps a copy of every entry recorded.
type keptEntries struct {
	mu   sync.Mutex
	kept []audit.Entry
}

func (k *keptEntries) Record(e *audit.Entry) {
	k.mu.Lock()
	k.kept = append(k.kept, *e)
	k.mu.Unlock()
}

func (k *keptEntries) entries() []audit.Entry {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]audit.Entry(nil), k.kept...)
}

func (k *keptEntries) reasons() []string {
	var rs []string
	for _, e := range k.entries() {
		rs = append(rs, e.Reason)
	}
	return rs
}

// TestAccessLogUnknownConsole_G3: with every console open to alice, an id that no console has is
// 404 unknown-console, refused after identifying her: one line.
func TestAccessLogUnknownConsole_G3(t *testing.T) {
	d := startDoor(t)
	if r := d.Raw(doortest.ServeReq("GET", "/c/nosuch/x?"+secretQuery)); r.Status != 404 || r.Header.Get("X-Fleet-Reason") != "unknown-console" {
		t.Fatalf("%d %s", r.Status, r.Header.Get("X-Fleet-Reason"))
	}
	lines := doortest.AccessLog(t, d.accessLogPath(), 1)
	if l := lines[0]; l.Reason != "unknown-console" || l.Login != doortest.Alice || l.Console != "nosuch" || l.Path != "/x" || l.Status != 404 {
		t.Errorf("%+v", l)
	}
}

// assertNoSecret fails when the access log holds the fleet token, a query, a cookie.
func assertNoSecret(t *testing.T, path string, secrets ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(secrets, "QUERYSECRET123", "COOKIESECRET456", "?", "Cookie", "forged") {
		if s != "" && strings.Contains(string(b), s) {
			t.Errorf("the access log holds %q", s)
		}
	}
}

// TestAccessLogFullDiskServesEveryRequest_G3: the access log on a disk that is full (a small
// tmpfs, filled): every request is still served, on both paths, and every line is counted lost.
func TestAccessLogFullDiskServesEveryRequest_G3(t *testing.T) {
	d := startDoor(t)
	disk := fulldisk.Mount(t, 64<<10)
	fleetDir := filepath.Join(disk, "fleet")
	if err := os.Mkdir(fleetDir, 0o700); err != nil {
		t.Fatal(err)
	}
	log, err := accesslog.Open(fleetDir)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	fulldisk.Fill(t, disk, 0)
	d.srv.door.Audit = log // both paths, the fast loop and net/http's, record to the Door's Audit
	const n = 20
	for i := 0; i < n; i++ {
		req := doortest.ServeReq("GET", "/c/alpha/x")
		if i%2 == 1 {
			req = doortest.ServeReq("POST", "/c/alpha/x", "Content-Length: 1") + "a"
		}
		if r := d.Raw(req); r.Status != 200 {
			t.Fatalf("request %d: %d", i, r.Status)
		}
	}
	deadline := time.Now().Add(doortest.WaitLimit)
	for log.Dropped() < n && time.Now().Before(deadline) {
		log.Flush()
		time.Sleep(5 * time.Millisecond)
	}
	if log.Dropped() != n || log.Written() != 0 {
		t.Fatalf("dropped %d written %d, want %d dropped", log.Dropped(), log.Written(), n)
	}
}
