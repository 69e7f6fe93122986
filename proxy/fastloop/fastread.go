package fastloop

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/phase-console/fleet/contract"
)

// This file reads the heads that fastHead (a caller's request) and fastAnswer (a console's
// answer) admitted, into what http.ReadRequest and http.ReadResponse would have made of the same
// bytes — FuzzFastHead and FuzzFastAnswer hold them to exactly that. Both admit only heads whose
// every line they checked, so reading them is cutting strings; what they save over net/http's
// parsers is the allocations: a connection's request, header map and value slices are reused from
// one request to the next (nothing of a request outlives its exchange), and a head is one string.

// A requestReader reads the requests of one fast connection.
type requestReader struct {
	base   http.Request // empty but for the connection's context (setContext), copied into req
	req    http.Request
	url    url.URL // req's URL when readPlainTarget read it
	lines  string  // the header lines of req, as fastHead admitted them: writeConsoleHead's
	fields *fieldStore
}

// setContext makes ctx the context of every request read.
func (rr *requestReader) setContext(ctx context.Context) {
	rr.base = *new(http.Request).WithContext(ctx)
}

// read returns the request whose head fastHead admitted. It is valid until the next read.
func (rr *requestReader) read(head, remote string) (*http.Request, error) {
	line, rest, _ := strings.Cut(head, "\r\n")
	method, target, _ := strings.Cut(line, " ")
	target = target[:len(target)-len(" HTTP/1.1")]
	u := &rr.url
	if !readPlainTarget(target, u) {
		var err error
		u, err = url.ParseRequestURI(target) // as ReadRequest: fastHead made sure it cannot fail
		if err != nil {
			return nil, err
		}
	}
	if rr.fields == nil {
		rr.fields = fieldStores.Get().(*fieldStore)
	}
	h := rr.fields.read(rest)
	rr.lines = rest
	host := h["Host"][0] // fastHead: exactly one
	delete(h, "Host")    // as ReadRequest
	fixPragmaCacheControl(h)

	r := &rr.req
	*r = rr.base
	r.Method, r.URL, r.RequestURI, r.Host, r.RemoteAddr = method, u, target, host, remote
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.Header = h
	r.Close = httpguts.HeaderValuesContainsToken(h["Connection"], "close")
	r.Body = http.NoBody
	return r, nil
}

// readPlainTarget reads into u what url.ParseRequestURI makes of target (a request line's, that
// fastRequestLine admitted), when its path is of the plain kind nearly every path is: letters,
// digits and "-._~/" only, so that it is its own Path and has no RawPath. false: u is not set, and
// the target is for ParseRequestURI. FuzzFastHead holds it to ReadRequest's URL.
func readPlainTarget(target string, u *url.URL) bool {
	path, query, hasQuery := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		if !plainPathByte[path[i]] {
			return false
		}
	}
	// As url.parse: a lone "?" at the end is ForceQuery with no query; else all after the
	// first "?" is the query.
	force := hasQuery && query == ""
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: force}
	return true
}

// plainPathByte are the bytes a path may hold and still be its own Path, unescaped and escaped
// alike (url.URL.EscapedPath leaves them).
var plainPathByte = func() (t [256]bool) {
	for c := range t {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-._~/", byte(c)) >= 0
	}
	return t
}()

func (rr *requestReader) release() {
	rr.fields.release()
	*rr = requestReader{}
}

// A fieldStore is a head's header map and the array its values are cut from, kept from one head
// to the next and, in fieldStores, from one connection to the next.
type fieldStore struct {
	header http.Header
	values []string
}

var fieldStores = sync.Pool{New: func() any {
	return &fieldStore{header: make(http.Header, 16), values: make([]string, 0, 32)}
}}

// read reads the header lines of an admitted head into fs, emptied first.
func (fs *fieldStore) read(lines string) http.Header {
	fs.empty()
	fs.values = readFields(lines, fs.header, fs.values)
	return fs.header
}

func (fs *fieldStore) empty() {
	clear(fs.header)
	clear(fs.values) // lets the strings of the last head go
	fs.values = fs.values[:0]
}

// release puts fs back in fieldStores (nil: nothing to do).
func (fs *fieldStore) release() {
	if fs != nil {
		fs.empty()
		fieldStores.Put(fs)
	}
}

// readFields reads the header lines of an admitted head (each "name:value" ended by CRLF, up to
// the empty line) into h, as textproto's ReadMIMEHeader reads them: names made canonical, values
// trimmed of spaces and tabs, in order. Each value slice is cut from values' array with its
// capacity its length, so that appending to one never writes over another. It returns values.
func readFields(lines string, h http.Header, values []string) []string {
	for {
		line, rest, _ := strings.Cut(lines, "\r\n")
		if line == "" {
			return values
		}
		lines = rest
		name, value, _ := strings.Cut(line, ":")
		name = textproto.CanonicalMIMEHeaderKey(name)
		value = strings.Trim(value, " \t")
		if old, ok := h[name]; ok {
			h[name] = append(old, value)
			continue
		}
		values = append(values, value)
		n := len(values)
		h[name] = values[n-1 : n : n]
	}
}

// fixPragmaCacheControl is net/http's (RFC 9111 5.4): ReadRequest and ReadResponse treat
// "Pragma: no-cache" without a Cache-Control as "Cache-Control: no-cache".
func fixPragmaCacheControl(h http.Header) {
	if p := h["Pragma"]; len(p) > 0 && p[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
}

// fastAnswer reports whether head (a whole answer head, headEnd's) is of the plain kind that the
// fast exchange reads itself, and if so its Content-Length and whether its Connection says
// "close" (the one walk over its lines that reading it needs); anything else is read by
// http.ReadResponse as it came. It is the kind nearly every answer to a page load is:
//
//   - the status line is "HTTP/1.1 ", three digits from 200 to 599 but 204 and 304, then the end
//     of the line or a space and a reason (which is never passed on), ended by CRLF;
//   - header lines as fastHead's: CRLF, no obs-fold, names and values valid by net/http's rules;
//   - exactly one Content-Length, of 1 to 18 digits; no Transfer-Encoding and no Trailer; at most
//     one Connection, and only "keep-alive" or "close".
func fastAnswer(head string) (length int64, closes, ok bool) {
	line, rest, ok := cutLine(head)
	if !ok || len(line) < len("HTTP/1.1 200") || !strings.HasPrefix(line, "HTTP/1.1 ") ||
		len(line) > len("HTTP/1.1 200") && line[len("HTTP/1.1 200")] != ' ' {
		return 0, false, false
	}
	code := line[len("HTTP/1.1 "):len("HTTP/1.1 200")]
	if code[0] < '2' || code[0] > '5' || !isDigit(code[1]) || !isDigit(code[2]) ||
		code == "204" || code == "304" {
		return 0, false, false
	}
	lengths := 0
	closes, ok = fastFields(rest, func(name, value string) bool {
		switch {
		case contract.EqualFoldASCII(name, "Content-Length"):
			lengths++
			if len(value) == 0 || len(value) > 18 || strings.ContainsFunc(value, func(r rune) bool { return r < '0' || r > '9' }) {
				return false
			}
			length, _ = strconv.ParseInt(value, 10, 64) // 1 to 18 digits: it cannot fail
		case contract.EqualFoldASCII(name, "Transfer-Encoding"), contract.EqualFoldASCII(name, "Trailer"):
			return false
		}
		return true
	})
	if !ok || lengths != 1 {
		return 0, false, false
	}
	return length, closes, true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// An answerReader reads the answers of one fast connection's exchanges.
type answerReader struct {
	res   http.Response
	lines string // the header lines of res, as fastAnswer admitted them: writeCallerHead's
	body  lengthBody
	head  []byte // the last head kept (keep), reused from one answer to the next
}

// keep copies head into ar's own buffer and returns it as a string, valid until the next keep:
// an answer's head is done with before the next one is read (nothing of an exchange outlives it).
func (ar *answerReader) keep(head []byte) string {
	ar.head = append(ar.head[:0], head...)
	return unsafe.String(unsafe.SliceData(ar.head), len(ar.head))
}

// read returns the answer to out whose head fastAnswer admitted, with the length and the
// Connection: close it found there, read from br already; its body is read from br. Its Header is
// nil: its lines stay as they came (ar.lines), for writeCallerHead. It is valid until the next
// read.
func (ar *answerReader) read(head string, length int64, closes bool, br *bufio.Reader, out *http.Request) *http.Response {
	line, rest, _ := strings.Cut(head, "\r\n")
	code, _ := strconv.Atoi(line[len("HTTP/1.1 "):len("HTTP/1.1 200")])
	ar.lines = rest
	ar.res = http.Response{Status: line[len("HTTP/1.1 "):], StatusCode: code, Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, ContentLength: length, Close: closes, Request: out}
	if length == 0 || out.Method == http.MethodHead {
		ar.res.Body = http.NoBody
	} else {
		ar.body = lengthBody{br: br, left: length}
		ar.res.Body = &ar.body
	}
	return &ar.res
}

func (ar *answerReader) release() { *ar = answerReader{head: ar.head[:0]} }

// A lengthBody is an answer's body of a known length, read as net/http reads one: the last bytes
// come with io.EOF, and a body cut short is io.ErrUnexpectedEOF.
type lengthBody struct {
	br   *bufio.Reader
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		err = io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// peekHead waits until br holds a whole head (headEnd) and returns it, still unread; nil, with
// no error, when it does not fit br's buffer.
func peekHead(br *bufio.Reader) ([]byte, error) {
	if _, err := br.Peek(1); err != nil {
		return nil, err
	}
	for {
		buf, _ := br.Peek(br.Buffered())
		if n := headEnd(buf); n > 0 {
			return buf[:n], nil
		}
		if len(buf) == br.Size() {
			return nil, nil
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}
