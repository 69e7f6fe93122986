package tailnet

import (
	"mime"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestCallerVerified_S5 runs each S5 case through a real listener and the real LocalAPI client
// against a fake tailscaled. (The index page's rows are package supervisor's.)
func TestCallerVerified_S5(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name   string
		req    string
		status int
		reason string
		login  string // for forwarded rows
	}{
		{"S5 verified user", serveReq("GET", "/c/alpha/"), 200, "", alice},
		{"S5 verified user over IPv6", strings.Replace(strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, bobIP, 1), alice, bob, 1), 200, "", bob},
		{"S5 no Tailscale-User-Login is fine (WhoIs decides)", strings.Replace(serveReq("GET", "/c/alpha/"), "Tailscale-User-Login: "+alice+"\n", "", 1), 200, "", alice},
		{"S5 RFC 2047 login", strings.Replace(strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, jurgenIP, 1), alice, mime.QEncoding.Encode("utf-8", jurgen), 1), 200, "", jurgen},
		{"S5c tagged node", strings.Replace(strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, taggedIP, 1), "Tailscale-User-Login: "+alice+"\n", "", 1), 403, "tagged-node", ""},
		{"S5c funnel", serveReq("GET", "/c/alpha/", "Tailscale-Funnel-Request: ?1"), 403, "funnel", ""},
		{"S5c funnel spelled", serveReq("GET", "/c/alpha/", "tailscale_funnel_request: ?1"), 403, "funnel", ""},
		{"S5c unknown peer", strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, "100.64.0.99", 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For not Tailscale", strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, "192.168.1.5", 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For list", strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, aliceIP+", "+aliceIP, 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For twice", serveReq("GET", "/c/alpha/", "X-Forwarded-For: "+aliceIP), 401, "unverified", ""},
		{"S5c X-Forwarded-For missing", strings.Replace(serveReq("GET", "/c/alpha/"), "X-Forwarded-For: "+aliceIP+"\n", "", 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For with port", strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, aliceIP+":443", 1), 401, "unverified", ""},
		{"S5d forged Tailscale-User-Login", strings.Replace(serveReq("GET", "/c/alpha/"), "Tailscale-User-Login: "+alice, "Tailscale-User-Login: bob@example.com", 1), 401, "identity-mismatch", ""},
		{"S5d two Tailscale-User-Login", serveReq("GET", "/c/alpha/", "Tailscale-User-Login: "+alice), 401, "identity-mismatch", ""},
		{"S5d device-shaped forged login", strings.Replace(serveReq("GET", "/c/alpha/"), "Tailscale-User-Login: "+alice, "Tailscale-User-Login: device:phone#abcdef", 1), 401, "identity-mismatch", ""},
		{"S5 this node's own address (a local process through Serve)", strings.Replace(serveReq("GET", "/c/alpha/"), aliceIP, selfIP, 1), 403, "self", ""},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.alpha.count()
			r := d.raw(row.req)
			if row.status == 200 {
				d.wantForwarded(t, r, before, row.login, "/")
				return
			}
			d.wantRefused(t, r, before, row.status, row.reason)
		})
	}
}

// TestTwoUsersOneConnection_S5: tailscaled reuses one backend connection for several users; each
// request is judged on its own.
func TestTwoUsersOneConnection_S5(t *testing.T) {
	d := startDoor(t)
	bobReq := strings.Replace(strings.Replace(serveReq("GET", "/c/alpha/b"), aliceIP, bobIP, 1), alice, bob, 1)
	rs := d.rawMany(serveReq("GET", "/c/alpha/a")+bobReq, 2)
	if rs[0].status != 200 || rs[1].status != 200 {
		t.Fatalf("got %d, %d", rs[0].status, rs[1].status)
	}
	reqs := d.alpha.All()
	got := []string{reqs[0].Header.Get("X-Phase-Console-Fleet-Login"), reqs[1].Header.Get("X-Phase-Console-Fleet-Login")}
	if got[0] != alice || got[1] != bob {
		t.Fatalf("logins %q, want alice then bob", got)
	}
}

// TestDirectForwardRefused_S5b: a connection that tailscaled recognises as a tailnet peer's (a
// userspace-networking forward straight to 127.0.0.1) is refused whatever headers it carries —
// unless tailscaled runs on a kernel TUN, where that cannot happen and the WhoIs is skipped.
func TestDirectForwardRefused_S5b(t *testing.T) {
	d := startDoor(t)
	d.tailnet.set(func(f *fakeTailnet) {
		f.direct = func(addr string) bool { return strings.HasPrefix(addr, "127.0.0.1:") }
	})
	before := d.alpha.count()
	d.wantRefused(t, d.raw(serveReq("GET", "/c/alpha/")), before, http.StatusUnauthorized, "unverified")

	tun := startDoor(t)
	tun.tailnet.set(func(f *fakeTailnet) {
		f.tun = true
		f.direct = func(addr string) bool { return strings.HasPrefix(addr, "127.0.0.1:") }
	})
	before = tun.alpha.count()
	tun.wantForwarded(t, tun.raw(serveReq("GET", "/c/alpha/")), before, alice, "/")
	tun.tailnet.mu.Lock()
	defer tun.tailnet.mu.Unlock()
	for _, a := range tun.tailnet.whoisLog {
		if strings.Contains(a, ":") && !strings.Contains(a, "::") && strings.Count(a, ":") == 1 {
			t.Errorf("WhoIs(%s) asked although status says TUN", a)
		}
	}
}

// TestConnectionJudgedOnce_S5: S5a/S5b are judged once per connection, not per request.
func TestConnectionJudgedOnce_S5(t *testing.T) {
	d := startDoor(t)
	d.rawMany(serveReq("GET", "/c/alpha/1")+serveReq("GET", "/c/alpha/2")+serveReq("GET", "/c/alpha/3"), 3)
	d.tailnet.mu.Lock()
	defer d.tailnet.mu.Unlock()
	conn, bare := 0, 0
	for _, a := range d.tailnet.whoisLog {
		if strings.HasPrefix(a, "127.0.0.1:") {
			conn++
		} else {
			bare++
		}
	}
	if conn != 1 {
		t.Errorf("WhoIs(RemoteAddr) asked %d times for one connection, want 1", conn)
	}
	if bare != 1 {
		t.Errorf("WhoIs(%s) asked %d times, want 1 (cached)", aliceIP, bare)
	}
}

// TestNotTailscaledRefused_S5a: a connection whose peer is not tailscaled's uid is refused.
func TestNotTailscaledRefused_S5a(t *testing.T) {
	d := startDoor(t, func(c *Config) { c.TailscaledUID = uid(os.Getuid() + 1) })
	before := d.alpha.count()
	r := d.raw(serveReq("GET", "/c/alpha/"))
	d.wantRefused(t, r, before, http.StatusUnauthorized, "unverified")
	if !strings.Contains(r.body, "not from tailscaled") {
		t.Errorf("page does not say why: %q", r.body)
	}
}

// TestLocalAPIDownFailsClosed_S5: when tailscaled cannot be asked, every /c/ request is 401 with a
// page that says why and what to run, and nothing is forwarded.
func TestLocalAPIDownFailsClosed_S5(t *testing.T) {
	d := startDoor(t)
	d.tailnet.set(func(f *fakeTailnet) { f.down = true })
	before := d.alpha.count()
	r := d.raw(serveReq("GET", "/c/alpha/"))
	d.wantRefused(t, r, before, http.StatusUnauthorized, "unverified")
	if !strings.Contains(r.body, "tailscale status") {
		t.Errorf("page does not say what to run: %q", r.body)
	}
	// Loopback Host too (S10 passes, S5 cannot).
	r = d.raw("GET /c/alpha/ HTTP/1.1\nHost: 127.0.0.1\nX-Forwarded-For: " + aliceIP + "\n\n")
	d.wantRefused(t, r, before, http.StatusUnauthorized, "unverified")
}
