package supervisor

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// TestBrokenBodyIsNotConsoleDown_S9: a caller whose chunked body breaks its own framing is
// answered 400 bad-body on a closed connection, and the console is not shown down — before, the
// hop blamed the console (502 console-down, health down), so any caller could have any console
// shown down at will.
func TestBrokenBodyIsNotConsoleDown_S9(t *testing.T) {
	d := startDoor(t)
	for _, body := range []string{"zz\r\nabc\r\n0\r\n\r\n", "10000000000000003\r\nabc\r\n0\r\n\r\n", "3\r\nabcXX"} {
		conn := d.Dial()
		io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("POST", "/c/alpha/upload", "Transfer-Encoding: chunked"))+body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 400 || resp.Header.Get("X-Fleet-Reason") != "bad-body" || !resp.Close {
			t.Errorf("%q: %d %q close %v, want 400 bad-body and a closed connection", body, resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), resp.Close)
		}
	}
	for _, c := range d.srv.registry.List() {
		if c.ID == "alpha" && c.Health == HealthDown {
			t.Errorf("console alpha is shown %s after callers' broken bodies", c.Health)
		}
	}
	if strings.Contains(d.Logs.String(), "fleet.console-down") {
		t.Error("a caller's broken body was logged as the console being down")
	}
}
