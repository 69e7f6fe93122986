package supervisor

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// TestReachPairingAttemptRecorded_O7: the supervisor wires the pairing pages to its door so that
// a pairing attempt — here a code nobody issued — is one access-log line (door reach, path /pair,
// reason pairing-code, the TCP peer, no login) and one count of
// fleet_pairing_attempts_total{result="pairing-code"}; the code and the name typed are nowhere.
func TestReachPairingAttemptRecorded_O7(t *testing.T) {
	d := startDoor(t)
	listen := rawhttp.FreeLoopbackAddr(t).String()
	writeReachProfile(t, d, listen)
	d.srv.ReloadReach()

	const code, name = "QQQQ-RRRR", "Typed Name Kilo"
	form := "code=" + code + "&password=irrelevant-pw&name=" + strings.ReplaceAll(name, " ", "+")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", listen,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /pair HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nOrigin: https://%s\r\n\r\n%s",
		listen, len(form), listen, form)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a code nobody issued: %d, want 403", resp.StatusCode)
	}

	lines := doortest.AccessLog(t, d.accessLogPath(), 1)
	l := lines[len(lines)-1]
	if l.Door != "reach" || l.Path != "/pair" || l.Method != "POST" || l.Status != 403 || l.Reason != "pairing-code" || l.Login != "" || l.Peer != "127.0.0.1" {
		t.Errorf("line %+v", l)
	}
	b, _ := os.ReadFile(d.accessLogPath())
	for _, s := range []string{code, "QQQQRRRR", "irrelevant-pw", "Typed", "Kilo"} {
		if strings.Contains(string(b), s) {
			t.Errorf("the access log holds %q", s)
		}
	}
	r := d.Raw(d.localReq("GET", "/fleet/v1/metrics", "", "Authorization: Bearer "+metricsToken(t, d)))
	if r.Status != http.StatusOK {
		t.Fatalf("GET /fleet/v1/metrics: %d", r.Status)
	}
	fams := parseMetrics(t, r.Body)
	if got := metricValue(fams, "fleet_pairing_attempts_total", map[string]string{"result": "pairing-code"}); got != 1 {
		t.Errorf("fleet_pairing_attempts_total{result=pairing-code} = %v, want 1", got)
	}
	if got := metricValue(fams, "fleet_pairing_attempts_total", map[string]string{"result": "paired"}); got != 0 || fams["fleet_pairing_attempts_total"] == nil {
		t.Errorf("fleet_pairing_attempts_total{result=paired} = %v, want 0 and present", got)
	}
}
