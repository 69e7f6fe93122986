package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/phase-console/fleet/audit"
	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/internal/rawhttp"
)

// The per-request costs of the hop's judgement (issue: 0 allocations in path judgement; header
// folding without an allocation per name). Run with
//
//	go test -run=NONE -bench=. -benchmem ./proxy

// benchHeader is what Tailscale Serve sends for a browser's page load, give or take.
func benchHeader() http.Header {
	return http.Header{
		"Host":                 {"sup.tail1234.ts.net"},
		"User-Agent":           {"Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0"},
		"Accept":               {"text/html,application/xhtml+xml"},
		"Accept-Language":      {"en-GB,en;q=0.5"},
		"Accept-Encoding":      {"gzip, deflate, br"},
		"Cookie":               {"session=abc"},
		"Sec-Fetch-Mode":       {"navigate"},
		"X-Forwarded-For":      {"100.101.102.103"},
		"X-Forwarded-Host":     {"sup.tail1234.ts.net"},
		"X-Forwarded-Proto":    {"https"},
		"Tailscale-User-Login": {"alice@example.com"},
		"Tailscale-User-Name":  {"Alice"},
	}
}

func BenchmarkJudgePathEscaped(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		JudgePath("/c/alpha/static/%C3%A4pp.js")
	}
}

func BenchmarkCheckNoAssertion(b *testing.B) {
	r := &http.Request{Header: benchHeader()}
	b.ReportAllocs()
	for b.Loop() {
		if CheckNoAssertion(r) != nil {
			b.Fatal("refused")
		}
	}
}

// BenchmarkScrubIdentity scrubs a fresh copy of the headers each time, as the hop does (the
// ReverseProxy clones the inbound headers); the clone is measured by BenchmarkHeaderClone.
func BenchmarkScrubIdentity(b *testing.B) {
	h := benchHeader()
	hs := make([]http.Header, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		if len(hs) == 0 {
			b.StopTimer()
			for range cap(hs) {
				hs = append(hs, h.Clone())
			}
			b.StartTimer()
		}
		ScrubIdentity(hs[len(hs)-1])
		hs = hs[:len(hs)-1]
	}
}

func BenchmarkHeaderClone(b *testing.B) {
	h := benchHeader()
	b.ReportAllocs()
	for b.Loop() {
		_ = h.Clone()
	}
}

// BenchmarkHopPOST is one POST with a small body through the door on a kept caller connection:
// the ordinary hop (net/http's server, the Door, Hop.Forward's ReverseProxy and its Transport),
// which serves every request with a body, to a console that reads the body and answers with a
// few bytes. Run with
//
//	go test -run=NONE -bench=Hop -benchmem ./proxy
func BenchmarkHopPOST(b *testing.B) { hoppost(b) }

// BenchmarkAccessLogPOST is BenchmarkHopPOST with the access log off (Door.Audit nil) and on
// (package accesslog, writing to a file in a private temporary folder), in one run (SPEC G3).
func BenchmarkAccessLogPOST(b *testing.B) {
	b.Run("off", func(b *testing.B) { hoppost(b) })
	b.Run("on", func(b *testing.B) {
		log := doortest.PrivateAccessLog(b)
		hoppost(b, func(d *Door) { d.Audit, d.Name = log, audit.DoorLoopback })
	})
}

func hoppost(b *testing.B, setup ...func(*Door)) {
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
					if _, err := br.Discard(5); err != nil {
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
	conn := d.Dial()
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	req := []byte(rawhttp.CRLF(doortest.ServeReq("POST", "/c/bench/x", "Content-Type: text/plain", "Content-Length: 5")) + "hello")
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
