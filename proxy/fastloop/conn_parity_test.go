package fastloop

// The fast loop (ConnServer) must be the ReverseProxy hop by other means: for every kind of answer
// a console gives, the caller gets the same answer and the console the same request, whichever of
// the two served it. This test sends the same request through both, to a console that answers
// from a script of raw bytes, and compares what arrived at each end.

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phase-console/fleet/internal/rawhttp"
	"github.com/phase-console/fleet/internal/testlog"

	"github.com/phase-console/fleet/internal/doortest"
	"github.com/phase-console/fleet/proxy"
)

// scripted is a doortest.RawConsole's answer from a script of raw answers by path (404 for any other).
// An answer that ends its connection says so by the console closing it.
func scripted(answers map[string]string) func(int, net.Conn, *http.Request) bool {
	return func(_ int, c net.Conn, r *http.Request) bool {
		answer, ok := answers[r.URL.Path]
		if !ok {
			answer = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
		}
		if r.Method == "HEAD" { // the heads alone
			last := strings.LastIndex(answer, "HTTP/1.")
			if end := strings.Index(answer[max(last, 0):], "\r\n\r\n"); last >= 0 && end >= 0 {
				answer = answer[:last+end+4]
			}
		}
		if _, err := io.WriteString(c, answer); err != nil {
			return false
		}
		// An answer to HEAD carries the GET's body here: the connection cannot carry more.
		return !(r.Method == "HEAD" || strings.Contains(answer, "Connection: close") ||
			strings.HasPrefix(answer, "HTTP/1.0") || strings.HasPrefix(answer, "NOT"))
	}
}

// lastRequest is the last request console read, or nil.
func lastRequest(console *doortest.RawConsole) *http.Request {
	got := console.Seen()
	if len(got) == 0 {
		return nil
	}
	return got[len(got)-1].Req
}

// parityAnswer is what a caller received: every informational status, then the final answer.
type parityAnswer struct {
	info     []int
	status   int
	header   http.Header
	body     string
	trailer  http.Header
	chunked  bool
	closeGot bool
}

func readParity(t *testing.T, conn net.Conn, method string) parityAnswer {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	var a parityAnswer
	for {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			a.body = "<no answer: " + err.Error() + ">"
			return a
		}
		if res.StatusCode >= 100 && res.StatusCode < 200 {
			a.info = append(a.info, res.StatusCode)
			continue
		}
		b, err := io.ReadAll(res.Body)
		if err != nil {
			b = append(b, "<cut: "+err.Error()+">"...)
		}
		a.status, a.header, a.body, a.trailer = res.StatusCode, res.Header, string(b), res.Trailer
		a.chunked = slices.Contains(res.TransferEncoding, "chunked")
		a.closeGot = res.Close
		return a
	}
}

func TestFastLoopAnswersAsReverseProxy_S6_S9(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 100<<10/16)
	answers := map[string]string{
		"/cl": "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n" +
			"Set-Cookie: theme=dark; Path=/\r\nSet-Cookie: __Host-fleet-device=stolen; Path=/; Secure\r\n" +
			"Service-Worker-Allowed: /\r\nClear-Site-Data: \"cookies\"\r\nConnection: X-Private\r\nX-Private: 1\r\n" +
			"Keep-Alive: timeout=5\r\nX-Kept: yes\r\n\r\nhello",
		"/chunked": "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
		"/trailers": "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
			"5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n",
		"/eof":    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end",
		"/http10": "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nan old console",
		"/204":    "HTTP/1.1 204 No Content\r\nX-Kept: yes\r\n\r\n",
		"/304":    "HTTP/1.1 304 Not Modified\r\nEtag: \"v1\"\r\n\r\n",
		"/103":    "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
		"/100":    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
		"/big":    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n" + big,
		"/bigchunk": "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big),
		"/sse":    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + "e\r\ndata: tick 0\n\n\r\n0\r\n\r\n",
		"/599":    "HTTP/1.1 599 Whatever\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx",
		"/dupcl":  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"/notype": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"/101":    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"/broken": "NOT HTTP AT ALL\r\n\r\n",
		"/short":  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nConnection: close\r\n\r\nonly5",
		// A head that does not end (11 MiB of it): both stop reading at 10 MiB, as net/http's
		// Transport does, and answer 502.
		"/hugehead": "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1017)+"\r\n", 11<<10),
	}
	console := doortest.NewRawConsole(t, scripted(answers))

	logs := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	own := &standIn{token: "fleet-token-for-tests-0123456789abcdef", console: map[string]string{"alpha": console.Addr()}}
	door := &proxy.Door{Hop: proxy.NewHop(log, own, nil), Log: log, Host: own, Callers: own, Consoles: own, Token: own, FromServe: true}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	fastLn, slowLn := listen(), listen()
	fast := &ConnServer{Door: door, Server: proxy.NewServer(door, log)}
	slow := proxy.NewServer(door, log)
	go fast.Serve(fastLn)
	go slow.Serve(slowLn)
	t.Cleanup(func() { fast.Close(); slow.Close(); door.Hop.Close() })

	served := countFast(t)

	// Differences that are not the hop's: who framed the answer (net/http may give a small answer
	// of unknown length a Content-Length, the fast loop chunks it) and net/http's guess of a
	// Content-Type that the console did not send (the fast loop sends the console's headers).
	framing := func(h http.Header) http.Header {
		h = h.Clone()
		delete(h, "Date")
		delete(h, "Content-Length")
		return h
	}
	for _, path := range slices.Sorted(maps.Keys(answers)) {
		for _, method := range []string{"GET", "HEAD"} {
			t.Run(method+path, func(t *testing.T) {
				req := fmt.Sprintf("%s /c/alpha%s?q=1 HTTP/1.1\r\nHost: %s\r\nX-Forwarded-For: %s\r\nX-Forwarded-Proto: https\r\n"+
					"User-Agent: parity/1\r\nAccept: */*\r\nCookie: a=b\r\nAuthorization: Bearer nope\r\nProxy-Authenticate: Basic\r\n\r\n", method, path, doortest.TSName, doortest.AliceIP)
				exchange := func(addr string) (parityAnswer, *http.Request, int64) {
					conn, err := net.Dial("tcp4", addr)
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					before, n := lastRequest(console), served()
					if _, err := io.WriteString(conn, rawhttp.CRLF(req)); err != nil {
						t.Fatal(err)
					}
					a := readParity(t, conn, method)
					fastServed := served() - n
					got := lastRequest(console)
					if got == before {
						got = nil
					}
					if !a.closeGot && !strings.Contains(a.body, "<") {
						// The connection goes on: a next request on it is answered.
						next := fmt.Sprintf("GET /c/alpha/cl HTTP/1.1\r\nHost: %s\r\nX-Forwarded-For: %s\r\n\r\n", doortest.TSName, doortest.AliceIP)
						if _, err := io.WriteString(conn, next); err != nil {
							t.Fatal(err)
						}
						if b := readParity(t, conn, "GET"); b.status != http.StatusOK {
							t.Errorf("the next request on the connection: %d %q", b.status, b.body)
						}
					}
					return a, got, fastServed
				}
				fa, fr, n := exchange(fastLn.Addr().String())
				if n != 1 {
					t.Errorf("the fast loop did not serve it (%d exchanges)", n)
				}
				sa, sr, _ := exchange(slowLn.Addr().String())

				if path == "/short" && method == "GET" {
					// A console that ends its answer short: ReverseProxy may not have sent the
					// head yet and closes; the fast loop has sent it and closes. Either way the
					// caller gets no whole answer.
					for _, a := range []parityAnswer{fa, sa} {
						if !strings.Contains(a.body, "<") {
							t.Errorf("a cut answer arrived whole: %d %q", a.status, a.body)
						}
					}
					return
				}
				if fa.closeGot != sa.closeGot {
					t.Errorf("fast answer closes the connection: %v; ReverseProxy's: %v", fa.closeGot, sa.closeGot)
				}
				if !slices.Equal(fa.info, sa.info) || fa.status != sa.status || fa.body != sa.body {
					t.Errorf("fast answered %v %d %q; ReverseProxy %v %d %q", fa.info, fa.status, trim(fa.body), sa.info, sa.status, trim(sa.body))
				}
				fh, sh := framing(fa.header), framing(sa.header)
				if path == "/notype" {
					delete(sh, "Content-Type")
				}
				if !maps.EqualFunc(fh, sh, slices.Equal) {
					t.Errorf("fast answered headers\n  %v\nReverseProxy\n  %v", fh, sh)
				}
				if !maps.EqualFunc(fa.trailer, sa.trailer, slices.Equal) {
					t.Errorf("fast answered trailers %v; ReverseProxy %v", fa.trailer, sa.trailer)
				}
				if fa.header.Get("Date") == "" {
					t.Errorf("fast answer has no Date")
				}
				switch {
				case fr == nil || sr == nil:
					t.Fatalf("the console saw fast %v, ReverseProxy %v", fr != nil, sr != nil)
				case fr.Method != sr.Method || fr.RequestURI != sr.RequestURI || fr.Host != sr.Host || fr.Proto != sr.Proto:
					t.Errorf("the console saw fast %s %s %s %s; ReverseProxy %s %s %s %s", fr.Method, fr.RequestURI, fr.Host, fr.Proto, sr.Method, sr.RequestURI, sr.Host, sr.Proto)
				case !maps.EqualFunc(fr.Header, sr.Header, slices.Equal):
					t.Errorf("the console saw headers fast\n  %v\nReverseProxy\n  %v", fr.Header, sr.Header)
				}
			})
		}
	}
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
