package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/echoconsole"
	"github.com/phase-console/fleet/internal/rawhttp"
)

const wsKey = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="

// TestWebSocketThroughHop_S9: a WebSocket upgrade is forwarded (as the verified caller, with the
// assertion) and the connection then carries bytes both ways.
func TestWebSocketThroughHop_S9(t *testing.T) {
	d := startTestDoor(t)
	rows := []struct {
		name  string
		extra []string
	}{
		{"S9 websocket", []string{"Connection: Upgrade", "Upgrade: websocket"}},
		{"S9 WebSocket capitalised", []string{"Connection: upgrade", "Upgrade: WebSocket"}},
		{"S9 Connection: keep-alive, Upgrade", []string{"Connection: keep-alive, Upgrade", "Upgrade: websocket"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := d.Alpha.Count()
			extra := append([]string{"Sec-WebSocket-Version: 13", wsKey}, row.extra...)
			conn, br, resp := d.Open(doortest.ServeReq("GET", "/c/alpha/ws", extra...))
			defer conn.Close()
			if resp.StatusCode != http.StatusSwitchingProtocols {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("got %d %q %q, want 101", resp.StatusCode, resp.Header.Get("X-Fleet-Reason"), body)
			}
			if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
				t.Errorf("101 with Upgrade %q", resp.Header.Get("Upgrade"))
			}
			if _, err := io.WriteString(conn, "hello\n"); err != nil {
				t.Fatal(err)
			}
			line, err := br.ReadString('\n')
			if err != nil || line != "echo:hello\n" {
				t.Fatalf("read %q, %v; want echo:hello", line, err)
			}
			if n := d.Alpha.Count(); n != before+1 {
				t.Fatalf("console saw %d requests, want 1", n-before)
			}
			s, _ := d.Alpha.Last()
			if s.Path != "/ws" || s.Header.Get("X-Phase-Console-Fleet-Login") != doortest.Alice || s.Header.Get("X-Phase-Console-Fleet") != d.Token {
				t.Errorf("console saw %q as %q", s.Path, s.Header.Get("X-Phase-Console-Fleet-Login"))
			}
			if !strings.EqualFold(s.Header.Get("Upgrade"), "websocket") || !strings.EqualFold(s.Header.Get("Connection"), "Upgrade") {
				t.Errorf("console saw Upgrade %q Connection %q", s.Header.Get("Upgrade"), s.Header.Get("Connection"))
			}
			if s.Header.Get("Sec-WebSocket-Key") == "" {
				t.Error("console did not see Sec-WebSocket-Key")
			}
		})
	}
}

// TestBadUpgradeRefused_S9: only "Upgrade: websocket" with "Connection: Upgrade" is forwarded;
// every other upgrade is 400 bad-upgrade, and nothing reaches the console.
func TestBadUpgradeRefused_S9(t *testing.T) {
	d := startTestDoor(t)
	rows := []struct {
		name string
		req  string
	}{
		{"S9 h2c", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")},
		{"S9 h2c without Connection", doortest.ServeReq("GET", "/c/alpha/x", "Upgrade: h2c")},
		{"S9 websocket without Connection: Upgrade", doortest.ServeReq("GET", "/c/alpha/x", "Upgrade: websocket", wsKey)},
		{"S9 websocket with Connection: keep-alive", doortest.ServeReq("GET", "/c/alpha/x", "Connection: keep-alive", "Upgrade: websocket", wsKey)},
		{"S9 websocket, h2c", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade", "Upgrade: websocket, h2c")},
		{"S9 two Upgrade lines", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade", "Upgrade: websocket", "Upgrade: h2c")},
		{"S9 TLS/1.0", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade", "Upgrade: TLS/1.0")},
		{"S9 empty Upgrade", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade", "Upgrade:")},
		{"S9 websocket/13", doortest.ServeReq("GET", "/c/alpha/x", "Connection: Upgrade", "Upgrade: websocket/13")},
		{"S9 h2c to a door's own page", doortest.ServeReq("GET", "/fleet/v1/consoles", "Connection: Upgrade", "Upgrade: h2c")},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d.WantRejected(t, row.req, http.StatusBadRequest, "bad-upgrade")
		})
	}
}

// TestServerSentEventsStream_S9: an event stream is passed on as it comes: the first event is
// read while the console still holds the rest back.
func TestServerSentEventsStream_S9(t *testing.T) {
	d := startTestDoor(t)
	t.Run("S9 SSE from alpha", func(t *testing.T) {
		conn, _, resp := d.Open(doortest.ServeReq("GET", "/c/alpha/sse", "Accept: text/event-stream"))
		defer conn.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		body := bufio.NewReader(resp.Body)
		for i := 0; i < 3; i++ {
			want := fmt.Sprintf("data: tick %d\n", i)
			if line, err := body.ReadString('\n'); line != want {
				t.Fatalf("event %d: read %q, %v", i, line, err)
			}
			if line, _ := body.ReadString('\n'); line != "\n" {
				t.Fatalf("event %d not ended by a blank line: %q", i, line)
			}
		}
	})
	t.Run("S9 SSE first event before the stream ends", func(t *testing.T) {
		g := echoconsole.NewGate(t)
		d.setConsole("gate", g.Addr())
		conn, _, resp := d.Open(doortest.ServeReq("GET", "/c/gate/sse", "Accept: text/event-stream"))
		defer conn.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		body := bufio.NewReader(resp.Body)
		// The console sends tick 1 only after release: if the hop held the stream back, this
		// read would fail at the connection's deadline instead.
		if line, err := body.ReadString('\n'); line != "data: tick 0\n" {
			t.Fatalf("read %q, %v before the console went on", line, err)
		}
		close(g.Release)
		rest, _ := io.ReadAll(body)
		if string(rest) != "\ndata: tick 1\n\n" {
			t.Fatalf("after release: %q", rest)
		}
	})
}

// TestHugeHeadersRefused_S9: request headers over 64 KiB are 431 and never reach the console. A
// head that net/http still reads (up to its 4 KiB of slack) is refused by the door, with its
// reason and log line; a larger one gets net/http's own bare 431 (docs/choices.md).
func TestHugeHeadersRefused_S9(t *testing.T) {
	d := startTestDoor(t)
	rows := []struct {
		name  string
		extra []string
		bug   string
	}{
		{"S9 one 80 KiB header", []string{"X-Big: " + strings.Repeat("a", 80<<10)}, ""},
		{"S9 one 1 MiB header", []string{"X-Big: " + strings.Repeat("a", 1<<20)}, ""},
		{"S9 100 headers of 1 KiB", manyHeaders(100, 1<<10), ""},
		{"S9 one 65 KiB header", []string{"X-Big: " + strings.Repeat("a", 65<<10)}, ""},
		{"S9 67 headers of 1 KiB", manyHeaders(67, 1<<10), ""},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			if row.bug != "" {
				t.Skip("BUG: " + row.bug)
			}
			before := d.Alpha.Count()
			r := d.RawAs(doortest.ServeReq("GET", "/c/alpha/x", row.extra...))
			if r.Status != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("got %d %q, want 431", r.Status, r.Reason)
			}
			if n := d.Alpha.Count(); n != before {
				t.Errorf("the console saw %d request(s)", n-before)
			}
		})
	}
	t.Run("S11 a 431 within net/http's slack is one fleet.rejected line", func(t *testing.T) {
		logsBefore := len(d.Logs.Events("fleet.rejected"))
		req := doortest.ServeReq("GET", "/c/alpha/x", "X-Big: "+strings.Repeat("a", 65<<10))
		r := d.RawAs(req)
		if r.Status != http.StatusRequestHeaderFieldsTooLarge || r.Reason != "header-too-large" {
			t.Errorf("got %d %q, want 431 header-too-large", r.Status, r.Reason)
		}
		d.WantRejectedLine(t, logsBefore, req, "header-too-large")
	})
	t.Run("S9 60 KiB of headers is fine", func(t *testing.T) {
		before := d.Alpha.Count()
		s := d.WantForwarded(t, d.Raw(doortest.ServeReq("GET", "/c/alpha/x", "X-Big: "+strings.Repeat("a", 60<<10))), before, doortest.Alice, "/x")
		if len(s.Header.Get("X-Big")) != 60<<10 {
			t.Errorf("console saw X-Big of %d bytes", len(s.Header.Get("X-Big")))
		}
	})
}

func manyHeaders(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("X-Pad-%d: %s", i, strings.Repeat("p", size))
	}
	return out
}

// TestLargeBodyStreams_S9: a large body reaches the console intact, and the console starts
// reading it before the caller has sent all of it.
func TestLargeBodyStreams_S9(t *testing.T) {
	d := startTestDoor(t)
	body := bigBody(8 << 20)
	t.Run("S9 8 MiB with Content-Length", func(t *testing.T) {
		before := d.Alpha.Count()
		req := doortest.ServeReq("POST", "/c/alpha/upload", "Content-Type: application/octet-stream",
			fmt.Sprintf("Content-Length: %d", len(body))) + body
		s := d.WantForwarded(t, d.Raw(req), before, doortest.Alice, "/upload")
		if len(s.Body) != len(body) || sha256.Sum256([]byte(s.Body)) != sha256.Sum256([]byte(body)) {
			t.Errorf("console got %d bytes, not the %d sent", len(s.Body), len(body))
		}
	})
	t.Run("S9 8 MiB chunked", func(t *testing.T) {
		before := d.Alpha.Count()
		var b strings.Builder
		b.WriteString(doortest.ServeReq("POST", "/c/alpha/upload", "Transfer-Encoding: chunked"))
		for rest := body; rest != ""; {
			n := min(len(rest), 1<<16)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, rest[:n])
			rest = rest[n:]
		}
		b.WriteString("0\r\n\r\n")
		s := d.WantForwarded(t, d.Raw(b.String()), before, doortest.Alice, "/upload")
		if len(s.Body) != len(body) || s.Body != body {
			t.Errorf("console got %d bytes, not the %d sent", len(s.Body), len(body))
		}
	})
	t.Run("S9 body not buffered", func(t *testing.T) {
		g := echoconsole.NewGate(t)
		d.setConsole("gate", g.Addr())
		conn := d.Dial()
		defer conn.Close()
		head := doortest.ServeReq("POST", "/c/gate/upload", fmt.Sprintf("Content-Length: %d", len(body)))
		if _, err := io.WriteString(conn, rawhttp.CRLF(head)+body[:1<<20]); err != nil {
			t.Fatal(err)
		}
		// The rest is sent only once the console has read the first MiB: a hop that buffered
		// the whole body would never get there.
		doortest.WaitFor(t, g.FirstMiB, "the console to read the first MiB while the caller still holds the rest")
		if _, err := io.WriteString(conn, body[1<<20:]); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(got) != fmt.Sprint(len(body)) {
			t.Fatalf("got %d %q, want 200 %d", resp.StatusCode, got, len(body))
		}
	})
}

// bigBody is n bytes with no line end (crlf must leave it alone) that differ along the way.
func bigBody(n int) string {
	var b bytes.Buffer
	b.Grow(n + 64)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%08x.", i)
	}
	return b.String()[:n]
}

// TestConsoleAnsweringFirstGetsWholeBody_S9: a console that answers at once and then reads the
// upload (a progress stream, an echo: net/http's EnableFullDuplex, any HTTP/1.1 server that
// streams) gets the body the caller sent, whole (S9: the hop streams, bodies are not buffered),
// and the caller gets the whole answer. The hop's handler is full duplex: otherwise, at the first
// flush of the answer, net/http's server discards up to 256 KiB + 1 of the request body itself
// (r.Body is the hop's idleBody, which it takes for a body the handler left): bytes read off the
// caller's connection under the Transport's nose, which never reach the console — it reads a
// well-formed chunked body with a hole in its middle.
func TestConsoleAnsweringFirstGetsWholeBody_S9(t *testing.T) {
	d := startTestDoor(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan int, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		io.WriteString(w, "started\n")
		w.(http.Flusher).Flush()
		b, _ := io.ReadAll(r.Body)
		read <- len(b)
		fmt.Fprintf(w, "read %d\n", len(b))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	d.setConsole("duplex", ln.Addr().String())

	conn := d.Dial()
	defer conn.Close()
	if _, err := io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("POST", "/c/duplex/upload", "Transfer-Encoding: chunked"))); err != nil {
		t.Fatal(err)
	}
	const chunk, chunks = 8 << 10, 64
	go func() {
		for i := 0; i < chunks; i++ {
			if _, err := io.WriteString(conn, "2000\r\n"+strings.Repeat(string(rune('a'+i%26)), chunk)+"\r\n"); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		io.WriteString(conn, "0\r\n\r\n")
	}()
	select {
	case n := <-read:
		if n != chunk*chunks {
			t.Errorf("the console read a body of %d bytes, the caller sent %d", n, chunk*chunks)
		}
	case <-time.After(doortest.WaitLimit):
		t.Fatal("the console never finished reading the body")
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("started\nread %d\n", chunk*chunks); resp.StatusCode != http.StatusOK || string(got) != want {
		t.Errorf("the caller got %d %q, want 200 %q", resp.StatusCode, got, want)
	}
}
