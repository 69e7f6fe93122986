package tailnet

import (
	"mime"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
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
		{"S5 verified user", doortest.ServeReq("GET", "/c/alpha/"), 200, "", doortest.Alice},
		{"S5 verified user over IPv6", strings.Replace(strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, doortest.BobIP, 1), doortest.Alice, doortest.Bob, 1), 200, "", doortest.Bob},
		{"S5 no Tailscale-User-Login is fine (WhoIs decides)", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), "Tailscale-User-Login: "+doortest.Alice+"\n", "", 1), 200, "", doortest.Alice},
		{"S5 RFC 2047 login", strings.Replace(strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, doortest.JurgenIP, 1), doortest.Alice, mime.QEncoding.Encode("utf-8", doortest.Jurgen), 1), 200, "", doortest.Jurgen},
		{"S5c tagged node", strings.Replace(strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, doortest.TaggedIP, 1), "Tailscale-User-Login: "+doortest.Alice+"\n", "", 1), 403, "tagged-node", ""},
		{"S5c funnel", doortest.ServeReq("GET", "/c/alpha/", "Tailscale-Funnel-Request: ?1"), 403, "funnel", ""},
		{"S5c funnel spelled", doortest.ServeReq("GET", "/c/alpha/", "tailscale_funnel_request: ?1"), 403, "funnel", ""},
		{"S5c unknown peer", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, "100.64.0.99", 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For not Tailscale", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, "192.168.1.5", 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For list", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, doortest.AliceIP+", "+doortest.AliceIP, 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For twice", doortest.ServeReq("GET", "/c/alpha/", "X-Forwarded-For: "+doortest.AliceIP), 401, "unverified", ""},
		{"S5c X-Forwarded-For missing", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), "X-Forwarded-For: "+doortest.AliceIP+"\n", "", 1), 401, "unverified", ""},
		{"S5c X-Forwarded-For with port", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, doortest.AliceIP+":443", 1), 401, "unverified", ""},
		{"S5d forged Tailscale-User-Login", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), "Tailscale-User-Login: "+doortest.Alice, "Tailscale-User-Login: bob@example.com", 1), 401, "identity-mismatch", ""},
		{"S5d two Tailscale-User-Login", doortest.ServeReq("GET", "/c/alpha/", "Tailscale-User-Login: "+doortest.Alice), 401, "identity-mismatch", ""},
		{"S5d device-shaped forged login", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), "Tailscale-User-Login: "+doortest.Alice, "Tailscale-User-Login: device:phone#abcdef", 1), 401, "identity-mismatch", ""},
		{"S5 this node's own address (a local process through Serve)", strings.Replace(doortest.ServeReq("GET", "/c/alpha/"), doortest.AliceIP, doortest.SelfIP, 1), 403, "self", ""},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			r := d.Raw(row.req)
			if row.status == 200 {
				d.WantForwarded(t, r, before, row.login, "/")
				return
			}
			d.WantRefused(t, r, before, row.status, row.reason)
		})
	}
}

// TestTwoUsersOneConnection_S5: tailscaled reuses one backend connection for several users; each
// request is judged on its own.
func TestTwoUsersOneConnection_S5(t *testing.T) {
	d := startDoor(t)
	bobReq := strings.Replace(strings.Replace(doortest.ServeReq("GET", "/c/alpha/b"), doortest.AliceIP, doortest.BobIP, 1), doortest.Alice, doortest.Bob, 1)
	rs := d.RawMany(doortest.ServeReq("GET", "/c/alpha/a")+bobReq, 2)
	if rs[0].Status != 200 || rs[1].Status != 200 {
		t.Fatalf("got %d, %d", rs[0].Status, rs[1].Status)
	}
	reqs := d.Alpha.All()
	got := []string{reqs[0].Header.Get("X-Phase-Console-Fleet-Login"), reqs[1].Header.Get("X-Phase-Console-Fleet-Login")}
	if got[0] != doortest.Alice || got[1] != doortest.Bob {
		t.Fatalf("logins %q, want alice then bob", got)
	}
}

// TestDirectForwardRefused_S5b: a connection that tailscaled recognises as a tailnet peer's (a
// userspace-networking forward straight to 127.0.0.1) is refused whatever headers it carries —
// unless tailscaled runs on a kernel TUN, where that cannot happen and the WhoIs is skipped.
func TestDirectForwardRefused_S5b(t *testing.T) {
	d := startDoor(t)
	d.tailnet.Set(func(f *doortest.FakeTailscaled) {
		f.Direct = func(addr string) bool { return strings.HasPrefix(addr, "127.0.0.1:") }
	})
	before := d.Alpha.Count()
	d.WantRefused(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, http.StatusUnauthorized, "unverified")

	tun := startDoor(t)
	tun.tailnet.Set(func(f *doortest.FakeTailscaled) {
		f.TUN = true
		f.Direct = func(addr string) bool { return strings.HasPrefix(addr, "127.0.0.1:") }
	})
	before = tun.Alpha.Count()
	tun.WantForwarded(t, tun.Raw(doortest.ServeReq("GET", "/c/alpha/")), before, doortest.Alice, "/")
	for _, a := range tun.tailnet.WhoisAsked() {
		if strings.Contains(a, ":") && !strings.Contains(a, "::") && strings.Count(a, ":") == 1 {
			t.Errorf("WhoIs(%s) asked although status says TUN", a)
		}
	}
}

// TestConnectionJudgedOnce_S5: S5a/S5b are judged once per connection, not per request.
func TestConnectionJudgedOnce_S5(t *testing.T) {
	d := startDoor(t)
	d.RawMany(doortest.ServeReq("GET", "/c/alpha/1")+doortest.ServeReq("GET", "/c/alpha/2")+doortest.ServeReq("GET", "/c/alpha/3"), 3)
	conn, bare := 0, 0
	for _, a := range d.tailnet.WhoisAsked() {
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
		t.Errorf("WhoIs(%s) asked %d times, want 1 (cached)", doortest.AliceIP, bare)
	}
}

// TestNotTailscaledRefused_S5a: a connection whose peer is not tailscaled's uid is refused.
func TestNotTailscaledRefused_S5a(t *testing.T) {
	d := startDoor(t, func(c *Config) { c.TailscaledUID = uid(os.Getuid() + 1) })
	before := d.Alpha.Count()
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha/"))
	d.WantRefused(t, r, before, http.StatusUnauthorized, "unverified")
	if !strings.Contains(r.Body, "not from tailscaled") {
		t.Errorf("page does not say why: %q", r.Body)
	}
}

// TestLocalAPIDownFailsClosed_S5: when tailscaled cannot be asked, every /c/ request is 401 with a
// page that says why and what to run, and nothing is forwarded.
func TestLocalAPIDownFailsClosed_S5(t *testing.T) {
	d := startDoor(t)
	d.tailnet.Set(func(f *doortest.FakeTailscaled) { f.Down = true })
	before := d.Alpha.Count()
	r := d.Raw(doortest.ServeReq("GET", "/c/alpha/"))
	d.WantRefused(t, r, before, http.StatusUnauthorized, "unverified")
	if !strings.Contains(r.Body, "tailscale status") {
		t.Errorf("page does not say what to run: %q", r.Body)
	}
	// Loopback Host too (S10 passes, S5 cannot).
	r = d.Raw("GET /c/alpha/ HTTP/1.1\nHost: 127.0.0.1\nX-Forwarded-For: " + doortest.AliceIP + "\n\n")
	d.WantRefused(t, r, before, http.StatusUnauthorized, "unverified")
}
