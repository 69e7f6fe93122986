// Package rawhttp is, for tests only, what the doors' raw-request tests share: writing a request
// as raw bytes, reading the answers, and looking at headers under any S3 spelling without trusting
// the folding under test. Product code never imports it.
package rawhttp

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// CRLF turns "\n" line ends into "\r\n" (leaving existing "\r\n" alone), so tests can write
// requests with plain newlines.
func CRLF(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}

// RequestLine returns the method and the request-target of a raw request.
func RequestLine(req string) (method, target string) {
	line, _, _ := strings.Cut(req, "\n")
	f := strings.Fields(line)
	if len(f) < 2 {
		return "", ""
	}
	return f[0], f[1]
}

// A Response is one answer as read off the wire.
type Response struct {
	Status int
	Reason string // X-Fleet-Reason
	Header http.Header
	Body   string
}

// Exchange writes req (line ends as CRLF) on conn, which it does not close, and reads n answers;
// any failure ends the test.
func Exchange(t testing.TB, conn net.Conn, req string, n int) []Response {
	t.Helper()
	out, err := ExchangeUpTo(conn, req, n)
	if err != nil {
		t.Fatalf("reading response %d: %v", len(out)+1, err)
	}
	return out
}

// ExchangeUpTo writes req (line ends as CRLF) on conn, which it does not close, and reads up to
// n answers. It stops at the first error — the door closed the connection, or conn's deadline
// passed — and returns what it read with that error: for tests that count what a door answered
// to requests written back to back.
func ExchangeUpTo(conn net.Conn, req string, n int) ([]Response, error) {
	if _, err := io.WriteString(conn, CRLF(req)); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	var out []Response
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, Response{Status: resp.StatusCode, Reason: resp.Header.Get("X-Fleet-Reason"), Header: resp.Header, Body: string(body)})
	}
	return out, nil
}

// Fold folds a header name as SPEC S3 says (lower case, every non-alphanumeric to '-'), written
// out again here so that tests do not trust the folding they test.
func Fold(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// HasFolded reports whether h holds a header whose folded name is that of name.
func HasFolded(h http.Header, name string) bool {
	f := Fold(name)
	for k := range h {
		if Fold(k) == f {
			return true
		}
	}
	return false
}

// FoldedValues returns the values of every header in h whose folded name is that of name.
func FoldedValues(h http.Header, name string) []string {
	var out []string
	f := Fold(name)
	for k, v := range h {
		if Fold(k) == f {
			out = append(out, v...)
		}
	}
	return out
}

// FreeLoopbackAddr returns a 127.0.0.1 address whose port nothing listened on a moment ago (it
// listens on port 0 and closes), for a test that must name its server's address in advance.
func FreeLoopbackAddr(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// SwitchingHead is the head of the 101 a WebSocket server answers a handshake whose
// Sec-WebSocket-Key is key with (RFC 6455 §4.2.2): a test console's switch, which a hop checks.
func SwitchingHead(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n"
}
