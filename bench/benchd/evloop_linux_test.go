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

	"github.com/phase-console/fleet/internal/rawhttp"
)

// TestEvloopPassesAnswersOn: the measuring loop answers as the backend does — kept connections
// carry request after request (a pipelined pair too), Connection: close ends one, and with -s5a
// it accepts a connection whose peer is this process's own user.
func TestEvloopPassesAnswersOn(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.URL.Path)
	}))
	defer backend.Close()
	addr := rawhttp.FreeLoopbackAddr(t).String()
	go evloop([]string{"-addr", addr, "-backend", strings.TrimPrefix(backend.URL, "http://"),
		"-loops", "1", "-s5a", "-work", "1", "-connwork", "1"})

	var c net.Conn
	for range 100 { // the loop's listener comes up in a moment
		var err error
		if c, err = net.Dial("tcp4", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c == nil {
		t.Fatal("evloop never listened")
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
	io.WriteString(c, "GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if res := read("hello from /d"); !res.Close {
		t.Error("the answer to Connection: close does not say close")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close the loop left the connection open (%v)", err)
	}
}

// TestSpinCalibrates: the model's busy loop knows its speed before it spends anything (how long
// it spends is measured in bench/RESULTS.md, never asserted on a clock here).
func TestSpinCalibrates(t *testing.T) {
	spin(1)
	if spinPerMicro <= 0 {
		t.Fatalf("calibration gave %v iterations a µs", spinPerMicro)
	}
}
