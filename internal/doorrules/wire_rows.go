package doorrules

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/phase-console/fleet/internal/rawhttp"
)

var (
	hostRefused = Answer{http.StatusMisdirectedRequest, "host"}
	badRequest  = Answer{http.StatusBadRequest, ""} // net/http's own answer to what it will not parse
	ok          = Answer{http.StatusOK, ""}
)

// WireRows is the wire table, every row independent of the others.
func WireRows() []WireRow {
	return slicesConcat(hostRows(), originRows(), framingRows(), exhaustionRows(), limitRows(), forwardRows(), credentialRows())
}

func slicesConcat(parts ...[]WireRow) []WireRow {
	var out []WireRow
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// one is a row of one exchange: raw (built for the door) then the sentinel, its answers and
// exactly what the console saw.
func one(name, class string, raw func(d WireDoor) string, want []Answer, paths ...string) WireRow {
	return WireRow{Name: name, Class: class, Run: func(t *testing.T, d WireDoor) {
		n := len(d.Paths())
		got, _ := exchange(t, d, raw(d))
		wantAnswers(t, got, want...)
		wantSeen(t, d, n, paths...)
	}}
}

// ---- Host (S10 on the loopback door, R5 on the reach door) ------------------------------------

const hostClass = "Host header confusion: a name the door does not own, in a form parsers read differently (DNS rebinding, cache poisoning, CWE-644)"

func hostRow(name string, host func(own string) string, want Answer) WireRow {
	return one(name, hostClass, func(d WireDoor) string {
		return withHost(d.Request("GET", c+"/x"), host(d.Host()))
	}, []Answer{want})
}

// spellingRow is a Host that spells one of the door's own names another way: the loopback door
// admits what DNS and IP read as its own names (a trailing dot, any loopback address, SPEC S10),
// the reach door only its listen address exactly (R5).
func spellingRow(name string, host func(own string) string) WireRow {
	return WireRow{Name: name, Class: hostClass, Run: func(t *testing.T, d WireDoor) {
		n := len(d.Paths())
		got, _ := exchange(t, d, withHost(d.Request("GET", c+"/x"), host(d.Host())))
		if d.Kind() == Loopback {
			wantAnswers(t, got, ok)
			wantSeen(t, d, n, "/x")
			return
		}
		wantAnswers(t, got, hostRefused)
		wantSeen(t, d, n)
	}}
}

func hostRows() []WireRow {
	name := func(f func(name, port string) string) func(string) string {
		return func(own string) string { return f(splitHost(own)) }
	}
	rows := []WireRow{
		hostRow("S10 R5 another name", func(string) string { return "evil.example" }, hostRefused),
		spellingRow("S10 R5 trailing dot", name(func(n, p string) string { return n + "." + p })),
		hostRow("S10 R5 a list of hosts", func(own string) string { return own + ",evil.example" }, hostRefused),
		hostRow("S10 R5 junk after the port", name(func(n, p string) string { return n + ":1,evil.example" }), hostRefused),
		hostRow("S10 R5 userinfo", func(own string) string { return "x@" + own }, badRequest),
		hostRow("S10 R5 decimal IPv4", name(func(_, p string) string { return "2130706433" + p }), hostRefused),
		hostRow("S10 R5 octal IPv4", name(func(_, p string) string { return "0177.0.0.1" + p }), hostRefused),
		hostRow("S10 R5 hex IPv4", name(func(_, p string) string { return "0x7f.0.0.1" + p }), hostRefused),
		hostRow("S10 R5 short IPv4", name(func(_, p string) string { return "127.1" + p }), hostRefused),
		spellingRow("S10 R5 IPv4-mapped IPv6", name(func(_, p string) string { return "[::ffff:127.0.0.1]" + p })),
		hostRow("S10 R5 IPv6 zone", name(func(_, p string) string { return "[::1%25lo]" + p }), hostRefused),
		hostRow("S10 R5 empty Host", func(string) string { return "" }, hostRefused),
		hostRow("S10 R5 no Host", func(string) string { return "-" }, badRequest),
		one("S10 R5 two Host lines", hostClass, func(d WireDoor) string {
			return d.Request("GET", c+"/x", "Host: evil.example")
		}, []Answer{badRequest}),
		one("S10 R5 absolute-form naming another host", hostClass, func(d WireDoor) string {
			return strings.Replace(d.Request("GET", c+"/x"), " "+c+"/x ", " http://evil.example"+c+"/x ", 1)
		}, []Answer{hostRefused}),
		one("S10 R5 absolute-form naming the door", hostClass, func(d WireDoor) string {
			return strings.Replace(d.Request("GET", c+"/x"), " "+c+"/x ", " https://"+d.Host()+c+"/x ", 1)
		}, []Answer{{http.StatusNotFound, "not-found"}}), // the target is no /c/ path: nothing is routed
		{Name: "R5 another port", Class: hostClass, Door: Reach, Run: func(t *testing.T, d WireDoor) {
			n := len(d.Paths())
			h, _ := splitHost(d.Host())
			got, _ := exchange(t, d, withHost(d.Request("GET", c+"/x"), h+":1"))
			wantAnswers(t, got, hostRefused)
			wantSeen(t, d, n)
		}},
		{Name: "R5 SNI another name", Class: "SNI/Host mismatch: TLS names one host, HTTP another (domain fronting)", Door: Reach,
			Run: func(t *testing.T, d WireDoor) {
				n := len(d.Paths())
				got, _ := exchangeOn(t, d, mustLimited(t, d).DialSNI(t, "evil.example"), d.Request("GET", c+"/x"))
				wantAnswers(t, got, hostRefused)
				wantSeen(t, d, n)
			}},
		{Name: "R5 SNI naming the address", Class: "SNI/Host mismatch: TLS names one host, HTTP another (domain fronting)", Door: Reach,
			Run: func(t *testing.T, d WireDoor) {
				n := len(d.Paths())
				h, _ := splitHost(d.Host())
				got, sentinel := exchangeOn(t, d, mustLimited(t, d).DialSNI(t, h), d.Request("GET", c+"/x"))
				wantAnswers(t, got, ok)
				wantSeen(t, d, n, "/x")
				if !sentinel {
					t.Error("the connection ended early")
				}
			}},
	}
	return rows
}

func mustLimited(t *testing.T, d WireDoor) LimitedDoor { return must[LimitedDoor](t, d) }

// must is d as the door a row needs: a row that names d's kind and needs what d is not fails, so
// that a door cannot drop a row by dropping a method.
func must[T any](t *testing.T, d WireDoor) T {
	t.Helper()
	v, ok := any(d).(T)
	if !ok {
		t.Fatalf("the %s door is not a %T", d.Kind(), (*T)(nil))
	}
	return v
}

// ---- Origins that look like the door's own (S12) ---------------------------------------------

const lookAlikeClass = "cross-site request forgery from an origin that looks like the door's own (suffix, scheme, port, userinfo, lists)"

// originRows are Origins built from the door's own, https://<Host>, each a different origin
// (RFC 6454), on a POST, a fetch and a WebSocket upgrade; and the door's own, forwarded.
func originRows() []WireRow {
	crossOrigin := Answer{http.StatusForbidden, "cross-origin"}
	lookAlikes := []struct {
		name   string
		origin func(own string) string
	}{
		{"a suffix", func(own string) string { n, p := splitHost(own); return "https://" + n + ".evil.example" + p }},
		{"a prefix", func(own string) string { return "https://evil" + own }},
		{"plain http", func(own string) string { return "http://" + own }},
		{"another port", func(own string) string { n, _ := splitHost(own); return "https://" + n + ":8443" }},
		{"userinfo", func(own string) string { return "https://" + own + "@evil.example" }},
		{"a path", func(own string) string { return "https://" + own + "/" }},
		{"a list", func(own string) string { return "https://" + own + " https://evil.example" }},
		{"a trailing dot", func(own string) string { n, p := splitHost(own); return "https://" + n + "." + p }},
	}
	var rows []WireRow
	for _, la := range lookAlikes {
		for _, kind := range []struct {
			name  string
			build func(d WireDoor, origin string) string
		}{
			{"POST", func(d WireDoor, o string) string {
				return d.Request("POST", c+"/x", "Origin: "+o, "Content-Type: text/plain", "Content-Length: 2") + "hi"
			}},
			{"fetch", func(d WireDoor, o string) string {
				return d.Request("GET", c+"/x", "Origin: "+o, "Sec-Fetch-Mode: cors", "Sec-Fetch-Site: cross-site")
			}},
			{"WebSocket", func(d WireDoor, o string) string {
				return d.Request("GET", c+"/ws", append([]string{"Origin: " + o}, ws...)...)
			}},
		} {
			rows = append(rows, one("S12 look-alike Origin, "+la.name+", "+kind.name, lookAlikeClass, func(d WireDoor) string {
				return kind.build(d, la.origin(d.Host()))
			}, []Answer{crossOrigin}))
		}
	}
	rows = append(rows, one("S12 the door's own Origin, fetch", lookAlikeClass, func(d WireDoor) string {
		return d.Request("GET", c+"/x", "Origin: https://"+d.Host(), "Sec-Fetch-Mode: cors", "Sec-Fetch-Site: same-origin")
	}, []Answer{ok}, "/x"))
	rows = append(rows, WireRow{Name: "S6 Connection names the hop's headers on an upgrade", Class: "hop-by-hop header abuse on the upgrade path: Connection naming a header the proxy relies on",
		Run: func(t *testing.T, d WireDoor) {
			n := len(d.Paths())
			conn := d.Dial(t)
			defer conn.Close()
			up := append([]string{"Connection: Upgrade, X-Forwarded-For, X-Forwarded-Prefix, X-Forwarded-Host"}, ws[1:]...)
			if a := answerOne(t, conn, d.Request("GET", c+"/ws", up...)); a.Status != http.StatusSwitchingProtocols {
				t.Fatalf("the upgrade: %v, want 101", a)
			}
			wantSeen(t, d, n, "/ws")
			_, _, h := d.Received()
			for _, name := range []string{"X-Forwarded-For", "X-Forwarded-Prefix", "X-Forwarded-Host", "X-Phase-Console-Fleet", "X-Phase-Console-Fleet-Login"} {
				if got := values(h, name); len(got) != 1 || got[0] == "" {
					t.Errorf("the console saw %s %q on the upgrade, want the hop's one value", name, got)
				}
			}
		}})
	return rows
}

// ---- framing: smuggling, pipelining, Expect (S3, S7) -----------------------------------------

const smugglingClass = "HTTP request smuggling: the door and the console frame the body differently (CWE-444)"

// hidden is a request to hooks carrying a forged assertion, hidden in a body: if it ever reaches
// the console, the door's judgement was bypassed.
func hidden(d WireDoor) string {
	return d.Request("POST", c+"/hooks/permission-request", "X-Phase-Console-Fleet-Login: mallory@evil.example", "Content-Length: 0")
}

func smuggle(name, body string, want []Answer, paths []string, extra ...string) WireRow {
	return one(name, smugglingClass, func(d WireDoor) string {
		return d.Request("POST", c+"/x", extra...) + body + hidden(d)
	}, want, paths...)
}

// brokenBody is a chunked body that breaks its own framing once the console has the request: the
// caller is answered 400 bad-body and its connection closed — the console is not down — and the
// request hidden behind it never reaches the console. (The console may see the broken request's
// head, aborted, at any time: its path is under /late/, which wantSeen leaves out.)
func brokenBody(name, body string) WireRow {
	return WireRow{Name: name, Class: smugglingClass, Run: func(t *testing.T, d WireDoor) {
		n := len(d.Paths())
		got, _ := exchange(t, d, d.Request("POST", c+"/late/body", "Transfer-Encoding: chunked")+body+hidden(d))
		wantAnswers(t, got, Answer{http.StatusBadRequest, "bad-body"})
		wantSeen(t, d, n)
	}}
}

func framingRows() []WireRow {
	hooks := Answer{http.StatusForbidden, "hooks"}
	sent := Answer{http.StatusBadRequest, "assertion-sent"}
	return []WireRow{
		smuggle("S7 CL.TE", "0\r\n\r\n", []Answer{ok, sent}, []string{"/x"}, "Content-Length: 5", "Transfer-Encoding: chunked"),
		smuggle("S7 TE.CL", "0\r\n\r\n", []Answer{ok, sent}, []string{"/x"}, "Transfer-Encoding: chunked", "Content-Length: 3"),
		smuggle("S7 TE chunked twice", "0\r\n\r\n", []Answer{{http.StatusNotImplemented, ""}}, nil, "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"),
		smuggle("S7 TE xchunked", "0\r\n\r\n", []Answer{{http.StatusNotImplemented, ""}}, nil, "Transfer-Encoding: xchunked"),
		smuggle("S7 TE chunked, identity", "0\r\n\r\n", []Answer{{http.StatusNotImplemented, ""}}, nil, "Transfer-Encoding: chunked, identity"),
		smuggle("S7 TE with a space before the colon", "0\r\n\r\n", []Answer{badRequest}, nil, "Transfer-Encoding : chunked"),
		smuggle("S7 TE obs-folded", "0\r\n\r\n", []Answer{ok, sent}, []string{"/x"}, "Transfer-Encoding:", " chunked"),
		smuggle("S7 two different Content-Lengths", "", []Answer{badRequest}, nil, "Content-Length: 0", "Content-Length: 60"),
		smuggle("S7 Content-Length with a sign", "abc", []Answer{badRequest}, nil, "Content-Length: +3"),
		brokenBody("S7 chunk extension hiding a header", "3;ext=\"x\r\nX-Phase-Console-Fleet: evil\"\r\nabc\r\n0\r\n\r\n"),
		brokenBody("S7 chunk size overflow", "10000000000000003\r\nabc\r\n0\r\n\r\n"),
		brokenBody("S9 chunk size not hex", "zz\r\nabc\r\n0\r\n\r\n"),
		smuggle("S7 bare LF in chunks", "3\nabc\n0\n\n", []Answer{ok, sent}, []string{"/x"}, "Transfer-Encoding: chunked"),
		one("S3 assertion in a chunked trailer, undeclared", smugglingClass, func(d WireDoor) string {
			return d.Request("POST", c+"/x", "Transfer-Encoding: chunked") + "3\r\nabc\r\n0\r\nX-Phase-Console-Fleet-Login: mallory\r\n\r\n"
		}, []Answer{ok}, "/x"),
		one("S7 pipelined requests judged one by one", "pipelining: a second request rides on the first's judgement", func(d WireDoor) string {
			return d.Request("GET", c+"/a") + d.Request("GET", c+"/hooks") + d.Request("GET", c+"/b", "X_Phase_Console_Fleet: x")
		}, []Answer{ok, hooks, sent}, "/a"),
		one("S3 nothing rides after a refusal", "pipelining: a second request rides on the first's judgement", func(d WireDoor) string {
			return d.Request("GET", c+"/a", "X-Phase-Console-Fleet: x") + d.Request("GET", c+"/b")
		}, []Answer{sent}),
		one("S3 Expect: 100-continue with a forged assertion", "Expect: 100-continue lets a body through before the request is judged", func(d WireDoor) string {
			return d.Request("POST", c+"/x", "Expect: 100-continue", "Content-Length: 5", "X-Phase-Console-Fleet-Login: x") + "hello"
		}, []Answer{sent}),
		one("S7 Expect: 100-continue to hooks", "Expect: 100-continue lets a body through before the request is judged", func(d WireDoor) string {
			return d.Request("POST", c+"/hooks/x", "Expect: 100-continue", "Content-Length: 5") + "hello"
		}, []Answer{hooks}),
		one("S9 Expect: 100-continue forwarded", "Expect: 100-continue lets a body through before the request is judged", func(d WireDoor) string {
			return d.Request("POST", c+"/x", "Expect: 100-continue", "Content-Length: 5") + "hello"
		}, []Answer{{http.StatusContinue, ""}, ok}, "/x"),
		one("S9 Expect: something else", "Expect: 100-continue lets a body through before the request is judged", func(d WireDoor) string {
			return d.Request("POST", c+"/x", "Expect: 102-processing", "Content-Length: 5") + "hello"
		}, []Answer{{http.StatusExpectationFailed, ""}}),
	}
}

// ---- exhaustion (S9) ----------------------------------------------------------------------------

const exhaustionClass = "resource exhaustion: a caller holds the door's connections or memory (CWE-400)"

// served checks that the door still answers a plain request while others hold it.
func served(t *testing.T, d WireDoor, path string) {
	t.Helper()
	n := len(d.Paths())
	got, _ := exchange(t, d, d.Request("GET", c+path))
	wantAnswers(t, got, ok)
	wantSeen(t, d, n, path)
}

// hold opens n connections and writes prefix on each; they stay open until the row ends.
func hold(t *testing.T, d WireDoor, n int, prefix func(i int) string) {
	t.Helper()
	for i := 0; i < n; i++ {
		conn := d.Dial(t)
		t.Cleanup(func() { conn.Close() })
		if p := prefix(i); p != "" {
			if _, err := conn.Write([]byte(p)); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
	}
}

func exhaustionRows() []WireRow {
	tooLarge := Answer{http.StatusRequestHeaderFieldsTooLarge, ""}
	return []WireRow{
		one("S9 one huge header", exhaustionClass, func(d WireDoor) string {
			return d.Request("GET", c+"/x", "X-Big: "+strings.Repeat("a", 70<<10))
		}, []Answer{tooLarge}),
		one("S9 many small headers over 64 KiB", exhaustionClass, func(d WireDoor) string {
			return d.Request("GET", c+"/x", manyHeaders(4000)...)
		}, []Answer{tooLarge}),
		one("S9 many small headers under 64 KiB", exhaustionClass, func(d WireDoor) string {
			return d.Request("GET", c+"/x", manyHeaders(1000)...)
		}, []Answer{ok}, "/x"),
		{Name: "S9 slowloris: heads held open starve no one", Class: exhaustionClass, Run: func(t *testing.T, d WireDoor) {
			n := len(d.Paths())
			hold(t, d, 100, func(int) string {
				head, _, _ := strings.Cut(d.Request("GET", c+"/held"), "\n\n")
				return strings.ReplaceAll(head, "\n", "\r\n") + "\r\nX-Slow: a"
			})
			served(t, d, "/after-slowloris")
			wantSeen(t, d, n, "/after-slowloris")
		}},
		{Name: "S9 stalled bodies starve no one", Class: exhaustionClass, Run: func(t *testing.T, d WireDoor) {
			n := len(d.Paths())
			hold(t, d, 50, func(int) string {
				return strings.ReplaceAll(d.Request("POST", c+"/late/stalled", "Content-Length: 1000"), "\n", "\r\n") + "only this"
			})
			served(t, d, "/after-stalled")
			wantSeen(t, d, n, "/after-stalled")
		}},
		{Name: "S9 connection flood: idle connections starve no one", Class: exhaustionClass, Run: func(t *testing.T, d WireDoor) {
			// Bare TCP: on the reach door not even a TLS handshake starts.
			for i := 0; i < 300; i++ {
				conn, err := net.Dial("tcp", d.Addr())
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				t.Cleanup(func() { conn.Close() })
			}
			served(t, d, "/after-flood")
		}},
	}
}

func manyHeaders(n int) []string {
	h := make([]string, n)
	for i := range h {
		h[i] = fmt.Sprintf("X-Many-%d: %s", i, strings.Repeat("v", 8))
	}
	return h
}

// ---- rate-limit evasion (R6) ------------------------------------------------------------------

const evasionClass = "rate-limit evasion: a caller picks the key it is counted under (CWE-307, CWE-348)"

// fail sends one failure (a stranger's request with a Host the door refuses) from src with extra
// header lines and returns the answer.
func fail(t *testing.T, l LimitedDoor, src netip.Addr, extra ...string) Answer {
	t.Helper()
	return from(t, l, src, withHost(l.Stranger("GET", c+"/x", extra...), "evil.example"))
}

// from sends req from src (the door's own peer when src is not valid) and returns its answer.
func from(t *testing.T, l LimitedDoor, src netip.Addr, req string) Answer {
	t.Helper()
	var conn net.Conn
	if src.IsValid() {
		conn = l.DialFrom(t, src)
	} else {
		conn = l.Dial(t)
	}
	got, _ := exchangeOn(t, l, conn, req)
	if len(got) == 0 {
		t.Fatalf("no answer")
	}
	return got[0]
}

const limitStatus = http.StatusTooManyRequests

// sourceLimit is R6's ten failures from one source.
const sourceLimit = 10

// limitRow sends sourceLimit failures from srcs(i), then one more from next, and wants it 429.
func limitRow(name string, srcs func(i int) netip.Addr, next netip.Addr, extra func(i int) []string) WireRow {
	return WireRow{Name: name, Class: evasionClass, Door: Reach, Run: func(t *testing.T, d WireDoor) {
		l := mustLimited(t, d)
		n := len(d.Paths())
		for i := 0; i < sourceLimit; i++ {
			if a := fail(t, l, srcs(i), extra(i)...); a != hostRefused {
				t.Fatalf("failure %d: %v, want %v", i+1, a, hostRefused)
			}
		}
		// The next request is an honest one (a bad Host is judged before the limit, R5 then R6).
		if a := from(t, l, next, l.Stranger("GET", c+"/x", extra(sourceLimit)...)); a != (Answer{limitStatus, "rate-limited"}) {
			t.Errorf("after %d failures: %v, want %d rate-limited", sourceLimit, a, limitStatus)
		}
		wantSeen(t, d, n)
	}}
}

func limitRows() []WireRow {
	none := func(int) []string { return nil }
	same := func(a netip.Addr) func(int) netip.Addr { return func(int) netip.Addr { return a } }
	v6 := func(i int) netip.Addr {
		return netip.MustParseAddr(fmt.Sprintf("2001:db8:5:6:%x::%x", i*4099+1, i+1)) // one /64, other interface ids
	}
	return []WireRow{
		limitRow("R6 forwarded headers do not pick the source", same(netip.Addr{}), netip.Addr{}, func(i int) []string {
			ip := fmt.Sprintf("198.51.100.%d", i+1)
			return []string{"X-Forwarded-For: " + ip, "X-Real-IP: " + ip, "Forwarded: for=" + ip, "True-Client-IP: " + ip, "CF-Connecting-IP: " + ip}
		}),
		limitRow("R6 a new source port each time", same(netip.MustParseAddr("127.0.0.2")), netip.MustParseAddr("127.0.0.2"), none),
		limitRow("R6 IPv6 rotation within a /64", v6, netip.MustParseAddr("2001:db8:5:6:ffff:ffff:ffff:fffe"), none),
		limitRow("R6 IPv4-mapped IPv6 is its IPv4 source", same(netip.MustParseAddr("192.0.2.7")), netip.MustParseAddr("::ffff:192.0.2.7"), none),
		limitRow("R6 an IPv4 source is its IPv4-mapped spelling", same(netip.MustParseAddr("::ffff:192.0.2.8")), netip.MustParseAddr("192.0.2.8"), none),
		{Name: "R6 another source is counted alone", Class: evasionClass, Door: Reach, Run: func(t *testing.T, d WireDoor) {
			// The control of the rows above: a limit that held everyone back would pass them.
			l := mustLimited(t, d)
			for i := 0; i < sourceLimit; i++ {
				fail(t, l, netip.MustParseAddr("127.0.0.3"), nil...)
			}
			n := len(d.Paths())
			for _, other := range []string{"127.0.0.4", "2001:db8:5:7::1", "::ffff:127.0.0.5"} {
				if a := from(t, l, netip.MustParseAddr(other), l.Stranger("GET", c+"/x")); a.Status == limitStatus {
					t.Errorf("a stranger from %s after another source's %d failures: %v, want not held back", other, sourceLimit, a)
				}
			}
			wantSeen(t, d, n)
		}},
		{Name: "R6 a paired device is not held back by the strangers of its source", Class: evasionClass, Door: Reach, Run: func(t *testing.T, d WireDoor) {
			// A household's /64: strangers beside the phone fail, the phone is still served.
			l := mustLimited(t, d)
			src := netip.MustParseAddr("2001:db8:5:8::1")
			for i := 0; i < 5*sourceLimit; i++ {
				fail(t, l, netip.MustParseAddr(fmt.Sprintf("2001:db8:5:8::%x", i+2)), nil...)
			}
			if a := from(t, l, src, l.Stranger("GET", c+"/x")); a != (Answer{limitStatus, "rate-limited"}) {
				t.Fatalf("a stranger of that /64: %v, want %d rate-limited", a, limitStatus)
			}
			n := len(d.Paths())
			if a := from(t, l, src, l.Request("GET", c+"/x")); a != ok {
				t.Errorf("the paired device of that /64: %v, want %v", a, ok)
			}
			wantSeen(t, d, n, "/x")
		}},
	}
}

// ---- tailscaled's own forwards (S5e) -----------------------------------------------------------

const forwardClass = "a trusted proxy's other forwards: tailscaled dials the door for peers it has not identified (Tailscale SSH -L, Serve --tcp)"

func forwardRows() []WireRow {
	forwardable := Answer{http.StatusUnauthorized, "tcp-forwardable"}
	return []WireRow{
		{Name: "S5e forwardable: refused", Class: forwardClass, Door: Loopback, Run: func(t *testing.T, d WireDoor) {
			f := mustForwardable(t, d)
			n := len(d.Paths())
			f.SetForwardable(t, true)
			defer f.SetForwardable(t, false)
			got, _ := exchange(t, d, d.Request("GET", c+"/x", "X-Forwarded-For: 100.64.0.1"))
			wantAnswers(t, got, forwardable)
			wantSeen(t, d, n)
		}},
		{Name: "S5e a connection opened while forwardable stays refused", Class: forwardClass, Door: Loopback, Run: func(t *testing.T, d WireDoor) {
			f := mustForwardable(t, d)
			n := len(d.Paths())
			f.SetForwardable(t, true)
			conn := d.Dial(t)
			first := answerOne(t, conn, d.Request("GET", c+"/a"))
			f.SetForwardable(t, false)
			got, _ := exchangeOn(t, d, conn, d.Request("GET", c+"/b"))
			wantAnswers(t, append([]Answer{first}, got...), forwardable)
			wantSeen(t, d, n)
			served(t, d, "/after-forward")
		}},
	}
}

func mustForwardable(t *testing.T, d WireDoor) ForwardableDoor { return must[ForwardableDoor](t, d) }

// answerOne writes req on conn and reads one answer, leaving conn open; the door must answer it
// without a body, so that nothing of the connection is left in a reader.
func answerOne(t *testing.T, conn net.Conn, req string) Answer {
	t.Helper()
	if _, err := io.WriteString(conn, rawhttp.CRLF(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(io.LimitReader(conn, 1<<20)), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return Answer{resp.StatusCode, resp.Header.Get("X-Fleet-Reason")}
}

// ---- secrets compared (S8 bearer, R9 device credential) ---------------------------------------

const timingClass = "secret comparison leaking by answer or timing (CWE-208): every wrong secret is answered as none at all, compared in constant time"

func credentialRows() []WireRow {
	wrong := []struct {
		name string
		f    func(s string) string
	}{
		{"first byte changed", func(s string) string { return flip(s, 0) }},
		{"last byte changed", func(s string) string { return flip(s, len(s)-1) }},
		{"one byte short", func(s string) string { return s[:len(s)-1] }},
		{"one byte more", func(s string) string { return s + "A" }},
		{"twice", func(s string) string { return s + s }},
		{"in upper case", strings.ToUpper},
	}
	var rows []WireRow
	for _, w := range wrong {
		rows = append(rows, WireRow{Name: "S8 R9 secret " + w.name, Class: timingClass, Run: func(t *testing.T, d WireDoor) {
			cd := must[CredentialDoor](t, d)
			secret := cd.Credential()
			bad := w.f(secret)
			if bad == secret {
				t.Skip("the secret has no case to change")
			}
			n := len(d.Paths())
			none, _ := exchange(t, d, cd.WithCredential(""))
			if l, ok := d.(LimitedDoor); ok {
				l.Forget()
			}
			got, _ := exchange(t, d, cd.WithCredential(bad))
			if len(none) != 1 || none[0].Status == http.StatusOK {
				t.Fatalf("no secret: %v, want one refusal", none)
			}
			wantAnswers(t, got, none...)
			wantSeen(t, d, n)
			right, _ := exchange(t, d, cd.WithCredential(secret))
			if len(right) != 1 || right[0].Status != http.StatusOK {
				t.Errorf("the right secret: %v, want 200", right)
			}
		}})
	}
	return rows
}

// flip changes the byte at i to another character of the same alphabet class.
func flip(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
