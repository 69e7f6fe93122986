package echoconsole

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// A Gate is a console whose answers wait for the test, for the tests of streaming: /sse sends
// "data: tick 0", then waits for Release to be closed (or the request to end) before
// "data: tick 1"; /upload reads the first MiB of the body, sends on FirstMiB, then reads the rest
// and answers its whole size. Anything else is 404. It records nothing.
type Gate struct {
	Release  chan struct{} // closed by the test: /sse sends its second event
	FirstMiB chan struct{} // /upload has read its first MiB

	ln net.Listener
}

// NewGate starts a Gate on a free 127.0.0.1 port; it is closed when t ends.
func NewGate(t testing.TB) *Gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{ln: ln, Release: make(chan struct{}), FirstMiB: make(chan struct{}, 1)}
	srv := &http.Server{Handler: http.HandlerFunc(g.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return g
}

// Addr is the gate's address, 127.0.0.1:port.
func (g *Gate) Addr() string { return g.ln.Addr().String() }

func (g *Gate) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: tick 0\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-g.Release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: tick 1\n\n")
	case "/upload":
		buf := make([]byte, 1<<20)
		n, err := io.ReadFull(r.Body, buf)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.FirstMiB <- struct{}{}
		rest, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n+int(rest))
	default:
		http.NotFound(w, r)
	}
}
