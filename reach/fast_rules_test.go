package reach

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/pairing"
)

// TestFastLoopKeepsTheDoorsJudgement_P2_R5_R9: a paired device's plain GETs of a console path —
// the requests the fast loop serves — meet the door's own judgement (Host, SNI, the cookie kept
// from the console) and proxy.Door's (S3, S7, R6b) exactly as the ones net/http serves: each row
// is sent as the fast loop takes it, and what the console saw is asserted, not only the status.
func TestFastLoopKeepsTheDoorsJudgement_P2_R5_R9(t *testing.T) {
	d := startTestDoor(t)
	dev, cookie := d.pair("phone")
	ip, port := d.door.Addr().Addr().String(), d.door.Addr().Port()
	rows := []struct {
		name, sni, host string
		extra           []string
		status          int
		reason          string
	}{
		{"P2 forwarded", "", d.Addr, nil, 200, ""},
		{"R5 other port", "", ip + ":1", nil, 421, "host"},
		{"R5 a name", "", "localhost:" + itoa(port), nil, 421, "host"},
		{"R5 SNI a name", "example.com", d.Addr, nil, 421, "host"},
		{"S3 forged assertion", "", d.Addr, []string{"X-Phase-Console-Fleet-Login: device:other#aaaaaa"}, 400, "assertion-sent"},
		{"R6b cross-site subresource", "", d.Addr, crossSiteNoCORS, 403, "cross-origin"},
		{"R10 two device cookies", "", d.Addr, []string{"Cookie: " + pairing.CookieName + "=other"}, 303, ""},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			extra := append([]string{cookie + "; theme=dark"}, row.extra...)
			r := d.rawSNI(row.sni, reqHost("GET", "/c/alpha/fast", row.host, extra...))
			if r.Status != row.status || r.Reason != row.reason {
				t.Fatalf("%d %q, want %d %q", r.Status, r.Reason, row.status, row.reason)
			}
			if row.status != 200 {
				if d.Alpha.Count() != before {
					t.Errorf("refused, and forwarded")
				}
				return
			}
			got, _ := d.Alpha.Last()
			if d.Alpha.Count() != before+1 || got.Path != "/fast" {
				t.Fatalf("the console saw %d requests, last %q", d.Alpha.Count()-before, got.Path)
			}
			if login := got.Header.Get("X-Phase-Console-Fleet-Login"); login != dev.Login() {
				t.Errorf("asserted %q, want %q", login, dev.Login())
			}
			if c := strings.Join(got.Header.Values("Cookie"), "; "); strings.Contains(c, pairing.CookieName) || c != "theme=dark" {
				t.Errorf("the console saw Cookie %q, want only theme=dark (R9)", c)
			}
		})
	}
	// Kept connections: the fast loop serves the next request on the same connection too.
	conn := d.dial("")
	defer conn.Close()
	h := heldConn{t: t, name: "the phone's kept", conn: conn, br: bufio.NewReader(conn)}
	for i := range 3 {
		before := d.Alpha.Count()
		if st, err := h.ask(d.req("GET", "/c/alpha/kept", cookie)); st != http.StatusOK || err != nil {
			t.Fatalf("request %d on a kept connection: %d %v", i, st, err)
		}
		if d.Alpha.Count() != before+1 {
			t.Fatalf("request %d: not forwarded", i)
		}
	}
}
