package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// floor is Go's floor for a hop: the least a proxy written on Go's net package can do for each
// request, and nothing more — one goroutine per connection reads a request head, sends it to the
// backend over a kept connection (a shared pool, as fleet keeps them), reads the answer head as
// far as its Content-Length, and passes head and body on. No parsing beyond that, no header
// changed but Connection, no check of any kind: it forwards whatever it is sent, so it is never
// to be run as a proxy. bench/run measures it beside fleet, nginx and Caddy so that every run
// shows how much of fleet's distance to nginx is Go's runtime and net package rather than
// fleet's work. With -cert and -key it terminates TLS (crypto/tls, as the direct-reach door
// does) and is the same floor for the door's rows.
func floor(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18083", "listen address")
	backend := fs.String("backend", "127.0.0.1:18080", "the backend")
	certFile := fs.String("cert", "", "a certificate (PEM): terminate TLS with it and -key")
	keyFile := fs.String("key", "", "the certificate's key (PEM)")
	fs.Parse(args)
	// No TCP keep-alive on accepted connections, as fleet's door: four setsockopt calls fewer
	// on each new connection.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", *addr)
	if err != nil {
		return err
	}
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return err
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
		ln.Close()
	}()
	return serveFloor(ln, *backend)
}

// serveFloor serves ln as Go's floor until ln is closed.
func serveFloor(ln net.Listener, backend string) error {
	pool := make(chan *floorUp, 1024)
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			continue
		}
		go floorServe(c, pool, backend)
	}
}

// floorUp is one kept connection to the backend.
type floorUp struct {
	c net.Conn
	r *bufio.Reader
}

var (
	connectionField       = []byte("connection:")
	contentLengthField    = []byte("content-length:")
	closeToken            = []byte("close")
	transferEncodingField = []byte("transfer-encoding:")
	chunkedToken          = []byte("chunked")
	connectionClose       = []byte("Connection: close\r\n")
)

// floorBuffers are a connection's read buffer and head buffer, kept for the next connection (as
// fleet keeps its own): a new connection costs the floor no fresh 16 KiB to clear and collect.
type floorBuffers struct {
	r   *bufio.Reader
	buf []byte
}

var floorBufferPool = sync.Pool{New: func() any {
	return &floorBuffers{r: bufio.NewReaderSize(nil, 8192), buf: make([]byte, 0, 8192)}
}}

func floorServe(c net.Conn, pool chan *floorUp, backend string) {
	fb := floorBufferPool.Get().(*floorBuffers)
	fb.r.Reset(c)
	defer func() {
		c.Close()
		fb.r.Reset(nil)
		floorBufferPool.Put(fb)
	}()
	cr, buf := fb.r, fb.buf
	defer func() { fb.buf = buf[:0] }()
	for {
		buf = buf[:0]
		closing := false
		for { // the request head, without its Connection line
			line, err := cr.ReadSlice('\n')
			if err != nil {
				return
			}
			if hasFieldName(line, connectionField) {
				closing = containsFold(line, closeToken)
				continue
			}
			buf = append(buf, line...)
			if len(line) <= 2 {
				break
			}
		}
		var up *floorUp
		select {
		case up = <-pool:
		default:
			uc, err := net.Dial("tcp", backend)
			if err != nil {
				return
			}
			up = &floorUp{c: uc, r: bufio.NewReaderSize(uc, 32<<10)}
		}
		if _, err := up.c.Write(buf); err != nil {
			up.c.Close()
			return
		}
		buf = buf[:0]
		length, chunked := -1, false
		for { // the answer head, as far as its length
			line, err := up.r.ReadSlice('\n')
			if err != nil {
				up.c.Close()
				return
			}
			if len(line) <= 2 && closing {
				buf = append(buf, connectionClose...)
			}
			buf = append(buf, line...)
			if len(line) <= 2 {
				break
			}
			if hasFieldName(line, contentLengthField) {
				length, _ = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLengthField):])))
			}
			if hasFieldName(line, transferEncodingField) {
				chunked = containsFold(line, chunkedToken)
			}
		}
		if chunked { // passed on as it comes, framing and all
			if _, err := c.Write(buf); err != nil || copyChunked(c, up.r) != nil {
				up.c.Close()
				return
			}
			floorPut(pool, up)
			if closing {
				return
			}
			continue
		}
		if length < 0 {
			up.c.Close()
			return
		}
		var err error
		if length <= up.r.Buffered() { // the whole answer in one write, as fleet sends a small one
			body, _ := up.r.Peek(length)
			buf = append(buf, body...)
			up.r.Discard(length)
			floorPut(pool, up)
			_, err = c.Write(buf)
		} else {
			if _, err = c.Write(buf); err == nil {
				_, err = io.CopyN(c, up.r, int64(length))
			}
			if err != nil {
				up.c.Close()
				return
			}
			floorPut(pool, up)
		}
		if err != nil || closing {
			return
		}
	}
}

// copyChunked copies a chunked body from r to w unchanged: each size line, its chunk and CRLF,
// then the trailers up to the blank line.
func copyChunked(w io.Writer, r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		sizeText, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		size, err := strconv.ParseInt(string(sizeText), 16, 64)
		if err != nil {
			return err
		}
		if size == 0 {
			break
		}
		if _, err := io.CopyN(w, r, size+2); err != nil { // the chunk and its CRLF
			return err
		}
	}
	for { // trailers, then the blank line
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if len(line) <= 2 {
			return nil
		}
	}
}

func floorPut(pool chan *floorUp, up *floorUp) {
	select {
	case pool <- up:
	default:
		up.c.Close()
	}
}

// containsFold reports whether s holds lower (lower case) in any case, without a copy of s.
func containsFold(s, lower []byte) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		if bytes.EqualFold(s[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}

func hasFieldName(line, lowerName []byte) bool {
	return len(line) > len(lowerName) && bytes.EqualFold(line[:len(lowerName)], lowerName)
}
