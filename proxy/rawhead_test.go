package proxy

// The fast exchange writes both of its heads straight from the lines fastHead and fastAnswer
// admitted (rawhead.go). That is safe only if it writes what the map path writes for the same
// bytes: for the console, what net/http's Request.Write makes of ReadRequest's request once
// ReverseProxy's steps ran on its header — no hop-by-hop header, none that the caller's
// Connection names, every identity header gone (S4), the assertion set (S6: assertOnto); for the
// caller, what writeAnswerHead makes of
// ReadResponse's answer — no hop-by-hop header, none of fleet's cookies (R9), no origin-wide
// header. FuzzFastHead and FuzzFastAnswer check both on every head they admit, through these.

import (
	"bufio"
	"bytes"
	"maps"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// rawHeadTargets are the Targets the console heads are written for: an ordinary one, and one
// whose values are unusual but plain as they stand (inner spaces, UTF-8, an empty Host, an IPv6
// console, a path with a space, % and é).
var rawHeadTargets = []Target{
	{ConsoleID: "app", Addr: "127.0.0.1:9001", Path: "/static/main.js", Login: "alice@example.com",
		Token: "tok-123", ClientIP: "100.64.0.7", Host: "box.tail1234.ts.net", Proto: "https"},
	{ConsoleID: "a-b", Addr: "[::1]:9001", Path: "/a b/%/é", Login: "Bob O'Neil <bob@exämple.com>",
		Token: "t k", ClientIP: "fd7a:115c:a1e0::1", Host: "", Proto: "http"},
}

// unwritableTargets are rawHeadTargets[0] with one of the hop's values that a header cannot
// carry as it is: a control byte (CR, LF, NUL, DEL), or a space or tab at either end, which every
// parser trims. net/http's Header.Write would clean each up (CR and LF made spaces, the ends
// trimmed) and assert a value other than the one given; writeConsoleHead writes none of them.
var unwritableTargets = func() []Target {
	var ts []Target
	add := func(change func(*Target)) {
		t := rawHeadTargets[0]
		change(&t)
		ts = append(ts, t)
	}
	for _, v := range []string{" bob\r\nX-Injected: 1 ", "alice@example.com\r\n", "\nalice@example.com",
		"mallory@example.com\r\nX-Phase-Console-Fleet-Login: alice@example.com", " alice@example.com",
		"alice@example.com\t", "a\tb", "a\x00b", "a\x7fb", "a\x1bb", "a\rb"} {
		add(func(t *Target) { t.Login = v })
	}
	add(func(t *Target) { t.Token = "t\nk" })
	add(func(t *Target) { t.Token = "tok " })
	add(func(t *Target) { t.ClientIP = "100.64.0.7\r\nX-Forwarded-For: 1.2.3.4" })
	add(func(t *Target) { t.Host = "box\r.example" })
	add(func(t *Target) { t.Proto = "https\x00" })
	add(func(t *Target) { t.ConsoleID = "app\n" })
	add(func(t *Target) { t.Addr = "127.0.0.1:9001\r\nX: y" })
	return ts
}()

// checkConsoleHead: the console's head written from head's lines (writeConsoleHead) is the one
// the map path writes for want, ReadRequest's reading of head, for every rawHeadTargets; for
// every unwritableTargets, writeConsoleHead fails having written nothing.
func checkConsoleHead(t *testing.T, head []byte, want *http.Request) {
	t.Helper()
	_, lines, _ := strings.Cut(string(head), "\r\n")
	u := url.URL{Path: "/x", RawQuery: want.URL.RawQuery}
	for _, target := range unwritableTargets {
		var got bytes.Buffer
		w := bufio.NewWriterSize(&got, 16) // anything written would be flushed through
		if err := writeConsoleHead(w, want.Method, u.RequestURI(), lines, want.Close, &target); err == nil {
			t.Fatalf("writeConsoleHead(%q) for %+v: no error", head, target)
		}
		if got.Len() != 0 || w.Buffered() != 0 {
			t.Fatalf("writeConsoleHead(%q) for %+v failed having written %q", head, target, got.Bytes())
		}
	}
	for _, target := range rawHeadTargets {
		u := url.URL{Path: target.Path, RawQuery: want.URL.RawQuery}
		var got bytes.Buffer
		w := bufio.NewWriter(&got)
		if err := writeConsoleHead(w, want.Method, u.RequestURI(), lines, want.Close, &target); err != nil {
			t.Fatalf("writeConsoleHead(%q): %v", head, err)
		}
		w.Flush()

		// The map path, as ReverseProxy takes it: the hop-by-hop headers and those the
		// caller's Connection names gone, assertOnto (Rewrite's), no User-Agent of net/http's own.
		h := want.Header.Clone()
		removeHopByHop(h)
		assertOnto(h, &target)
		if _, ok := h["User-Agent"]; !ok {
			h["User-Agent"] = []string{""}
		}
		out := &http.Request{Method: want.Method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: h, Host: target.Addr}
		var ref bytes.Buffer
		if err := out.Write(&ref); err != nil {
			t.Fatalf("Request.Write for %q: %v", head, err)
		}

		g, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(got.Bytes())))
		if err != nil {
			t.Fatalf("head %q: wrote %q, which does not read: %v", head, got.Bytes(), err)
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(ref.Bytes())))
		if err != nil {
			t.Fatalf("head %q: Request.Write wrote %q, which does not read: %v", head, ref.Bytes(), err)
		}
		if headEnd(got.Bytes()) != got.Len() {
			t.Fatalf("head %q: wrote %q, not one whole head", head, got.Bytes())
		}
		switch {
		case g.Method != r.Method || g.RequestURI != r.RequestURI || g.Host != r.Host || g.Close || g.ContentLength != 0:
			t.Fatalf("head %q: wrote %q\nRequest.Write %q", head, got.Bytes(), ref.Bytes())
		case !maps.EqualFunc(g.Header, r.Header, slices.Equal):
			t.Fatalf("head %q: wrote header\n%q\nthe map path\n%q", head, g.Header, r.Header)
		}
	}
}

// checkCallerHead: the caller's head written from an admitted answer's lines (writeCallerHead)
// is the one writeAnswerHead writes for want, ReadResponse's reading of the same bytes, to a
// caller that keeps its connection and to one that closes it.
func checkCallerHead(t *testing.T, head []byte, ar *answerReader, want *http.Response) {
	t.Helper()
	for _, closes := range []bool{false, true} {
		r := &http.Request{Method: want.Request.Method, Close: closes}
		var got, ref bytes.Buffer
		w := bufio.NewWriter(&got)
		writeCallerHead(w, ar.res.StatusCode, ar.lines, r)
		w.Flush()
		res := *want
		res.Header = want.Header.Clone()
		w = bufio.NewWriter(&ref)
		if writeAnswerHead(w, &res, r, true) {
			t.Fatalf("answer %q: the map path would re-frame it", head)
		}
		w.Flush()

		if headEnd(got.Bytes()) != got.Len() {
			t.Fatalf("answer %q: wrote %q, not one whole head", head, got.Bytes())
		}
		gs, gh := readHeadForTest(t, got.Bytes())
		rs, rh := readHeadForTest(t, ref.Bytes())
		if _, ok := want.Header["Date"]; !ok { // each made its own: the same second or the next
			if len(gh["Date"]) != 1 || len(rh["Date"]) != 1 {
				t.Fatalf("answer %q: Date %q, the map path %q", head, gh["Date"], rh["Date"])
			}
			delete(gh, "Date")
			delete(rh, "Date")
		}
		if gs != rs || !maps.EqualFunc(gh, rh, slices.Equal) {
			t.Fatalf("answer %q: wrote %q %q\nthe map path %q %q", head, gs, gh, rs, rh)
		}
	}
}

// readHeadForTest reads a head's first line and its header lines.
func readHeadForTest(t *testing.T, b []byte) (string, http.Header) {
	t.Helper()
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	first, err := tp.ReadLine()
	if err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return first, http.Header(h)
}

// TestRawHeadsDropWhatTheMapPathDrops_S4_S6: the identity, hop-by-hop and origin-wide lines a
// console or caller sends, in any spelling, are not in the heads written from raw lines, and the
// assertion is — spelled out, beside the fuzzers' comparison with the map path.
func TestRawHeadsDropWhatTheMapPathDrops_S4_S6(t *testing.T) {
	lines := "host: evil.example\r\nuser-agent: ua/1\r\nUser-Agent: second\r\nx-forwarded-for: 6.6.6.6\r\n" +
		"TAILSCALE-USER-LOGIN: mallory@example.com\r\nAuthorization: Basic eA==\r\nForwarded: for=x\r\n" +
		"x-real-ip: 1.2.3.4\r\nConnection: close\r\nClose: x\r\nProxy-Authenticate: Basic\r\naccept: */*\r\n" +
		"Pragma: no-cache\r\n\r\n"
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	target := rawHeadTargets[0]
	if err := writeConsoleHead(w, "GET", "/static/main.js?v=1", lines, true, &target); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want := "GET /static/main.js?v=1 HTTP/1.1\r\nHost: 127.0.0.1:9001\r\nUser-Agent: ua/1\r\nAccept: */*\r\n" +
		"Pragma: no-cache\r\nCache-Control: no-cache\r\nX-Forwarded-For: 100.64.0.7\r\n" +
		"X-Forwarded-Host: box.tail1234.ts.net\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Prefix: /c/app\r\n" +
		"X-Phase-Console-Fleet: tok-123\r\nX-Phase-Console-Fleet-Login: alice@example.com\r\n\r\n"
	if b.String() != want {
		t.Errorf("console head\n%q\nwant\n%q", b.String(), want)
	}

	answer := "content-type: text/html\r\nconnection: close\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\n" +
		"set-cookie: __HOST-Fleet-device=x; Path=/\r\nSet-Cookie: theme=dark\r\nService-Worker-Allowed: /\r\n" +
		"clear-site-data: \"*\"\r\nDate: Mon, 30 Nov 2026 18:00:00 GMT\r\nContent-Length: 5\r\n\r\n"
	b.Reset()
	w.Reset(&b)
	writeCallerHead(w, 200, answer, &http.Request{Method: "GET", Close: true})
	w.Flush()
	want = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nSet-Cookie: theme=dark\r\n" +
		"Date: Mon, 30 Nov 2026 18:00:00 GMT\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
	if b.String() != want {
		t.Errorf("caller head\n%q\nwant\n%q", b.String(), want)
	}
}

// TestConsoleHeadHopValuesNeverCleaned_S6: a value of the hop's own that a header cannot carry as
// it is (unwritableTargets: CR, LF, NUL, ESC, DEL, a space or tab at either end) is never written
// cleaned up, as net/http's Header.Write would write it ("alice@example.com\r\n" as
// "alice@example.com"): writeConsoleHead fails (errUnwritable, which the exchange answers 500
// internal, sending nothing) before it writes a byte — even for a head of caller lines longer
// than the console connection's 4 KiB writer, which would otherwise have sent part of it.
func TestConsoleHeadHopValuesNeverCleaned_S6(t *testing.T) {
	lines := "Accept: */*\r\nX-Long: " + strings.Repeat("a", 6000) + "\r\n\r\n"
	for _, target := range unwritableTargets {
		var got bytes.Buffer
		w := bufio.NewWriterSize(&got, 4<<10)
		err := writeConsoleHead(w, "GET", "/x", lines, false, &target)
		if err != errUnwritable || got.Len() != 0 || w.Buffered() != 0 {
			t.Errorf("%+v: error %v, wrote %d bytes (%d buffered); want errUnwritable and nothing", target, err,
				got.Len(), w.Buffered())
		}
	}
	target := rawHeadTargets[0]
	var got bytes.Buffer
	w := bufio.NewWriter(&got)
	if err := writeConsoleHead(w, "GET", "/x", lines, false, &target); err != nil {
		t.Fatalf("an ordinary target: %v", err)
	}
}
