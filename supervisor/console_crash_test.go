package supervisor

// Fault test: a console that dies in the middle of a stream. The caller must get a clean error —
// its stream ends, and ends in a way it can tell from a finished one — and nothing else may
// notice: other consoles answer at once, and a stream to another console that was open at the
// time goes on.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
)

// dyingConsole is a console written as raw bytes: to a request it answers an SSE stream of two
// events (chunked, as Go's and Node's servers send a stream), then waits for the test to say die,
// and dies as a crashed process does: the connection goes without the last chunk (closed, or
// reset), and its listener goes with it.
type dyingConsole struct {
	ln    net.Listener
	sent  chan struct{} // the two events are out
	die   chan struct{} // close to kill it
	reset bool          // die with a TCP reset instead of a close
}

func newDyingConsole(t *testing.T, reset bool) *dyingConsole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &dyingConsole{ln: ln, sent: make(chan struct{}), die: make(chan struct{}), reset: reset}
	t.Cleanup(func() { ln.Close() })
	go c.serve()
	return c
}

// serve accepts until it dies; a connection that sends no request (the registry's probe) is
// dropped, the first request gets the stream.
func (c *dyingConsole) serve() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
			conn.Close()
			continue
		}
		c.stream(conn)
		return
	}
}

func (c *dyingConsole) stream(conn net.Conn) {
	defer conn.Close()
	io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nTransfer-Encoding: chunked\r\n\r\n")
	for _, ev := range []string{"data: one\n\n", "data: two\n\n"} {
		fmt.Fprintf(conn, "%x\r\n%s\r\n", len(ev), ev)
	}
	close(c.sent)
	<-c.die
	c.ln.Close() // the process is gone: nothing listens on its port any more
	if c.reset {
		conn.(*net.TCPConn).SetLinger(0) // close sends RST
	}
}

// TestConsoleKilledMidStream: a console killed after two events of a stream. The caller gets both
// events, then its stream ends with an error (the chunked body is cut: io.ErrUnexpectedEOF, never
// a clean end it could take for a finished stream); the door logs the broken forward; a request
// to another console at once after is 200; a stream to another console open at the time goes on
// to its end; and the dead console's route answers 502 console-down.
func TestConsoleKilledMidStream(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "closed"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			d := startDoor(t)
			dying := newDyingConsole(t, reset)
			if _, err := d.srv.registry.Put(Console{ID: "dying", Addr: dying.ln.Addr().String()}); err != nil {
				t.Fatal(err)
			}
			gate := echoconsole.NewGate(t)
			if _, err := d.srv.registry.Put(Console{ID: "gate", Addr: gate.Addr()}); err != nil {
				t.Fatal(err)
			}
			d.srv.registry.probes.Wait()

			// Another caller's stream, open before the crash: tick 0 is in.
			gconn, _, gresp := d.Open(doortest.ServeReq("GET", "/c/gate/sse"))
			defer gconn.Close()
			if gresp.StatusCode != http.StatusOK {
				t.Fatalf("gate stream: %d", gresp.StatusCode)
			}
			gbody := bufio.NewReader(gresp.Body)
			wantLine(t, gbody, "data: tick 0")

			conn, _, resp := d.Open(doortest.ServeReq("GET", "/c/dying/events", "Accept: text/event-stream"))
			defer conn.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			body := bufio.NewReader(resp.Body)
			wantLine(t, body, "data: one")
			wantLine(t, body, "")
			wantLine(t, body, "data: two")
			wantLine(t, body, "")
			doortest.WaitFor(t, dying.sent, "the console to send its two events")
			hopErrors := len(d.Logs.Events("fleet.hop-error"))
			close(dying.die)

			rest, err := io.ReadAll(body)
			if len(rest) != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("after the crash the caller read %q, %v; want its stream cut (unexpected EOF)", rest, err)
			}
			if n := len(d.Logs.Events("fleet.hop-error")) - hopErrors; n != 1 {
				t.Errorf("%d fleet.hop-error lines for the broken stream, want 1", n)
			}

			// At once after: another console answers.
			before := d.Alpha.Count()
			r := d.Raw(doortest.ServeReq("GET", "/c/alpha/after"))
			d.WantForwarded(t, r, before, doortest.Alice, "/after")
			if r.Body != "echo /after" {
				t.Errorf("alpha answered %q", r.Body)
			}
			// The stream to the other console goes on to its end.
			close(gate.Release)
			wantLine(t, gbody, "")
			wantLine(t, gbody, "data: tick 1")
			// The dead console's route says so.
			if r := d.Raw(doortest.ServeReq("GET", "/c/dying/events")); r.Status != http.StatusBadGateway || r.Reason != "console-down" {
				t.Errorf("the dead console's route: %d %q, want 502 console-down", r.Status, r.Reason)
			}
		})
	}
}

// wantLine reads one line of a stream and fails unless it is want.
func wantLine(t *testing.T, br *bufio.Reader, want string) {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil || strings.TrimSuffix(line, "\n") != want {
		t.Fatalf("read %q, %v; want the line %q", line, err, want)
	}
}
