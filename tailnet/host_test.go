package tailnet

import (
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
)

// TestHostAdmitted_S10: a loopback name, or this machine's Tailscale name or address, in any
// case, with or without a port or a trailing dot, is let through to the rest of the checks.
func TestHostAdmitted_S10(t *testing.T) {
	d := startDoor(t)
	_, port, _ := strings.Cut(d.Addr, ":")
	rows := []struct{ name, host string }{
		{"S10 127.0.0.1:port", d.Addr},
		{"S10 127.0.0.1", "127.0.0.1"},
		{"S10 127.0.0.2 is loopback too", "127.0.0.2"},
		{"S10 localhost", "localhost"},
		{"S10 localhost:port", "localhost:" + port},
		{"S10 LOCALHOST.", "LOCALHOST."},
		{"S10 [::1]:port", "[::1]:" + port},
		{"S10 [::1]", "[::1]"},
		{"S10 sup.tail1234.ts.net", doortest.TSName},
		{"S10 SUP.TAIL1234.TS.NET.", "SUP.TAIL1234.TS.NET."},
		{"S10 sup.tail1234.ts.net:443", doortest.TSName + ":443"},
		{"S10 short MagicDNS name", "sup"},
		{"S10 self Tailscale IP", doortest.SelfIP},
		{"S10 self Tailscale IP:443", doortest.SelfIP + ":443"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			s := d.WantForwarded(t, d.Raw(doortest.ServeReqHost("GET", "/c/alpha/x", row.host)), before, doortest.Alice, "/x")
			if got := s.Header.Values("X-Forwarded-Host"); len(got) != 1 || got[0] != row.host {
				t.Errorf("console saw X-Forwarded-Host %q, want %q", got, row.host)
			}
		})
	}
}

// TestHostRefused_S10: any other Host is 421 host, before anything else is judged: before S5 (a
// foreign Host with no X-Forwarded-For is 421, not 401), S3 and S7.
func TestHostRefused_S10(t *testing.T) {
	d := startDoor(t)
	rows := []struct {
		name string
		req  string
	}{
		{"S10 evil.example", doortest.ServeReqHost("GET", "/c/alpha/x", "evil.example")},
		{"S10 evil.example:port", doortest.ServeReqHost("GET", "/c/alpha/x", "evil.example:7420")},
		{"S10 localhost.evil.example", doortest.ServeReqHost("GET", "/c/alpha/x", "localhost.evil.example")},
		{"S10 127.0.0.1.evil.example", doortest.ServeReqHost("GET", "/c/alpha/x", "127.0.0.1.evil.example")},
		{"S10 sup.tail1234.ts.net.evil.example", doortest.ServeReqHost("GET", "/c/alpha/x", doortest.TSName+".evil.example")},
		{"S10 subdomain of the Tailscale name", doortest.ServeReqHost("GET", "/c/alpha/x", "evil."+doortest.TSName)},
		{"S10 same short name, other tailnet", doortest.ServeReqHost("GET", "/c/alpha/x", "sup.tail9999.ts.net")},
		{"S10 a peer's Tailscale IP", doortest.ServeReqHost("GET", "/c/alpha/x", doortest.AliceIP)},
		{"S10 0.0.0.0", doortest.ServeReqHost("GET", "/c/alpha/x", "0.0.0.0")},
		{"S10 a LAN address", doortest.ServeReqHost("GET", "/c/alpha/x", "192.168.1.20")},
		{"S10 decimal 127.0.0.1", doortest.ServeReqHost("GET", "/c/alpha/x", "2130706433")},
		{"S10 short 127.1", doortest.ServeReqHost("GET", "/c/alpha/x", "127.1")},
		{"S10 unbracketed ::1", doortest.ServeReqHost("GET", "/c/alpha/x", "::1")},
		{"S10 junk after [::1]", doortest.ServeReqHost("GET", "/c/alpha/x", "[::1]evil")},
		{"S10 empty Host", doortest.ServeReqHost("GET", "/c/alpha/x", "")},
		{"S10 before S5: no X-Forwarded-For", "GET /c/alpha/x HTTP/1.1\nHost: evil.example\n\n"},
		{"S10 before S3", doortest.ServeReqHost("GET", "/c/alpha/x", "evil.example", "X-Phase-Console-Fleet-Login: mallory")},
		{"S10 before S7", doortest.ServeReqHost("GET", "/c/alpha/hooks", "evil.example")},
		{"S10 before S7 bad path", doortest.ServeReqHost("GET", "/c/alpha/%2F", "evil.example")},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, http.StatusMisdirectedRequest, "host")
		})
	}
}
