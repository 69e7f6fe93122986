package fastloop

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/proxy"
)

// BenchmarkHopFastGET is one GET through the door's fast loop (ConnServer, the fast exchange and
// its kept console connection) on a kept caller connection, to a console that answers with a few
// bytes: the caller and the console are written on the bare connections, so allocs/op is the
// loop's own. Run with
//
//	go test -run=NONE -bench=Hop -benchmem ./proxy/fastloop
func BenchmarkHopFastGET(b *testing.B) { hopfastget(b) }

// BenchmarkAccessLogFastGET is BenchmarkHopFastGET with the access log off (Door.Audit nil) and on
// (package accesslog, writing to a file in a private temporary folder), in one run (SPEC G3).
func BenchmarkAccessLogFastGET(b *testing.B) {
	b.Run("off", func(b *testing.B) { hopfastget(b) })
	b.Run("on", func(b *testing.B) {
		log := doortest.PrivateAccessLog(b)
		hopfastget(b, func(d *proxy.Door) { d.Audit, d.Name = log, audit.DoorLoopback })
	})
}

func hopfastget(b *testing.B, setup ...func(*proxy.Door)) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if !skipHead(br) {
						return
					}
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
				}
			}()
		}
	}()
	d := startTestDoor(b, setup...)
	d.setConsole("bench", ln.Addr().String())
	fast := 0
	fastServedHook = func() { fast++ }
	b.Cleanup(func() { fastServedHook = nil })
	conn := d.Dial()
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	req := []byte(rawhttp.CRLF(doortest.ServeReq("GET", "/c/bench/x")))
	br := bufio.NewReader(conn)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		if !skipHead(br) {
			b.Fatal("no answer")
		}
		if _, err := br.Discard(2); err != nil {
			b.Fatal(err)
		}
	}
	if fast == 0 {
		b.Fatal("the fast loop served nothing")
	}
}

// skipHead reads a head up to and including its empty line, allocating nothing.
func skipHead(br *bufio.Reader) bool {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false
		}
		if len(line) <= 2 {
			return true
		}
	}
}
