package fastloop

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// lockedBuffer is a bytes.Buffer that one goroutine writes while another reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestIdleStreamHoldsNoCopyBuffer_P1: an answer of unknown length (server-sent events) that the
// console has sent an event of and then falls silent is passed on at once and waits for the next
// event holding no copy buffer and no caller writer (SPEC P1: an idle stream costs at most 32 KiB), and what follows
// is passed on, re-framed, to its end.
func TestIdleStreamHoldsNoCopyBuffer_P1(t *testing.T) {
	console, far := net.Pipe()
	defer far.Close()
	from := bufio.NewReaderSize(console, fastReadBuffer)
	res := &http.Response{Body: io.NopCloser(httputil.NewChunkedReader(from))}
	countPools.Store(true)
	t.Cleanup(func() { countPools.Store(false) })
	var out lockedBuffer
	before, writersBefore := copyBuffersOut.Load(), callerWritersOut.Load()
	w := takeCallerWriter(&out)
	done := make(chan error, 1)
	go func() {
		var sent int64
		consoleErr, callerErr := copyAnswerBody(&w, &out, res, from, true, &sent)
		if consoleErr == nil {
			consoleErr = callerErr
		}
		done <- consoleErr
	}()

	event := "data: one\n\n"
	io.WriteString(far, "b\r\n"+event+"\r\n") // net.Pipe: returns once copyAnswerBody has read it
	waitFor(t, "P1 the first event passed on, with no copy buffer nor caller writer held while the stream is silent", func() bool {
		return strings.Contains(out.String(), event) && copyBuffersOut.Load() <= before && callerWritersOut.Load() <= writersBefore
	})
	io.WriteString(far, "4\r\nmore\r\n0\r\n\r\n")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.Flush()
	giveCallerWriter(w)
	if got, want := out.String(), "b\r\n"+event+"\r\n4\r\nmore\r\n0\r\n\r\n"; got != want {
		t.Errorf("passed on %q; want %q", got, want)
	}
	if n := copyBuffersOut.Load(); n > before {
		t.Errorf("%d copy buffers held after the answer's end", n-before)
	}
}

// waitFor polls cond until it holds: a guard against a hang (ten seconds), never a timed assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for limit := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatalf("%s: not after 10 s", what)
		}
	}
}

// TestKeptConnectionHoldsNoWriter_P1: a console connection kept for the next exchange holds no
// writer of its own: one is taken for each request and given back once the request is sent, so
// that idle connections and long streams cost less each (SPEC P1).
func TestKeptConnectionHoldsNoWriter_P1(t *testing.T) {
	d := startTestDoor(t)
	fast := countFast(t)
	conn := d.Dial()
	defer conn.Close()
	for i := range 2 {
		r := (rawhttp.Exchange(t, conn, doortest.ServeReq("GET", "/c/alpha/kept"), 1))[0]
		if r.Status != http.StatusOK || r.Body != "echo /kept" {
			t.Fatalf("request %d: %d %q %q", i+1, r.Status, r.Reason, r.Body)
		}
	}
	if fast() == 0 {
		t.Fatal("the fast loop served nothing")
	}
	d.cs.pool.mu.Lock()
	defer d.cs.pool.mu.Unlock()
	kept := 0
	for _, list := range d.cs.pool.idle {
		for _, uc := range list {
			kept++
			if uc.bw != nil {
				t.Error("P1 a kept console connection holds a writer")
			}
		}
	}
	if kept == 0 {
		t.Fatal("no console connection kept")
	}
}
