package doortest

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

// A RawConsole is a console written on the bare connection, for what a door does with its side
// of the hop: it counts the connections it accepted, records each request with the number of the
// connection it came on, and answers with its answer func, which writes raw bytes and says
// whether the console keeps the connection (false: the console closes it, saying nothing).
type RawConsole struct {
	ln     net.Listener
	answer func(conn int, c net.Conn, r *http.Request) bool
	ended  chan int // the number of each connection that ended, for either side's reason

	mu      sync.Mutex
	accepts int
	got     []RawSeen
}

// RawSeen is one request as a RawConsole read it.
type RawSeen struct {
	Conn         int // the number of the connection it came on, from 0
	Method, Path string
	Header       http.Header
	Req          *http.Request // the whole request, as the console read it
}

// NewRawConsole starts a RawConsole on a free 127.0.0.1 port that answers with answer; it and
// every connection it holds are closed when t ends.
func NewRawConsole(t *testing.T, answer func(conn int, c net.Conn, r *http.Request) bool) *RawConsole {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &RawConsole{ln: ln, answer: answer, ended: make(chan int, 256)}
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

func (rc *RawConsole) serve(n int, c net.Conn) {
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
		rc.got = append(rc.got, RawSeen{Conn: n, Method: r.Method, Path: r.URL.Path, Header: r.Header, Req: r})
		rc.mu.Unlock()
		if !rc.answer(n, c, r) {
			return
		}
	}
}

// Addr is the console's address, 127.0.0.1:port.
func (rc *RawConsole) Addr() string { return rc.ln.Addr().String() }

// Accepts is how many connections the console has accepted.
func (rc *RawConsole) Accepts() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.accepts
}

// Seen returns every request the console read, in order.
func (rc *RawConsole) Seen() []RawSeen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// Ended delivers the number of each connection that ended, for either side's reason (the ones
// WaitEnded read are gone).
func (rc *RawConsole) Ended() <-chan int { return rc.ended }

// WaitEnded waits until connection n has ended, at most WaitLimit.
func (rc *RawConsole) WaitEnded(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(WaitLimit)
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

// UsedConns is how many connections carried the requests of got.
func UsedConns(got []RawSeen) int {
	seen := map[int]bool{}
	for _, s := range got {
		seen[s.Conn] = true
	}
	return len(seen)
}

// AnswerOK is a console's plain keep-alive answer.
const AnswerOK = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"

// WantClosed reads conn (through br, if not nil) and wants the door to have closed it: EOF and
// nothing more, within WaitLimit.
func WantClosed(t *testing.T, conn net.Conn, br *bufio.Reader, what string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(WaitLimit))
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
