package fastloop

// The fast loop (conn.go) serves a request itself only when fastHead admits its raw head, and it
// is safe to do so only if fastHead admits nothing that net/http's server would refuse or read
// otherwise: the fast loop parses with http.ReadRequest, but net/http's server checks more than
// ReadRequest does (conn.readRequest: HTTP/1.x only, a Host for HTTP/1.1, one valid Host, every
// header name and value valid). FuzzFastHead holds fastHead to all of it, and to a real
// http.Server reading the same bytes.

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// fastHeadSeeds are heads of every kind fastHead judges: the ones it admits (browser page loads)
// and, one by one, the ways a head can leave the plain kind or be read two ways.
var fastHeadSeeds = []string{
	// Page loads a browser sends.
	"GET /c/app/ HTTP/1.1\r\nHost: localhost:7070\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br, zstd\r\nCookie: session=abc; theme=dark\r\nConnection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\nSec-Fetch-Dest: document\r\nSec-Fetch-Mode: navigate\r\n\r\n",
	"GET /c/app/static/main.js?v=3 HTTP/1.1\r\nHost: box.tail1234.ts.net\r\nAccept: */*\r\nReferer: https://box.tail1234.ts.net/c/app/\r\nConnection: close\r\n\r\n",
	"HEAD /c/app/ HTTP/1.1\r\nHost: 127.0.0.1:7070\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nhost: [::1]:7070\r\nCONNECTION: Close\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nPragma: no-cache\r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\n\r\nGET /c/b HTTP/1.1\r\nHost: localhost\r\n\r\n", // pipelined
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-Long: " + strings.Repeat("a", 6000) + "\r\n\r\n",
	// Line ends and folding.
	"GET /c/a HTTP/1.1\nHost: localhost\n\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\n X-Folded: yes\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-A: a\r\n\tb\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-A: a\rb\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\n\r\r\n\r\n",
	"\r\nGET /c/a HTTP/1.1\r\nHost: localhost\r\n\r\n",
	// Host.
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nhost: localhost\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nUser-Agent: x\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: local host\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost:\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: a\"b\r\n\r\n",
	"GET http://localhost/c/a HTTP/1.1\r\nHost: evil.example\r\n\r\n",
	"GET //evil.example/c/a HTTP/1.1\r\nHost: localhost\r\n\r\n",
	// The request line.
	"GET  /c/x HTTP/1.1\r\nHost: localhost\r\n\r\n",
	"GET /c/x  HTTP/1.1\r\nHost: localhost\r\n\r\n",
	"GET /c/x HTTP/1.0\r\nHost: localhost\r\n\r\n",
	"GET /c/x HTTP/2.0\r\nHost: localhost\r\n\r\n",
	"GET /c/x HTTP/1.1 \r\nHost: localhost\r\n\r\n",
	"get /c/x HTTP/1.1\r\nHost: localhost\r\n\r\n",
	"POST /c/x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
	"GET /x/c/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
	"GET /c/a?%zz HTTP/1.1\r\nHost: localhost\r\n\r\n",
	"GET /c/a#frag HTTP/1.1\r\nHost: localhost\r\n\r\n",
	"GET /c/\x80 HTTP/1.1\r\nHost: localhost\r\n\r\n",
	// Framing and upgrade.
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nTransfer_Encoding: chunked\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nContent-Length : 5\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\ncontent-length: 0\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nTE: trailers\r\nTrailer: X\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: clo\u017fe\r\n\r\n",      // ſ folds to s, but not in ASCII
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: \u212aeep-alive\r\n\r\n", // K, the Kelvin sign
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: close, X-Phase-Console-Fleet\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nClose: x\r\nProxy-Authenticate: Basic\r\n\r\n", // hop-by-hop, as ReverseProxy reads it
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
	// Names and values.
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-A: a\x00b\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-A: a\x7fb\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-A: caf\xc3\xa9 \xff\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX A: b\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\n: b\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-A\r\n\r\n",
	"GET /c/a HTTP/1.1\r\nHost: localhost\r\nX-\xc3\xa9: b\r\n\r\n",
}

func FuzzFastHead(f *testing.F) {
	for _, s := range fastHeadSeeds {
		f.Add([]byte(s))
	}
	srv := newPipeServer(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		n := headEnd(b)
		if want := refHeadEnd(b); n != want {
			t.Fatalf("headEnd(%q) = %d, want %d", b, n, want)
		}
		if n == 0 {
			return
		}
		head := b[:n]
		checkHeadShape(t, head)
		if !fastHead(string(head)) {
			return
		}
		r := checkReadRequest(t, head)
		srv.checkAgrees(t, head, r)
		checkReadsAsReadRequest(t, head, r)
		checkConsoleHead(t, head, r)
	})
}

// checkReadsAsReadRequest: the fast loop's own reading of head (requestReader) is the request
// that http.ReadRequest read from it (want) — twice over one reader, as a connection reads
// request after request.
func checkReadsAsReadRequest(t *testing.T, head []byte, want *http.Request) {
	t.Helper()
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "conn")
	var rr requestReader
	rr.setContext(ctx)
	defer rr.release()
	for range 2 {
		got, err := rr.read(string(head), "192.0.2.1:1234")
		if err != nil {
			t.Fatalf("fastHead admits %q; requestReader: %v", head, err)
		}
		switch {
		case got.Method != want.Method || got.RequestURI != want.RequestURI || !reflect.DeepEqual(got.URL, want.URL):
			t.Fatalf("read %q: %s %s %#v, ReadRequest %s %s %#v", head, got.Method, got.RequestURI, got.URL, want.Method, want.RequestURI, want.URL)
		case got.Proto != want.Proto || got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor:
			t.Fatalf("read %q: proto %q", head, got.Proto)
		case !maps.EqualFunc(got.Header, want.Header, slices.Equal):
			t.Fatalf("read %q: header\n%q\nReadRequest\n%q", head, got.Header, want.Header)
		case got.Host != want.Host || got.Close != want.Close:
			t.Fatalf("read %q: Host %q Close %v, ReadRequest %q %v", head, got.Host, got.Close, want.Host, want.Close)
		case got.ContentLength != want.ContentLength || got.Body != want.Body || got.TransferEncoding != nil || got.Trailer != nil:
			t.Fatalf("read %q: ContentLength %d, Body %v", head, got.ContentLength, got.Body)
		case got.RemoteAddr != "192.0.2.1:1234" || got.Context().Value(ctxKey{}) != "conn":
			t.Fatalf("read %q: RemoteAddr %q, context %v", head, got.RemoteAddr, got.Context())
		}
		for name, values := range got.Header { // no two share an array: appending to one is safe
			got.Header[name] = append(values, "appended")
		}
		if !maps.EqualFunc(got.Header, want.Header, func(a, b []string) bool { return slices.Equal(a[:len(a)-1], b) }) {
			t.Fatalf("read %q: appending to one value changed another: %q", head, got.Header)
		}
	}
}

// refHeadEnd is headEnd written the other way round: the lines of b one by one, the first empty
// one ("" or "\r") ends the head. A head it finds has no shorter prefix that is one.
func refHeadEnd(b []byte) int {
	end := 0
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if !bytes.HasSuffix(line, []byte("\n")) {
			return 0 // the last piece, with no line end: no empty line in b
		}
		end += len(line)
		if string(line) == "\n" || string(line) == "\r\n" {
			return end
		}
	}
	return 0
}

// checkHeadShape: head ends with "\n" and its only empty line is its last; no prefix of it is
// a head.
func checkHeadShape(t *testing.T, head []byte) {
	t.Helper()
	if !bytes.HasSuffix(head, []byte("\n")) {
		t.Fatalf("head %q does not end with a line end", head)
	}
	lines := bytes.Split(head[:len(head)-1], []byte("\n"))
	for i, line := range lines {
		if empty := len(line) == 0 || string(line) == "\r"; empty != (i == len(lines)-1) {
			t.Fatalf("head %q: line %d (%q) empty: %v", head, i, line, empty)
		}
	}
	if m := headEnd(head[:len(head)-1]); m != 0 {
		t.Fatalf("headEnd of a prefix of head %q is %d", head, m)
	}
}

// fastFramingNames are the fields that fastHead must not admit (written here again, not taken
// from framingHeader, so that the test does not share a mistake with it).
var fastFramingNames = []string{"Content-Length", "Transfer-Encoding", "Upgrade", "Expect",
	"Trailer", "TE", "Keep-Alive", "Proxy-Connection", "HTTP2-Settings"}

// checkReadRequest: http.ReadRequest reads all of head, and nothing beyond it, as a plain request
// that net/http's server would accept (conn.readRequest's own checks, one by one).
func checkReadRequest(t *testing.T, head []byte) *http.Request {
	t.Helper()
	const after = "GET /c/next HTTP/1.1\r\n" // what follows head on the connection
	rd := bytes.NewReader(append(slices.Clip(head), after...))
	br := bufio.NewReader(rd)
	r, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("fastHead admits %q; ReadRequest: %v", head, err)
	}
	if read := int(rd.Size()) - rd.Len() - br.Buffered(); read != len(head) {
		t.Fatalf("fastHead admits %q (%d bytes); ReadRequest read %d", head, len(head), read)
	}
	switch {
	case r.Method != "GET" && r.Method != "HEAD":
		t.Fatalf("fastHead admits %q: method %q", head, r.Method)
	case r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.Proto != "HTTP/1.1":
		t.Fatalf("fastHead admits %q: proto %q", head, r.Proto)
	case !strings.HasPrefix(r.RequestURI, "/c/") || r.URL.Host != "" || r.URL.Scheme != "":
		t.Fatalf("fastHead admits %q: target %q", head, r.RequestURI)
	case r.ContentLength != 0 || r.TransferEncoding != nil || r.Body != http.NoBody || len(r.Trailer) != 0:
		t.Fatalf("fastHead admits %q: a body (ContentLength %d, TransferEncoding %q, Trailer %v)",
			head, r.ContentLength, r.TransferEncoding, r.Trailer)
	case len(r.Header["Connection"]) > 1:
		t.Fatalf("fastHead admits %q: Connection %q", head, r.Header["Connection"])
	}
	// ReadRequest, as the server, takes Host out of the header: its fields are counted in head.
	// r.Host may be empty ("Host:"): net/http's server accepts that too, and every door's Host
	// admission refuses it (421 host).
	if hosts := rawFieldValues(head, "Host"); len(hosts) != 1 || hosts[0] != r.Host || !httpguts.ValidHostHeader(r.Host) {
		t.Fatalf("fastHead admits %q: Host %q, Host fields %q", head, r.Host, hosts)
	}
	for name, values := range r.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			t.Fatalf("fastHead admits %q: header name %q", head, name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				t.Fatalf("fastHead admits %q: %s value %q", head, name, v)
			}
		}
	}
	for _, name := range fastFramingNames {
		if v, ok := r.Header[http.CanonicalHeaderKey(name)]; ok {
			t.Fatalf("fastHead admits %q: %s: %q", head, name, v)
		}
	}
	wantClose := slices.ContainsFunc(rawFieldValues(head, "Connection"), func(v string) bool {
		return strings.EqualFold(v, "close")
	})
	if r.Close != wantClose {
		t.Fatalf("fastHead admits %q: Close %v, want %v", head, r.Close, wantClose)
	}
	return r
}

// rawFieldValues returns the values, trimmed, of the field lines of head named name (in any case),
// read from the raw bytes.
func rawFieldValues(head []byte, name string) []string {
	var values []string
	lines := strings.Split(string(head), "\n")
	for _, line := range lines[1:] {
		n, v, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if ok && strings.EqualFold(n, name) {
			values = append(values, strings.Trim(v, " \t"))
		}
	}
	return values
}

// A pipeServer is one net/http server, kept for every input, that reads each head given to it
// over a connection of its own (net.Pipe) and records what its handler saw.
type pipeServer struct {
	ln   *handoffListener // the fast loop's own way of giving net/http a connection
	seen chan seenRequest
}

type seenRequest struct {
	method, uri, host string
	header            http.Header
	close             bool
}

func newPipeServer(tb testing.TB) *pipeServer {
	s := &pipeServer{ln: newHandoffListener(pipeAddr{}), seen: make(chan seenRequest, 1)}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.seen <- seenRequest{r.Method, r.RequestURI, r.Host, r.Header.Clone(), r.Close}
			w.WriteHeader(http.StatusNoContent)
		}),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go srv.Serve(s.ln)
	tb.Cleanup(func() { srv.Close() })
	return s
}

// checkAgrees: net/http's server, given head on a connection of its own, hands the handler the
// request that ReadRequest read from it (r).
func (s *pipeServer) checkAgrees(t *testing.T, head []byte, r *http.Request) {
	t.Helper()
	select {
	case <-s.seen: // left by an input that failed
	default:
	}
	near, far := net.Pipe()
	defer near.Close()
	if !s.ln.give(far) {
		t.Fatal("the server is closed")
	}
	// A deadline, not an assertion: a server that waits for more than head would hang the fuzzer.
	near.SetDeadline(time.Now().Add(10 * time.Second))
	go near.Write(head) // net.Pipe: returns once the server read it all, or at Close
	resp, err := http.ReadResponse(bufio.NewReader(near), nil)
	if err != nil {
		t.Fatalf("fastHead admits %q; net/http's server answered nothing: %v", head, err)
	}
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("fastHead admits %q; net/http's server refused it: %s", head, resp.Status)
	}
	var got seenRequest
	select {
	case got = <-s.seen:
	default:
		t.Fatalf("fastHead admits %q; net/http's handler was not called", head)
	}
	want := r.Header
	if got.method != r.Method || got.uri != r.RequestURI || got.host != r.Host || got.close != r.Close ||
		!maps.EqualFunc(got.header, want, slices.Equal) {
		t.Fatalf("fastHead admits %q; net/http's server read\n%+v\nReadRequest read\n%+v",
			head, got, seenRequest{r.Method, r.RequestURI, r.Host, want, r.Close})
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
