package fastloop

// The fast exchange writes both of its heads straight from the lines fastHead and fastAnswer
// admitted (rawhead.go). That is safe only if it writes what the map path writes for the same
// bytes: for the console, what net/http's Request.Write makes of ReadRequest's request once
// ReverseProxy's steps ran on its header — no hop-by-hop header, none that the caller's
// Connection names, every identity header gone (S4), the assertion set (S6: package proxy's
// assertOnto); for the caller, what writeAnswerHead makes of
// ReadResponse's answer — no hop-by-hop header, none of fleet's cookies (R9), no origin-wide
// header. FuzzFastHead and FuzzFastAnswer check both on every head they admit, through these.

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/phase-console/fleet/proxy"
)

// A judgedCase is a request that a Door judges to forward, and what the door's own rules say
// about it: the verified caller, the token, the console's address.
type judgedCase struct {
	uri, host, proto string // proto: X-Forwarded-Proto from Serve, "" for none
	login, ip, token string
	id, addr         string
}

// rawHeadCases are the verdicts the console heads are written for: an ordinary one, and one
// whose values are unusual but plain as they stand (inner spaces, UTF-8, an empty Host, an IPv6
// caller and console, a path with a space and é, plain http).
var rawHeadCases = []judgedCase{
	{uri: "/c/app/static/main.js", host: "box.tail1234.ts.net", proto: "https", login: "alice@example.com",
		ip: "100.64.0.7", token: "tok-123", id: "app", addr: "127.0.0.1:9001"},
	{uri: "/c/a-b/a%20b/%C3%A9", host: "", login: "Bob O'Neil <bob@exämple.com>", ip: "fd7a:115c:a1e0::1",
		token: "t k", id: "a-b", addr: "[::1]:9001"},
}

// A judgedTarget is a Door's verdict to forward, with its Target.
type judgedTarget struct {
	j proxy.Judged
	t proxy.Target
}

// judge has a Door judge c's request (a GET), as the fast loop has it judged (Door.Judge).
func judge(c judgedCase) (proxy.Judged, bool) {
	door := &proxy.Door{
		Hop:       proxy.NewHop(slog.New(slog.DiscardHandler), nil, nil),
		Log:       slog.New(slog.DiscardHandler),
		Host:      proxy.HostAdmitterFunc(func(*http.Request) *proxy.Refusal { return nil }),
		Callers:   fixedCaller{c.login, c.ip},
		Consoles:  fixedConsole{c.id, c.addr},
		Token:     fixedToken(c.token),
		FromServe: true,
	}
	u, err := url.ParseRequestURI(c.uri)
	if err != nil {
		panic(err) // the cases are this file's own
	}
	r := &http.Request{Method: "GET", URL: u, RequestURI: c.uri, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: c.host, Header: http.Header{}}
	if c.proto != "" {
		r.Header.Set("X-Forwarded-Proto", c.proto)
	}
	var j proxy.Judged
	door.Judge(r, &j)
	_, ok := j.Target()
	return j, ok
}

type fixedCaller struct{ login, ip string }

func (c fixedCaller) VerifyCaller(*http.Request, string) (proxy.Caller, *proxy.Refusal) {
	return proxy.Caller{Login: c.login, IP: netip.MustParseAddr(c.ip)}, nil
}

type fixedConsole struct{ id, addr string }

func (c fixedConsole) Lookup(id string) (string, bool) { return c.addr, id == c.id }

type fixedToken string

func (t fixedToken) Current() (string, error) { return string(t), nil }

// rawHeadVerdicts are rawHeadCases judged.
var rawHeadVerdicts = sync.OnceValue(func() []judgedTarget {
	var out []judgedTarget
	for _, c := range rawHeadCases {
		j, ok := judge(c)
		if !ok {
			panic(fmt.Sprintf("the Door does not forward %+v", c))
		}
		t, _ := j.Target()
		out = append(out, judgedTarget{j, t})
	}
	return out
})

// unwritable are what writeConsoleHead must write nothing at all for, each with a request-target:
// a verdict that does not forward (the zero Judged, and one whose token a header cannot carry as
// it is, which the Door leaves to ServeHTTP: Hop.Forward refuses it), a console address that
// cannot stand in a head as it is, and a request-target with a control byte.
var unwritable = sync.OnceValue(func() []struct {
	j   proxy.Judged
	uri string
} {
	ok := rawHeadVerdicts()[0]
	badToken, badAddr := rawHeadCases[0], rawHeadCases[0]
	badToken.token = "tok\r\nX-Injected: 1"
	badAddr.addr = "127.0.0.1:9001\r\nX: y"
	notForwarded, _ := judge(badToken)
	toBadAddr, forwarded := judge(badAddr)
	if !forwarded {
		panic("the Door does not forward to an address it does not check")
	}
	return []struct {
		j   proxy.Judged
		uri string
	}{
		{proxy.Judged{}, "/x"},
		{notForwarded, "/x"},
		{toBadAddr, "/x"},
		{ok.j, "/x\r\nX: y"},
		{ok.j, "/x\x00"},
	}
})

// checkConsoleHead: the console's head written from head's lines (writeConsoleHead) is the one
// the map path writes for want, ReadRequest's reading of head, for every rawHeadVerdicts; for
// every unwritable case, writeConsoleHead fails having written nothing.
func checkConsoleHead(t *testing.T, head []byte, want *http.Request) {
	t.Helper()
	_, lines, _ := strings.Cut(string(head), "\r\n")
	u := url.URL{Path: "/x", RawQuery: want.URL.RawQuery}
	for _, c := range unwritable() {
		var got bytes.Buffer
		w := bufio.NewWriterSize(&got, 16) // anything written would be flushed through
		uri := c.uri
		if uri == "/x" {
			uri = u.RequestURI()
		}
		if err := writeConsoleHead(w, want.Method, uri, lines, want.Close, &c.j); err == nil {
			t.Fatalf("writeConsoleHead(%q) for %+v: no error", head, c)
		}
		if got.Len() != 0 || w.Buffered() != 0 {
			t.Fatalf("writeConsoleHead(%q) for %+v failed having written %q", head, c, got.Bytes())
		}
	}
	for _, v := range rawHeadVerdicts() {
		target := v.t
		u := url.URL{Path: target.Path, RawQuery: want.URL.RawQuery}
		var got bytes.Buffer
		w := bufio.NewWriter(&got)
		if err := writeConsoleHead(w, want.Method, u.RequestURI(), lines, want.Close, &v.j); err != nil {
			t.Fatalf("writeConsoleHead(%q): %v", head, err)
		}
		w.Flush()

		// The map path, as ReverseProxy takes it: the hop-by-hop headers and those the
		// caller's Connection names gone, then Rewrite's assertOnto (package proxy's): every
		// identity header gone (S4) and the hop's own set (S6; written out here again, not
		// taken from proxy, so that the test does not share a mistake with it), and no
		// User-Agent of net/http's own.
		h := want.Header.Clone()
		removeHopByHop(h)
		proxy.ScrubIdentity(h)
		delete(h, "Expect")
		h["X-Forwarded-For"] = []string{target.ClientIP}
		h["X-Forwarded-Host"] = []string{target.Host}
		h["X-Forwarded-Proto"] = []string{target.Proto}
		h["X-Forwarded-Prefix"] = []string{"/c/" + target.ConsoleID}
		h["X-Phase-Console-Fleet"] = []string{target.Token}
		h["X-Phase-Console-Fleet-Login"] = []string{target.Login}
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
	v := rawHeadVerdicts()[0]
	if err := writeConsoleHead(w, "GET", "/static/main.js?v=1", lines, true, &v.j); err != nil {
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

// TestConsoleHeadHopValuesNeverCleaned_S6: writeConsoleHead writes a console's head only for a
// verdict that forwards (Judged.Target: the Door's, which refuses a hop value that a header
// cannot carry as it is — CR, LF, NUL, ESC, DEL, a space or tab at either end — and never cleans
// one up) with an address and a target that stand in a head as they are; for anything else it
// fails (proxy.ErrUnwritable, which the Hop answers 500 internal, sending nothing) before it
// writes a byte — even for a head of caller lines longer than the console connection's 4 KiB
// writer, which would otherwise have sent part of it.
func TestConsoleHeadHopValuesNeverCleaned_S6(t *testing.T) {
	lines := "Accept: */*\r\nX-Long: " + strings.Repeat("a", 6000) + "\r\n\r\n"
	for _, c := range unwritable() {
		var got bytes.Buffer
		w := bufio.NewWriterSize(&got, 4<<10)
		err := writeConsoleHead(w, "GET", c.uri, lines, false, &c.j)
		if err != proxy.ErrUnwritable || got.Len() != 0 || w.Buffered() != 0 {
			t.Errorf("%+v: error %v, wrote %d bytes (%d buffered); want ErrUnwritable and nothing", c, err,
				got.Len(), w.Buffered())
		}
	}
	v := rawHeadVerdicts()[0]
	var got bytes.Buffer
	w := bufio.NewWriter(&got)
	if err := writeConsoleHead(w, "GET", "/x", lines, false, &v.j); err != nil {
		t.Fatalf("an ordinary verdict: %v", err)
	}
}
