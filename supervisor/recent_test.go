package supervisor

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/access"
	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/pairing"
)

var recentT0 = time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)

// recentEntry is request n of login to alpha at path, through the loopback door.
func recentEntry(n int, login, path string) *audit.Entry {
	return &audit.Entry{
		Time: recentT0.Add(time.Duration(n) * time.Second), Door: audit.DoorLoopback, Login: login, Console: "alpha",
		Method: "GET", Path: path, Status: 200, Bytes: 3, Duration: time.Millisecond,
		Peer: netip.MustParseAddr(doortest.AliceIP), Identified: true,
	}
}

func recentPaths(rs []RecentRequest) []string {
	var p []string
	for _, r := range rs {
		p = append(p, r.Path)
	}
	return p
}

// TestRecentActivityKeepsOwnLast_G3: each login's last recentPerLogin requests, newest first, and
// nobody else's; nothing of the direct-reach door, of a device, or of a caller not identified.
func TestRecentActivityKeepsOwnLast_G3(t *testing.T) {
	a := NewRecentActivity()
	for n := 1; n <= recentPerLogin+3; n++ {
		a.Record(recentEntry(n, doortest.Alice, fmt.Sprintf("/a%d", n)))
		if n%4 == 0 {
			a.Record(recentEntry(n, doortest.Bob, fmt.Sprintf("/b%d", n)))
		}
	}
	refused := recentEntry(99, doortest.Bob, "/refused")
	refused.Status, refused.Reason = 403, "not-granted"
	a.Record(refused)

	var want []string
	for n := recentPerLogin + 3; n > 3; n-- {
		want = append(want, fmt.Sprintf("/a%d", n))
	}
	if got := recentPaths(a.Of(doortest.Alice)); !slices.Equal(got, want) {
		t.Errorf("alice: %q, want %q", got, want)
	}
	if got := recentPaths(a.Of(doortest.Bob)); !slices.Equal(got, []string{"/refused", "/b12", "/b8", "/b4"}) {
		t.Errorf("bob: %q", got)
	}
	got := a.Of(doortest.Alice)[0]
	if want := (RecentRequest{Time: recentT0.Add(13 * time.Second), Console: "alpha", Method: "GET", Path: "/a13", Status: 200}); got != want {
		t.Errorf("newest: %+v, want %+v", got, want)
	}

	for _, e := range []*audit.Entry{
		{Time: recentT0, Door: audit.DoorReach, Login: "carol@example.com", Console: "alpha", Method: "GET", Path: "/reach", Status: 200},
		{Time: recentT0, Door: audit.DoorLoopback, Login: "device:pixel#a1b2c3", Console: "alpha", Method: "GET", Path: "/dev", Status: 200},
		{Time: recentT0, Door: audit.DoorLoopback, Login: "carol@example.com", Path: "/unverified", Status: 401, Reason: "identity-mismatch"},
		{Time: recentT0, Door: audit.DoorLoopback, Path: "/nobody", Status: 200},
	} {
		a.Record(e)
	}
	for _, login := range []string{"carol@example.com", "device:pixel#a1b2c3", ""} {
		if got := a.Of(login); len(got) != 0 {
			t.Errorf("%q: %+v, want nothing", login, got)
		}
	}
	if got := (*RecentActivity)(nil).Of(doortest.Alice); got != nil {
		t.Errorf("nil: %+v", got)
	}
}

// TestRecentActivityBounds: at most recentLogins logins (one more replaces the one whose last
// request is the oldest), and a long path kept cut.
func TestRecentActivityBounds(t *testing.T) {
	a := NewRecentActivity()
	login := func(i int) string { return fmt.Sprintf("user%d@example.com", i) }
	for i := 0; i < recentLogins; i++ {
		a.Record(recentEntry(i, login(i), "/x"))
	}
	a.Record(recentEntry(100, login(0), "/again")) // user1 is now the one last seen longest ago
	a.Record(recentEntry(101, "new@example.com", "/new"))
	if len(a.rings) != recentLogins || len(a.Of(login(1))) != 0 || len(a.Of(login(0))) != 2 || len(a.Of("new@example.com")) != 1 {
		t.Errorf("%d logins; user1 %d, user0 %d, new %d", len(a.rings), len(a.Of(login(1))), len(a.Of(login(0))), len(a.Of("new@example.com")))
	}

	long := "/" + strings.Repeat("é", recentPathBytes) // two bytes each: the cut falls inside one
	a.Record(recentEntry(102, doortest.Alice, long))
	got := a.Of(doortest.Alice)[0].Path
	if !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) || len(got) > recentPathBytes+len("…") {
		t.Errorf("long path kept as %q", got)
	}
}

// TestRecentActivityRecordAllocatesNothing: on the hot path, a login already held costs no
// allocation.
func TestRecentActivityRecordAllocatesNothing(t *testing.T) {
	a := NewRecentActivity()
	e := recentEntry(1, doortest.Alice, "/c/alpha/some/path")
	a.Record(e)
	if n := testing.AllocsPerRun(1000, func() { a.Record(e) }); n != 0 {
		t.Errorf("Record: %v allocations, want 0", n)
	}
}

func BenchmarkRecentActivityRecord(b *testing.B) {
	a := NewRecentActivity()
	e := recentEntry(1, doortest.Alice, "/some/path")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.Record(e)
		}
	})
}

// asBob is req as Serve sends it for Bob.
func asBob(req string) string {
	return strings.Replace(strings.Replace(req, doortest.AliceIP, doortest.BobIP, 1), doortest.Alice, doortest.Bob, 1)
}

// TestIndexRecentActivity_G3: the index's HTML shows the caller its own recent requests, fed as
// the doors feed them (Server.recorders), and never another login's; a path is escaped as text;
// the JSON form has no such field.
func TestIndexRecentActivity_G3(t *testing.T) {
	d := startDoor(t)
	// A verified caller with no request yet sees no panel.
	if r := d.Raw(doortest.ServeReq("GET", "/")); r.Status != 200 || strings.Contains(r.Body, "recent activity") {
		t.Errorf("no requests yet: %d\n%s", r.Status, r.Body)
	}
	rec := d.srv.auditRecorder()
	rec.Record(recentEntry(1, doortest.Alice, "/alice-first"))
	rec.Record(recentEntry(2, doortest.Bob, "/bob-only"))
	rec.Record(recentEntry(3, doortest.Alice, `/x"><script>alert(1)</script>`))

	alice := d.Raw(doortest.ServeReq("GET", "/"))
	if alice.Status != 200 || !strings.Contains(alice.Body, "Your recent activity") || !strings.Contains(alice.Body, "/alice-first") {
		t.Fatalf("alice's index: %d\n%s", alice.Status, alice.Body)
	}
	if strings.Contains(alice.Body, "/bob-only") {
		t.Errorf("alice's index shows bob's request:\n%s", alice.Body)
	}
	if strings.Contains(alice.Body, "<script>") || !strings.Contains(alice.Body, "/x&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the path is not escaped as text:\n%s", alice.Body)
	}
	if i, j := strings.Index(alice.Body, "alert(1)"), strings.Index(alice.Body, "/alice-first"); i > j {
		t.Errorf("not newest first:\n%s", alice.Body)
	}
	if !strings.Contains(alice.Body, `<time datetime="2026-12-01T22:00:03.000Z">Dec 1 22:00:03</time>`) {
		t.Errorf("no time of the newest request:\n%s", alice.Body)
	}

	bob := d.Raw(asBob(doortest.ServeReq("GET", "/")))
	if bob.Status != 200 || !strings.Contains(bob.Body, "Signed in as <b>"+doortest.Bob+"</b>") || !strings.Contains(bob.Body, "/bob-only") {
		t.Fatalf("bob's index: %d\n%s", bob.Status, bob.Body)
	}
	if strings.Contains(bob.Body, "alice-first") || strings.Contains(bob.Body, "alert(1)") {
		t.Errorf("bob's index shows alice's requests:\n%s", bob.Body)
	}

	asJSON := d.Raw(doortest.ServeReq("GET", "/", "Accept: application/json"))
	if asJSON.Status != 200 || strings.Contains(asJSON.Body, "alice-first") {
		t.Errorf("the JSON index: %d %s", asJSON.Status, asJSON.Body)
	}

}

// TestDeviceIndexHasNoRecentActivity_G3_R9: a paired device's index on the direct-reach door shows
// no recent activity, neither its own requests nor anyone else's.
func TestDeviceIndexHasNoRecentActivity_G3_R9(t *testing.T) {
	d := startDoor(t)
	addr := rawhttp.FreeLoopbackAddr(t).String()
	writeReachProfile(t, d, addr)
	d.srv.ReloadReach()
	dev, cred, err := pairing.RegisterDeviceFor(d.srv.reachDir(), "phone", access.Everything, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := d.srv.auditRecorder()
	rec.Record(recentEntry(1, doortest.Alice, "/alice-path"))
	own := recentEntry(2, dev.Login(), "/device-path")
	own.Door = audit.DoorReach
	rec.Record(own)

	st, body := reachGetBody(t, addr, "/", "Cookie: "+pairing.CookieName+"="+cred)
	if st != http.StatusOK || !strings.Contains(body, "This device: ") {
		t.Fatalf("the device's index: %d\n%s", st, body)
	}
	for _, s := range []string{"recent activity", "/alice-path", "/device-path"} {
		if strings.Contains(strings.ToLower(body), s) {
			t.Errorf("the device's index shows %q:\n%s", s, body)
		}
	}
}

// reachGetBody is reachGet with the answer's body.
func reachGetBody(t *testing.T, addr, target string, extra ...string) (int, string) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, addr, strings.Join(append(extra, ""), "\r\n")))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
