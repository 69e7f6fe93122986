package supervisor

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// BenchmarkIdleWebSocketMemory reports what one idle WebSocket held open through the door costs
// the door in memory (SPEC P1: at most 32 KiB per stream). It opens
// idleWebSockets WebSockets straight to a console and then as many through a real door, in this
// process, and reports the growth of heap and stacks (runtime.MemStats HeapInuse+StackInuse
// after a GC) per connection through the door, less the growth per direct connection (the
// console's and the client's share, which the door does not hold). A measurement, not a test:
//
//	go test -run='^$' -bench=IdleWebSocketMemory -benchtime=1x ./supervisor/
//
// bench/run measures the same from outside (benchd wsidle: the door's VmRSS per connection).
func BenchmarkIdleWebSocketMemory(b *testing.B) {
	const n = idleWebSockets
	d := startDoor(b)
	c := newHoldConsole(b)
	if _, err := d.srv.registry.Put(Console{ID: "hold", Addr: c.addr()}); err != nil {
		b.Fatal(err)
	}
	req := rawhttp.CRLF(doortest.ServeReq("GET", "/c/hold/ws", "Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", wsKey))
	// One of each first, so that pools, the WhoIs cache and the runtime are warm.
	warm := openIdle(b, c.addr(), req, 1)
	warm = append(warm, openIdle(b, d.Addr, req, 1)...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h0, s0 := inUse()
		direct := openIdle(b, c.addr(), req, n)
		h1, s1 := inUse()
		door := openIdle(b, d.Addr, req, n)
		h2, s2 := inUse()
		heap := float64((h2-h1)-(h1-h0)) / n
		stack := float64((s2-s1)-(s1-s0)) / n
		b.ReportMetric(heap+stack, "door-B/conn")
		b.ReportMetric(heap, "door-heap-B/conn")
		b.ReportMetric(stack, "door-stack-B/conn")
		b.ReportMetric(float64((h1-h0)+(s1-s0))/n, "direct-B/conn")
		b.ReportMetric(float64(runtime.NumGoroutine())/float64(2*n+2), "goroutines/conn")
		closeAll(direct)
		closeAll(door)
	}
	b.StopTimer()
	closeAll(warm)
}

// idleWebSockets is how many WebSockets BenchmarkIdleWebSocketMemory holds each way.
const idleWebSockets = 1000

// inUse is the heap and stack memory in use after a collection.
func inUse() (heap, stack int64) {
	var m runtime.MemStats
	for i := 0; i < 2; i++ {
		runtime.GC()
	}
	time.Sleep(100 * time.Millisecond) // let goroutines that are about to exit (hijacked handlers) go
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse), int64(m.StackInuse)
}

// openIdle opens n WebSockets to addr with req and leaves them idle after their 101.
func openIdle(tb testing.TB, addr, req string, n int) []net.Conn {
	tb.Helper()
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			closeAll(conns)
			tb.Fatalf("websocket %d: %v", i, err)
		}
		conn.SetDeadline(time.Now().Add(doortest.WaitLimit))
		io.WriteString(conn, req)
		resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 512), nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			conn.Close()
			closeAll(conns)
			tb.Fatalf("websocket %d: %v %v", i, resp, err)
		}
		conn.SetDeadline(time.Time{})
		conns = append(conns, conn)
	}
	return conns
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// holdConsole answers every request with a 101 and then holds the connection until the other
// end closes it. It is a bare listener, not net/http, so that what it keeps per connection is
// small and the same whoever calls (the door sends a larger request than a client does).
type holdConsole struct {
	ln net.Listener
}

func newHoldConsole(tb testing.TB) *holdConsole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &holdConsole{ln: ln}
	go c.serve()
	tb.Cleanup(func() { ln.Close() })
	return c
}

func (c *holdConsole) addr() string { return c.ln.Addr().String() }

func (c *holdConsole) serve() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		go holdOne(conn)
	}
}

func holdOne(conn net.Conn) {
	defer conn.Close()
	head := make([]byte, 0, 8<<10)
	for !bytes.Contains(head, []byte("\r\n\r\n")) {
		if len(head) == cap(head) {
			return
		}
		n, err := conn.Read(head[len(head):cap(head)])
		if err != nil {
			return
		}
		head = head[:len(head)+n]
	}
	head = nil
	io.WriteString(conn, switching)
	var b [1]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			return
		}
	}
}

// BenchmarkWebSocketThroughput moves bytes from a console to its caller through an upgraded
// connection of the door, 32 KiB at a time.
func BenchmarkWebSocketThroughput(b *testing.B) {
	d := startDoor(b)
	c := d.addRawConsole(b, "raw")
	conn, err := net.Dial("tcp", d.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, rawhttp.CRLF(doortest.ServeReq("GET", "/c/raw/ws", "Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", wsKey)))
	side := c.next(b)
	side.SetDeadline(time.Time{})
	io.WriteString(side, switching)
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		b.Fatalf("handshake: %v %v", resp, err)
	}
	chunk := make([]byte, 32<<10)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if _, err := side.Write(chunk); err != nil {
				return
			}
		}
	}()
	got := make([]byte, len(chunk))
	for i := 0; i < b.N; i++ {
		if _, err := io.ReadFull(br, got); err != nil {
			b.Fatal(err)
		}
	}
}
