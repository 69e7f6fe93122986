package main

import (
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// A consoleSet is n consoles, each its own listener, all served by one handler: /small answers
// a few bytes, /sse opens an event stream that sends one event and then waits, /ws takes a
// WebSocket upgrade, sends one message and then waits.
type consoleSet struct {
	lns []net.Listener
	srv *http.Server
}

func startConsoles(n int) (*consoleSet, error) {
	s := &consoleSet{srv: &http.Server{Handler: http.HandlerFunc(serveConsole), ReadHeaderTimeout: 10 * time.Second}}
	for range n {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			s.close()
			return nil, err
		}
		s.lns = append(s.lns, ln)
		go s.srv.Serve(ln)
	}
	return s, nil
}

func (s *consoleSet) addr(i int) string { return s.lns[i].Addr().String() }

// stop closes console i's listener: its next dial is refused, as a console that exited.
func (s *consoleSet) stop(i int) { s.lns[i].Close() }

func (s *consoleSet) close() {
	s.srv.Close()
	for _, ln := range s.lns {
		ln.Close()
	}
}

var small = []byte("hello, fleet\n")

// event is the one message each stream carries.
var event = []byte("data: 0123456789abcdef0123456789abcdef\n\n")

func serveConsole(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/small":
		w.Header().Set("Content-Type", "text/plain")
		w.Write(small)
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		w.Write(event)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	case "/ws":
		key := r.Header.Get("Sec-WebSocket-Key")
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			base64.StdEncoding.EncodeToString(sum[:]))
		brw.Write(append([]byte{0x81, byte(len(event))}, event...)) // one text frame
		brw.Flush()
		io.Copy(io.Discard, c) // until the caller goes
	default:
		http.NotFound(w, r)
	}
}

// A blackHole is a loopback port whose accept queue is full: a connect to it hangs (the kernel
// drops its SYN) until the dialler gives up, as a console stopped in a debugger with a full
// queue does.
type blackHole struct {
	fd     int
	addr   string
	filler net.Conn
}

func newBlackHole() (*blackHole, error) {
	syscall.ForkLock.RLock() // no process started between the socket and its close-on-exec
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.Listen(fd, 0); err != nil { // a queue of one, never accepted
		syscall.Close(fd)
		return nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	h := &blackHole{fd: fd, addr: fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)}
	// Fill the queue; then check that a second connect hangs.
	if h.filler, err = net.DialTimeout("tcp4", h.addr, time.Second); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if c, err := net.DialTimeout("tcp4", h.addr, 50*time.Millisecond); err == nil {
		c.Close()
		h.close()
		return nil, fmt.Errorf("%s: a connect to a full queue was accepted", h.addr)
	}
	return h, nil
}

func (h *blackHole) close() {
	h.filler.Close()
	syscall.Close(h.fd)
}
