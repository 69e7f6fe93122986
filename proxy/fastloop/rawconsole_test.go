package fastloop

// A console written on the bare connection (rawConsole), for what a door does with its side of
// the hop. The same file is in package proxy and package proxy/fastloop (neither's tests can
// import the other's).

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// rawConsole is a console written on the bare connection, for what the fast loop does with its
// side of the hop: it counts the connections it accepted, records each request with the number of
// the connection it came on, and answers with answer, which writes raw bytes and says whether the
// console keeps the connection (false: the console closes it, saying nothing).
type rawConsole struct {
	ln     net.Listener
	answer func(conn int, c net.Conn, r *http.Request) bool
	ended  chan int // the number of each connection that ended, for either side's reason

	mu      sync.Mutex
	accepts int
	got     []rawSeen
}

type rawSeen struct {
	conn         int
	method, path string
	header       http.Header
	req          *http.Request // the whole request, as the console read it
}

func newRawConsole(t *testing.T, answer func(conn int, c net.Conn, r *http.Request) bool) *rawConsole {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &rawConsole{ln: ln, answer: answer, ended: make(chan int, 256)}
	var conns sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			rc.mu.Lock()
			n := rc.accepts
			rc.accepts++
			rc.mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				rc.serve(n, c)
			}()
		}
	}()
	return rc
}

func (rc *rawConsole) serve(n int, c net.Conn) {
	defer func() {
		c.Close()
		select {
		case rc.ended <- n:
		default:
		}
	}()
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		rc.mu.Lock()
		rc.got = append(rc.got, rawSeen{conn: n, method: r.Method, path: r.URL.Path, header: r.Header, req: r})
		rc.mu.Unlock()
		if !rc.answer(n, c, r) {
			return
		}
	}
}

func (rc *rawConsole) addr() string { return rc.ln.Addr().String() }

// seen returns every request the console read.
func (rc *rawConsole) seen() []rawSeen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// waitEnded waits until connection n has ended.
func (rc *rawConsole) waitEnded(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case m := <-rc.ended:
			if m == n {
				return
			}
		case <-deadline:
			t.Fatalf("the console's connection #%d did not end", n)
		}
	}
}

// usedConns is how many connections carried the requests of got.
func usedConns(got []rawSeen) int {
	seen := map[int]bool{}
	for _, s := range got {
		seen[s.conn] = true
	}
	return len(seen)
}

// answerOK is a console's plain keep-alive answer.
const answerOK = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"

// wantClosed reads conn and wants the door to have closed it (EOF, nothing more), within waitLimit.
func wantClosed(t *testing.T, conn net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(waitLimit))
	var r io.Reader = conn
	if br != nil {
		r = br
	}
	b := make([]byte, 64)
	n, err := r.Read(b)
	if n != 0 || err != io.EOF {
		t.Errorf("%s: read %q, %v; want the door to close it (EOF)", what, b[:n], err)
	}
}
