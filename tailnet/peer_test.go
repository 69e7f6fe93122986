package tailnet

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/proxy"
)

// TestUnixServeHostOnlyFromTailscaled_S10: on the unix door, Serve's X-Forwarded-Host becomes the
// Host only on a connection whose peer is tailscaled's uid (SO_PEERCRED, S5a); then S10 judges
// it as on the TCP door. Any other peer keeps "Host: localhost" and is refused 401 unverified,
// never 421 for a name it chose; a tailscaled uid of 65534 (a user namespace) verifies nobody.
func TestUnixServeHostOnlyFromTailscaled_S10(t *testing.T) {
	evil := strings.Replace(unixServeReq, "X-Forwarded-Host: "+doortest.TSName, "X-Forwarded-Host: evil.example", 1)
	rows := []struct {
		name   string
		uid    int
		req    string
		status int
		reason string
		page   string // on a refusal's page
	}{
		{"S10 unix door, tailscaled: Host is X-Forwarded-Host", os.Getuid(), unixServeReq, 200, "", ""},
		{"S10 unix door, tailscaled: a foreign X-Forwarded-Host is 421", os.Getuid(), evil, 421, "host", ""},
		{"S10 unix door, tailscaled: two X-Forwarded-Host keep localhost", os.Getuid(),
			strings.Replace(unixServeReq, "\n\n", "\nX-Forwarded-Host: evil.example\n\n", 1), 200, "", ""},
		{"S5a unix door, another uid keeps localhost", os.Getuid() + 1, evil, 401, "unverified", "not from tailscaled"},
		{"S5a unix door, tailscaled's uid shows as 65534", overflowUID, unixServeReq, 401, "unverified", "65534 (nobody)"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := startDoor(t, func(c *Config) { c.TailscaledUID = uid(row.uid) })
			sock := d.serveUnix(t)
			before := d.Alpha.Count()
			r := d.rawUnix(t, sock, row.req)
			if row.status != 200 {
				d.WantRefused(t, r, before, row.status, row.reason)
				if !strings.Contains(r.Body, row.page) {
					t.Errorf("the page does not say why (%q): %q", row.page, r.Body)
				}
				return
			}
			s := d.WantForwarded(t, r, before, doortest.Alice, "/")
			want := doortest.TSName
			if strings.Count(row.req, "X-Forwarded-Host") > 1 {
				want = "localhost"
			}
			if got := s.Header.Values("X-Forwarded-Host"); len(got) != 1 || got[0] != want {
				t.Errorf("console saw X-Forwarded-Host %q, want %q", got, want)
			}
		})
	}
}

// TestLocalCallerKnown_S5a: a door learns from LocalCaller that a refused caller is a process on
// this machine (to tell it where to go), and only then.
func TestLocalCallerKnown_S5a(t *testing.T) {
	for _, row := range []struct {
		name  string
		uid   int
		local bool
	}{
		{"S5a tailscaled is not a local caller", os.Getuid(), false},
		{"S5a another uid is a local caller", os.Getuid() + 1, true},
	} {
		t.Run(row.name, func(t *testing.T) {
			d := startDoor(t, func(c *Config) { c.TailscaledUID = uid(row.uid) })
			var mu sync.Mutex
			var got []bool
			d.judge.Callers = callersFunc(func(r *http.Request, id string) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, LocalCaller(r)) // before VerifyCaller: not judged yet
				d.v.VerifyCaller(r, id)
				got = append(got, LocalCaller(r))
			})
			d.Raw(doortest.ServeReq("GET", "/c/alpha/"))
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 2 || got[0] || got[1] != row.local {
				t.Errorf("LocalCaller before and after VerifyCaller: %v, want [false %v]", got, row.local)
			}
		})
	}
}

// callersFunc is a caller verification that runs f and refuses.
type callersFunc func(r *http.Request, consoleID string)

func (f callersFunc) VerifyCaller(r *http.Request, consoleID string) (proxy.Caller, *proxy.Refusal) {
	f(r, consoleID)
	return proxy.Caller{}, unverified("test")
}
