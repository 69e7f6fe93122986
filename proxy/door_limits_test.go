package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// countingListener counts the bytes the server reads from its connections.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// TestHeaderBufferBounded_S9: a 100 KiB request head is 431, never reaches the console, and the
// door reads no more of it than its 64 KiB limit and net/http's small slack: a caller cannot make
// it hold more than that for one request.
func TestHeaderBufferBounded_S9(t *testing.T) {
	d := startTestDoor(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := NewServer(d.door, d.door.Log)
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })

	before := d.Alpha.Count()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := rawhttp.CRLF(doortest.ServeReq("GET", "/c/alpha/x", "X-Big: "+strings.Repeat("a", 100<<10)))
	go io.WriteString(conn, req) // the door may stop reading (and close) before all is written
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("got %d, want 431", resp.StatusCode)
	}
	if n := d.Alpha.Count(); n != before {
		t.Errorf("the console saw %d request(s)", n-before)
	}
	const slack = 8 << 10 // net/http's 4 KiB read slack and one 4 KiB read of its buffer
	if n := cl.read.Load(); n > MaxHeaderBytes+slack {
		t.Errorf("the door read %d bytes of a %d-byte head; at most %d may be read", n, len(req), MaxHeaderBytes+slack)
	}
}
