package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFloorPassesAnswersOn: Go's floor answers as the backend does — a kept connection carries
// request after request (a pipelined pair too), a chunked answer passes whole, and Connection:
// close ends the connection after its answer.
func TestFloorPassesAnswersOn(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			io.WriteString(w, "part one, ")
			w.(http.Flusher).Flush() // no Content-Length: the answer goes chunked
			io.WriteString(w, "part two")
			return
		}
		io.WriteString(w, "hello from "+r.URL.Path)
	}))
	defer backend.Close()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveFloor(ln, strings.TrimPrefix(backend.URL, "http://")) }()
	defer func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("serveFloor after Close: %v", err)
		}
	}()

	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	read := func(want string) *http.Response {
		t.Helper()
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || string(body) != want {
			t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, want)
		}
		return res
	}
	io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	read("hello from /a")
	io.WriteString(c, "GET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	read("hello from /b")
	read("hello from /c")
	io.WriteString(c, "GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n")
	read("part one, part two")
	io.WriteString(c, "GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if res := read("hello from /d"); !res.Close {
		t.Error("the answer to Connection: close does not say close")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close the floor left the connection open (%v)", err)
	}
}
