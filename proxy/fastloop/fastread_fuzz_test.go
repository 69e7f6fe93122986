package fastloop

// The fast exchange reads a console's answer itself only when fastAnswer admits its raw head, and
// that is safe only if it then makes of those bytes exactly what http.ReadResponse makes of them:
// the same status, header, length and connection fate, and the same body bytes read from the
// connection — no more, no fewer, or the next answer on a kept connection would be read from the
// wrong place. FuzzFastAnswer holds answerReader to ReadResponse on the same bytes, and the head
// it passes on from the answer's own lines (writeCallerHead) to the one the map path writes.

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// fastAnswerSeeds are answer heads (some with a body and what follows) of every kind fastAnswer
// judges: the ones it admits and, one by one, the ways an answer leaves the plain kind.
var fastAnswerSeeds = []string{
	// Answers consoles send.
	"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Mon, 30 Nov 2026 18:00:00 GMT\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", // the next answer behind
	"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
	"HTTP/1.1 302 Found\r\nLocation: /c/app/login\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200\r\nContent-Length: 2\r\nconnection: Keep-Alive\r\n\r\nok",
	"HTTP/1.1 599 Whatever\r\ncontent-length: 1\r\nPragma: no-cache\r\nX-Tab:\tv\t\r\nX-Empty:\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",     // cut short
	"HTTP/1.1 200 OK\r\nContent-Length: 0007\r\n\r\n1234567", // leading zeros
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: caf\xc3\xa9\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Big: " + strings.Repeat("b", 9000) + "\r\n\r\nabc", // over the buffer
	// Framing.
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTrailer: X-T\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\n\r\nuntil close",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close, X-Secret\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\nConnection: close\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: clo\u017fe\r\n\r\nabc", // ſ folds to s, but not in ASCII
	// Status lines.
	"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200\tOK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 -20 OK\r\nContent-Length: 0\r\n\r\n",
	// Lines.
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n X-Folded: yes\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: a\rb\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX A: b\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: a\x00b\r\n\r\n",
}

func FuzzFastAnswer(f *testing.F) {
	for _, s := range fastAnswerSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, toHead bool) {
		n := headEnd(b)
		if n == 0 {
			return
		}
		length, closes, ok := fastAnswer(string(b[:n]))
		if !ok {
			return
		}
		out := &http.Request{Method: http.MethodGet}
		if toHead {
			out.Method = http.MethodHead
		}

		rd := bytes.NewReader(b)
		br := bufio.NewReader(rd)
		want, err := http.ReadResponse(br, out)
		if err != nil {
			t.Fatalf("fastAnswer admits %q; ReadResponse: %v", b[:n], err)
		}
		if read := int(rd.Size()) - rd.Len() - br.Buffered(); read != n {
			t.Fatalf("fastAnswer admits %q (%d bytes); ReadResponse read %d", b[:n], n, read)
		}
		switch {
		case want.StatusCode < 200 || want.StatusCode > 599 || want.StatusCode == 204 || want.StatusCode == 304:
			t.Fatalf("fastAnswer admits %q: status %d", b[:n], want.StatusCode)
		case want.TransferEncoding != nil || len(want.Trailer) != 0 || len(want.Header["Content-Length"]) != 1:
			t.Fatalf("fastAnswer admits %q: TransferEncoding %q, Trailer %v, Content-Length %q", b[:n],
				want.TransferEncoding, want.Trailer, want.Header["Content-Length"])
		}

		br2 := bufio.NewReaderSize(bytes.NewReader(b), fastReadBuffer) // as an upConn's
		head, err := peekHead(br2)
		if err == nil && head == nil && n > br2.Size() {
			return // too large for the buffer: readAnswer leaves it to ReadResponse
		}
		if err != nil || string(head) != string(b[:n]) {
			t.Fatalf("peekHead(%q) = %q, %v", b, head, err)
		}
		br2.Discard(n)
		var ar answerReader
		defer ar.release()
		got := ar.read(string(head), length, closes, br2, out)
		switch {
		case got.StatusCode != want.StatusCode || got.Status != want.Status || got.Proto != want.Proto ||
			got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor:
			t.Fatalf("read %q: %q %q, ReadResponse %q %q", b[:n], got.Proto, got.Status, want.Proto, want.Status)
		case got.Header != nil:
			t.Fatalf("read %q: a header map %q (its lines are passed on as they came)", b[:n], got.Header)
		case got.ContentLength != want.ContentLength || got.Close != want.Close || got.Request != out ||
			got.TransferEncoding != nil || got.Trailer != nil:
			t.Fatalf("read %q: ContentLength %d Close %v, ReadResponse %d %v", b[:n], got.ContentLength, got.Close,
				want.ContentLength, want.Close)
		}
		checkCallerHead(t, b[:n], &ar, want)
		gotBody, gotErr := readSmall(got.Body)
		wantBody, wantErr := readSmall(want.Body)
		if gotBody != wantBody || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("read %q: body %q (%v), ReadResponse %q (%v)", b, gotBody, gotErr, wantBody, wantErr)
		}
		if gotErr == nil { // what follows the answer is where the next one is read from
			gotRest, _ := io.ReadAll(br2)
			wantRest, _ := io.ReadAll(br)
			if string(gotRest) != string(wantRest) {
				t.Fatalf("read %q: after the answer %q, ReadResponse %q", b, gotRest, wantRest)
			}
		}
	})
}

// readSmall reads r to its end in small reads, as a stream is passed on.
func readSmall(r io.Reader) (string, error) {
	var sb strings.Builder
	p := make([]byte, 3)
	for {
		n, err := r.Read(p)
		sb.Write(p[:n])
		if err == io.EOF {
			return sb.String(), nil
		}
		if err != nil {
			return sb.String(), err
		}
	}
}
