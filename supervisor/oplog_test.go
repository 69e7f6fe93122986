package supervisor

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// wantWarn checks that the log holds a line with msg event at level WARN (or above) whose error
// mentions what.
func (d *door) wantWarn(t *testing.T, event, what string) {
	t.Helper()
	for _, l := range d.Logs.Events(event) {
		if e, _ := l["error"].(string); strings.Contains(e, what) && (l["level"] == "WARN" || l["level"] == "ERROR") {
			return
		}
	}
	t.Errorf("no %s line at warning level mentioning %q in the log:\n%s", event, what, d.Logs.String())
}

// TestBrokenConsoleBodyWarns_S9: a console that breaks its response body half-way is an
// operational error, logged at warning level (never below the default level), and the caller's
// answer is cut short rather than passed off as whole.
func TestBrokenConsoleBodyWarns_S9(t *testing.T) {
	d := startDoor(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	broken := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nonly ten b")
		conn.Close()
	})}
	go broken.Serve(ln)
	t.Cleanup(func() { broken.Close() })
	if _, err := d.srv.registry.Put(Console{ID: "broken", Addr: ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}

	conn := d.Dial()
	defer conn.Close()
	io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/broken/page")))
	// The caller may get the head and part of the body, or nothing: never an answer that
	// looks whole.
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
		body, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Errorf("got %d %q as if whole", resp.StatusCode, body)
		}
	}
	d.wantWarn(t, "fleet.hop-error", "unexpected EOF")
}

// TestPanicWarns_S9: a panic in a handler of the door's http.Server is logged at warning level.
func TestPanicWarns_S9(t *testing.T) {
	d := startDoor(t)
	srv := d.srv.newHTTPServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("a test panic")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if b, _ := io.ReadAll(conn); len(b) != 0 {
		t.Errorf("a panicking handler answered %q", b)
	}
	d.wantWarn(t, "fleet.http-error", "a test panic")
}
