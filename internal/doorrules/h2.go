package doorrules

// The HTTP/2 rows of the table: the same rules (S3, S4, S6, S7, S9, S12, and a door's Host
// admission, R5 on the reach door) for a request that arrives as an HTTP/2 header block over TLS.
// The frames are written here with x/net's Framer and HPACK encoder, so that a row can send what
// no well-behaved client library would: pseudo-headers out of order or twice, upper-case names,
// fields that HTTP/2 forbids, an assertion in the trailers.
//
// Go's HTTP/2 server refuses a malformed block before any handler runs — a stream error
// (RST_STREAM), a connection error (GOAWAY), or its own 400 for a connection-specific field
// (RFC 9113 §8.2.2), which carries no X-Fleet-Reason. Such a row passes only if nothing reached
// the console: what the table proves is that no spelling of the request gets past both.

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// An H2Door is one fleet door that speaks HTTP/2 over TLS, as RunH2 needs it.
type H2Door interface {
	// DialH2 opens a TLS connection to the door that negotiated ALPN "h2", sending serverName
	// as its SNI, or none when serverName is "".
	DialH2(t *testing.T, serverName string) *tls.Conn
	// Authority is the door's own admitted authority, "host:port".
	Authority() string
	// Credential is the header field a row adds so that the door admits its caller (a paired
	// device's cookie, say); name is lower case, as HTTP/2 writes names.
	Credential() (name, value string)
	// Login is the login the door asserts onward for that caller.
	Login() string
	// Before is called before each row (a door with a failure limiter lets its window pass, so
	// that no row is held back by another's failures).
	Before()
	// Received is how many requests console Console has received, and the last one's path and
	// header as it saw them.
	Received() (n int, path string, header http.Header)
}

// An H2Row is one HTTP/2 request and what every door must answer.
type H2Row struct {
	Name  string // cites the rule: "S7 h2 :path hooks"
	Class string // the advisory or bug class the row comes from
	SNI   string // the TLS server name the row dials with; "" sends none

	// Fields is the request's header block, pseudo-headers included, in order and written as
	// they are (any case, duplicates, any order). In names and values, {authority}, {host} and
	// {port} stand for the door's authority and its parts. The door's credential goes where
	// the field CredentialHere stands, else after the last field.
	Fields []hpack.HeaderField
	// Continuation splits the block in two: a HEADERS frame and a CONTINUATION frame.
	Continuation bool
	Data         string              // a DATA frame after the block, if not empty
	Trailers     []hpack.HeaderField // a trailer block ending the stream, if not empty

	// The answer: Status and X-Fleet-Reason ("" for Go's own 400 to a malformed block), or
	// Reset: the stream or the connection refused (RST_STREAM, GOAWAY, or the connection ended).
	Status int
	Reason string
	Reset  bool

	Path   string   // forwarded: the path the console sees
	Absent []string // forwarded: header names (any S3 spelling) the console must not see
	Unseen []string // forwarded: text in no header name or value the console saw
	Seen   []string // forwarded: "Name: text", a header of the console's that holds text
}

// CredentialHere marks where in an H2Row's Fields the door's credential is written.
var CredentialHere = hpack.HeaderField{Name: "\x00credential"}

// The placeholders an H2Row's fields may hold.
const (
	authorityPH = "{authority}"
	hostPH      = "{host}"
	portPH      = "{port}"
)

// Classes the HTTP/2 rows come from, beside those of the HTTP/1.1 table.
const (
	classH2Path      = "HTTP/2 :path read differently by proxy and backend (the S7 forms in a pseudo-header)"
	classH2Malformed = "malformed HTTP/2 block (RFC 9113 §8.3): a proxy that accepts what the spec makes an error"
	classH2Authority = "Host confusion: HTTP/2 :authority vs host (RFC 9113 §8.3.1), DNS rebinding"
	classH2SNI       = "Host confusion: TLS SNI vs :authority (domain fronting)"
	classH2Spoof     = "header spoofing over HTTP/2: the caller writes the proxy's own assertion"
	classH2Trailer   = "request smuggling of a header as an HTTP/2 trailer (CWE-444 family)"
	classH2Identity  = "identity header spoofing through a trusted proxy (X-Forwarded-*, Forwarded, auth-proxy families)"
	classH2CRLF      = "HTTP/2 to HTTP/1.1 request splitting: CR, LF or NUL in a field (RFC 9113 §8.2.1)"
	classH2ConnSpec  = "HTTP/2 to HTTP/1.1 downgrade smuggling: a connection-specific field (RFC 9113 §8.2.2)"
	classH2Connect   = "tunnelling past the hop: CONNECT and extended CONNECT (RFC 8441)"
	classH2Trace     = "cross-site tracing (XST): TRACE would echo the assertion"
	classH2Origin    = "cross-site request forgery against an ambient identity, over HTTP/2"
	classH2Cookie    = "credential forwarded to a backend: HTTP/2 split cookie fields (RFC 9113 §8.2.3)"
)

func hf(name, value string) hpack.HeaderField { return hpack.HeaderField{Name: name, Value: value} }

// h2req is a request block: :method, :scheme https, the door's :authority, :path, then fields
// written "name: value".
func h2req(method, path string, fields ...string) []hpack.HeaderField {
	block := []hpack.HeaderField{hf(":method", method), hf(":scheme", "https"), hf(":authority", authorityPH), hf(":path", path)}
	return append(block, split(fields...)...)
}

func split(fields ...string) []hpack.HeaderField {
	var out []hpack.HeaderField
	for _, f := range fields {
		name, value, _ := strings.Cut(f, ":")
		out = append(out, hf(name, strings.TrimPrefix(value, " ")))
	}
	return out
}

func h2refused(name, class string, fields []hpack.HeaderField, status int, reason string) H2Row {
	return H2Row{Name: name, Class: class, Fields: fields, Status: status, Reason: reason}
}

func h2reset(name, class string, fields []hpack.HeaderField) H2Row {
	return H2Row{Name: name, Class: class, Fields: fields, Reset: true}
}

// h2go400 is Go's own 400 to a connection-specific field: the door never sees the request.
func h2go400(name string, fields []hpack.HeaderField) H2Row {
	return H2Row{Name: name, Class: classH2ConnSpec, Fields: fields, Status: http.StatusBadRequest}
}

func h2forwarded(name, class string, fields []hpack.HeaderField, path string, absent ...string) H2Row {
	return H2Row{Name: name, Class: class, Fields: fields, Status: http.StatusOK, Path: path, Absent: absent}
}

// H2Rows is the HTTP/2 table, every row independent of the others.
func H2Rows() []H2Row {
	get := func(path string, fields ...string) []hpack.HeaderField { return h2req("GET", path, fields...) }
	x := c + "/x"
	rows := []H2Row{
		// S7: the :path forms of the HTTP/1.1 table, and those only HTTP/2 can write.
		h2refused("S7 h2 :path hooks", classH2Path, get(c+"/hooks"), 403, "hooks"),
		h2refused("S7 h2 :path HoOkS", classH2Path, get(c+"/HoOkS"), 403, "hooks"),
		h2refused("S7 h2 :path %68ooks", classH2Path, get(c+"/%68ooks"), 403, "hooks"),
		h2refused("S7 h2 :path Kelvin sign encoded", classH2Path, get(c+"/hoo%E2%84%AAs"), 403, "hooks"),
		h2refused("S7 h2 :path upper-case id", classH2Path, get("/C/ALPHA/hooks"), 403, "hooks"),
		h2refused("S7 h2 :path hooks + foreign origin", classH2Path, get(c+"/hooks", "origin: https://evil.example"), 403, "hooks"),
		{Name: "S7 h2 :path hooks, POST with a body", Class: classH2Path, Data: "{}",
			Fields: h2req("POST", c+"/hooks/permission-request", "content-type: application/json"), Status: 403, Reason: "hooks"},
		h2refused("S7 h2 :path ..", classH2Path, get(c+"/x/../hooks"), 400, "bad-path"),
		h2refused("S7 h2 :path %2F", classH2Path, get(c+"/a%2Fb"), 400, "bad-path"),
		h2refused("S7 h2 :path //", classH2Path, get(c+"//hooks"), 400, "bad-path"),
		h2refused("S7 h2 :path ;", classH2Path, get(c+"/hooks;x"), 400, "bad-path"),
		h2refused("S7 h2 :path %00", classH2Path, get(c+"/x%00"), 400, "bad-path"),
		h2refused("S7 h2 :path overlong UTF-8", classH2Path, get(c+"/%C0%AE"), 400, "bad-path"),
		h2refused("S7 h2 :path double encoding %2568ooks", classH2Path, get(c+"/%2568ooks"), 400, "bad-path"),
		h2refused("S7 h2 :path #", classH2Path, get(c+"/x#y"), 400, "bad-path"),
		h2refused("S7 h2 :path raw space", classH2Path, get(c+"/a b"), 400, "bad-path"),
		// An absolute :path is no console path: the door's own pages answer, not a console.
		h2refused("S7 h2 :path absolute, another host", classH2Path, get("https://evil.example"+x), 404, "not-found"),
		h2refused("S7 h2 :path absolute, the door's host", classH2Path, get("https://"+authorityPH+c+"/hooks"), 404, "not-found"),
		h2refused("S7 h2 :path *", classH2Path, get("*"), 404, "not-found"),
		h2reset("S7 h2 empty :path", classH2Malformed, get("")),
		h2reset("S7 h2 :path without leading slash", classH2Malformed, get("c/alpha/x")),
		h2reset("S7 h2 two :path", classH2Malformed, append(get(x), hf(":path", c+"/hooks"))),
		h2reset("S7 h2 :path after a regular field", classH2Malformed, []hpack.HeaderField{
			hf(":method", "GET"), hf(":scheme", "https"), hf(":authority", authorityPH), hf("accept", "*/*"), hf(":path", x)}),
		h2reset("S7 h2 no :path", classH2Malformed, []hpack.HeaderField{
			hf(":method", "GET"), hf(":scheme", "https"), hf(":authority", authorityPH)}),
		h2forwarded("S7 h2 :path encoded, forwarded as judged", classH2Path, get(c+"/a%20b/%C3%A4"), "/a b/\u00e4"),
		h2forwarded("S7 h2 :path the console's root", classH2Path, get(c+"/"), "/"),

		// R5: the door's own Host admission reads :authority, and host only in its absence.
		h2refused("R5 h2 :authority evil.example", classH2Authority, h2block(":authority", "evil.example", x), 421, "host"),
		{Name: "R5 h2 :authority the door's, host evil.example", Class: classH2Authority,
			Fields: get(x, "host: evil.example"), Status: 200, Path: "/x", Unseen: []string{"evil.example"}},
		h2forwarded("R5 h2 no :authority, host the door's", classH2Authority, noAuthority(x, "host: "+authorityPH), "/x"),
		h2refused("R5 h2 no :authority, host evil.example", classH2Authority, noAuthority(x, "host: evil.example"), 421, "host"),
		h2refused("R5 h2 neither :authority nor host", classH2Authority, noAuthority(x), 421, "host"),
		h2refused("R5 h2 :authority with a trailing dot", classH2Authority, h2block(":authority", hostPH+".:"+portPH, x), 421, "host"),
		h2refused("R5 h2 :authority another port", classH2Authority, h2block(":authority", hostPH+":1", x), 421, "host"),
		h2refused("R5 h2 :authority as a name", classH2Authority, h2block(":authority", "localhost:"+portPH, x), 421, "host"),
		h2reset("R5 h2 :authority with userinfo", classH2Malformed, h2block(":authority", "x@"+authorityPH, x)),
		h2reset("R5 h2 two :authority", classH2Malformed, append(h2block(":authority", "evil.example", x), hf(":authority", authorityPH))),
		h2reset("R5 h2 :scheme other than http(s)", classH2Malformed, h2block(":scheme", "ftp", x)),
		{Name: "R5 h2 SNI evil.example, :authority the door's", Class: classH2SNI, SNI: "evil.example",
			Fields: get(x), Status: 421, Reason: "host"},
		// net/http gives an HTTP/2 request its connection's TLS state whatever :scheme says, so
		// the SNI check and the scheme of X-Forwarded-Proto hold for :scheme http too.
		{Name: "R5 h2 :scheme http over TLS", Class: classH2SNI, Fields: h2block(":scheme", "http", x),
			Status: 200, Path: "/x", Seen: []string{"X-Forwarded-Proto: https"}},
		{Name: "R5 h2 SNI evil.example, :scheme http", Class: classH2SNI, SNI: "evil.example",
			Fields: h2block(":scheme", "http", x), Status: 421, Reason: "host"},

		// S3: an assertion in the block, in any spelling HTTP/2 can carry, or in its trailers.
		h2refused("S3 h2 x-phase-console-fleet-login", classH2Spoof, get(x, "x-phase-console-fleet-login: mallory"), 400, "assertion-sent"),
		h2refused("S3 h2 x-phase-console-fleet empty", classH2Spoof, get(x, "x-phase-console-fleet:"), 400, "assertion-sent"),
		h2refused("S3 h2 _ spelling", classH2Spoof, get(x, "x_phase_console_fleet_login: mallory"), 400, "assertion-sent"),
		h2refused("S3 h2 . and ~ spelling", classH2Spoof, get(x, "x.phase~console-fleet: x"), 400, "assertion-sent"),
		h2refused("S3 h2 duplicated", classH2Spoof, get(x, "x-phase-console-fleet: a", "x-phase-console-fleet: b"), 400, "assertion-sent"),
		h2refused("S3 h2 on a hooks path", classH2Spoof, get(c+"/hooks", "x-phase-console-fleet: x"), 400, "assertion-sent"),
		h2refused("S3 h2 never-indexed field", classH2Spoof, append(get(x),
			hpack.HeaderField{Name: "x-phase-console-fleet-login", Value: "mallory", Sensitive: true}), 400, "assertion-sent"),
		{Name: "S3 h2 in a CONTINUATION frame", Class: classH2Spoof, Continuation: true,
			Fields: get(x, "accept: */*", "x-phase-console-fleet-login: mallory"), Status: 400, Reason: "assertion-sent"},
		// HTTP/2 field names are lower case; an upper-case one makes the block malformed.
		h2reset("S3 h2 upper-case name", classH2Malformed, get(x, "X-Phase-Console-Fleet-Login: mallory")),
		// A field that would split the request when written as HTTP/1.1 on the hop.
		h2reset("S3 h2 CRLF in a field value", classH2CRLF, get(x, "accept: a\r\nx-phase-console-fleet: x")),
		h2reset("S3 h2 CRLF in a field name", classH2CRLF, append(get(x), hf("accept\r\nx-phase-console-fleet", "x"))),
		h2reset("S7 h2 CRLF in :path", classH2CRLF, get(x+" HTTP/1.1\r\nx-phase-console-fleet: x\r\nfoo: ")),
		h2reset("S3 h2 NUL in a field value", classH2CRLF, get(x, "accept: a\x00b")),
		{Name: "S3 h2 declared in trailer", Class: classH2Trailer, Fields: h2req("POST", x, "trailer: x-phase-console-fleet-login"),
			Data: "a", Trailers: split("x-phase-console-fleet-login: mallory"), Status: 400, Reason: "assertion-sent"},
		// Trailers that reach the door after it judged the block are never forwarded (S3, S4).
		{Name: "S3 h2 in trailers, undeclared", Class: classH2Trailer, Fields: h2req("POST", x),
			Data: "a", Trailers: split("x-phase-console-fleet-login: mallory"), Status: 200, Path: "/x"},
		{Name: "S3 h2 in trailers, another name declared", Class: classH2Trailer, Fields: h2req("POST", x, "trailer: x-checksum"),
			Data: "a", Trailers: split("x-checksum: 1", "x-phase-console-fleet-login: mallory"), Status: 200, Path: "/x", Absent: []string{"X-Checksum"}},
		h2go400("S3 h2 named in connection", get(x, "connection: x-phase-console-fleet-login")),

		// S4: forwarded without what the caller claimed.
		h2forwarded("S4 h2 tailscale-user-login", classH2Identity, get(x, "tailscale-user-login: mallory@evil.example"), "/x", "Tailscale-User-Login"),
		h2forwarded("S4 h2 tailscale_user_login spelled", classH2Identity, get(x, "tailscale_user_login: mallory@evil.example"), "/x", "Tailscale-User-Login"),
		{Name: "S4 h2 x-forwarded-for", Class: classH2Identity, Fields: get(x, "x-forwarded-for: 1.2.3.4", "x-forwarded-host: evil.example"),
			Status: 200, Path: "/x", Unseen: []string{"1.2.3.4"}},
		h2forwarded("S4 h2 forwarded", classH2Identity, get(x, "forwarded: for=1.2.3.4;host=evil.example"), "/x", "Forwarded"),
		{Name: "S4 h2 x-forwarded-proto and -prefix", Class: classH2Identity,
			Fields: get(x, "x-forwarded-proto: http", "x-forwarded-prefix: /c/other"),
			Status: 200, Path: "/x", Unseen: []string{"/c/other"}, Seen: []string{"X-Forwarded-Proto: https"}},
		h2forwarded("S4 h2 authorization", classH2Identity, get(x, "authorization: Bearer stolen"), "/x", "Authorization"),

		// S6, S9: no tunnel, no method that echoes, no HTTP/1.1 framing smuggled in a field.
		h2refused("S6 h2 CONNECT", classH2Connect, []hpack.HeaderField{hf(":method", "CONNECT"), hf(":authority", authorityPH)}, 404, "not-found"),
		h2reset("S6 h2 CONNECT with a :path", classH2Connect, h2req("CONNECT", x)),
		h2reset("S6 h2 extended CONNECT websocket", classH2Connect, append(h2req("CONNECT", c+"/ws"), hf(":protocol", "websocket"))),
		h2refused("S6 h2 TRACE", classH2Trace, h2req("TRACE", x), 405, "method"),
		h2refused("S6 h2 :method trace", classH2Trace, h2req("trace", x), 405, "method"),
		h2refused("S6 h2 TRACE to hooks", classH2Path, h2req("TRACE", c+"/hooks"), 403, "hooks"),
		h2go400("S9 h2 connection: upgrade", get(x, "connection: upgrade")),
		h2go400("S9 h2 upgrade: websocket", get(c+"/ws", "upgrade: websocket", "sec-websocket-version: 13", "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==")),
		h2go400("S9 h2 upgrade: h2c", get(x, "upgrade: h2c", "http2-settings: AAMAAABkAARAAAAAAAIAAAAA")),
		{Name: "S9 h2 transfer-encoding: chunked", Class: classH2ConnSpec, Fields: h2req("POST", x, "transfer-encoding: chunked"),
			Data: "0\r\n\r\n", Status: 400},
		h2go400("S9 h2 keep-alive", get(x, "keep-alive: timeout=5")),
		h2go400("S9 h2 proxy-connection", get(x, "proxy-connection: keep-alive")),
		h2go400("S9 h2 te: gzip", get(x, "te: gzip")),
		h2forwarded("S9 h2 te: trailers", classH2ConnSpec, get(x, "te: trailers"), "/x"),

		// S12: an Origin that is not the door's own, over HTTP/2 too.
		h2refused("S12 h2 origin evil.example", classH2Origin, get(x, "origin: https://evil.example"), 403, "cross-origin"),
		h2refused("S12 h2 origin null", classH2Origin, get(x, "origin: null"), 403, "cross-origin"),
		h2refused("S12 h2 own origin and another", classH2Origin, get(x, "origin: https://"+authorityPH, "origin: https://evil.example"), 403, "cross-origin"),
		h2refused("S12 h2 POST", classH2Origin, h2req("POST", x, "origin: https://evil.example"), 403, "cross-origin"),
		h2forwarded("S12 h2 own origin", classH2Origin, get(x, "origin: https://"+authorityPH), "/x"),

		// R9: the credential never reaches a console, however the cookie fields are split.
		{Name: "R9 h2 cookie split across fields", Class: classH2Cookie,
			Fields: append(append(get(x, "cookie: a=1"), CredentialHere), split("cookie: b=2")...),
			Status: 200, Path: "/x", Seen: []string{"Cookie: a=1", "Cookie: b=2"}},
	}
	return rows
}

// h2block is a GET of path with one pseudo-header's value replaced.
func h2block(pseudo, value, path string) []hpack.HeaderField {
	block := h2req("GET", path)
	for i := range block {
		if block[i].Name == pseudo {
			block[i].Value = value
		}
	}
	return block
}

// noAuthority is a GET of path without :authority, then fields.
func noAuthority(path string, fields ...string) []hpack.HeaderField {
	return append([]hpack.HeaderField{hf(":method", "GET"), hf(":scheme", "https"), hf(":path", path)}, split(fields...)...)
}

// RunH2 sends every row of H2Rows to d, each on a new connection, and checks its answer: a
// refusal's status and reason (or the stream or connection refused) with nothing reaching the
// console; a forward reaching it once, at the path judged, asserted as d.Login() alone, with the
// door's own X-Forwarded-Host and X-Forwarded-Prefix, and none of the row's Absent headers, nor
// the credential, nor anything the row wrote as a login or a host.
func RunH2(t *testing.T, d H2Door) {
	for _, row := range H2Rows() {
		t.Run(row.Name, func(t *testing.T) {
			if row.Class == "" {
				t.Errorf("row %q names no advisory or bug class", row.Name)
			}
			d.Before()
			credName, credValue := d.Credential()
			fields := expand(row.Fields, d.Authority(), hf(credName, credValue))
			before, _, _ := d.Received()
			trailers := expand(row.Trailers, d.Authority(), hpack.HeaderField{})
			got := exchangeH2(t, d.DialH2(t, row.SNI), fields, row.Continuation, row.Data, trailers)
			after, path, h := d.Received()
			t.Logf("answer: %d %q%s", got.status, got.reason, got.reset)

			switch {
			case row.Reset && got.reset == "":
				t.Errorf("got %d %q, want the stream or connection refused", got.status, got.reason)
			case !row.Reset && (got.status != row.Status || got.reason != row.Reason):
				t.Errorf("got %d %q%s, want %d %q", got.status, got.reason, got.reset, row.Status, row.Reason)
			}
			if row.Reset || row.Status != http.StatusOK {
				if after != before {
					t.Errorf("the console saw %d request(s) (last %q); a refused request must never be forwarded", after-before, path)
				}
				return
			}
			if after != before+1 {
				t.Fatalf("the console saw %d request(s), want 1", after-before)
			}
			if path != row.Path {
				t.Errorf("the console saw path %q, want %q", path, row.Path)
			}
			if got := values(h, "X-Phase-Console-Fleet-Login"); len(got) != 1 || got[0] != d.Login() {
				t.Errorf("the console saw X-Phase-Console-Fleet-Login %q, want the door's one %q", got, d.Login())
			}
			if got := values(h, "X-Phase-Console-Fleet"); len(got) != 1 || got[0] == "" || got[0] == "mallory" {
				t.Errorf("the console saw X-Phase-Console-Fleet %q, want the hop's one value", got)
			}
			if got := values(h, "X-Forwarded-Host"); len(got) != 1 || got[0] != d.Authority() {
				t.Errorf("the console saw X-Forwarded-Host %q, want %q", got, d.Authority())
			}
			if got := values(h, "X-Forwarded-Prefix"); len(got) != 1 || got[0] != c {
				t.Errorf("the console saw X-Forwarded-Prefix %q, want %q", got, c)
			}
			for _, name := range row.Absent {
				if got := values(h, name); len(got) != 0 {
					t.Errorf("the console saw %s %q", name, got)
				}
			}
			// R9 and S4: the credential, a claimed login or host, on no header at all.
			unseen := []string{credValue, "mallory", "evil.example"}
			if _, secret, ok := strings.Cut(credValue, "="); ok && secret != "" {
				unseen = append(unseen, secret) // a cookie's value, under any name
			}
			for _, s := range append(unseen, row.Unseen...) {
				for name, vv := range h {
					for _, v := range vv {
						if strings.Contains(strings.ToLower(name+": "+v), strings.ToLower(s)) {
							t.Errorf("the console saw %q in %s", s, name)
						}
					}
				}
			}
			for _, want := range row.Seen {
				name, text, _ := strings.Cut(want, ": ")
				if got := values(h, name); !strings.Contains(strings.Join(got, "; "), text) {
					t.Errorf("the console saw %s %q, want it to hold %q", name, got, text)
				}
			}
		})
	}
}

// expand writes the door's authority into fields and the credential where CredentialHere
// stands, else (cred.Name not empty) after the last field.
func expand(fields []hpack.HeaderField, authority string, cred hpack.HeaderField) []hpack.HeaderField {
	host, port, _ := net.SplitHostPort(authority)
	r := strings.NewReplacer(authorityPH, authority, hostPH, host, portPH, port)
	var out []hpack.HeaderField
	placed := false
	for _, f := range fields {
		if f == CredentialHere {
			out, placed = append(out, cred), true
			continue
		}
		out = append(out, hpack.HeaderField{Name: r.Replace(f.Name), Value: r.Replace(f.Value), Sensitive: f.Sensitive})
	}
	if !placed && cred.Name != "" {
		out = append(out, cred)
	}
	return out
}

// h2answer is what came back for stream 1: a response's status and X-Fleet-Reason, or reset
// naming the stream or connection error.
type h2answer struct {
	status int
	reason string
	reset  string
}

// exchangeH2 sends one request on conn as stream 1 — the header block (split in a HEADERS and a
// CONTINUATION frame if cont), then data and trailers if any — and reads until its response head, a RST_STREAM for it, a GOAWAY or the end of the
// connection. It closes conn.
func exchangeH2(t *testing.T, conn *tls.Conn, fields []hpack.HeaderField, cont bool, data string, trailers []hpack.HeaderField) h2answer {
	t.Helper()
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("the connection negotiated %q, not h2", p)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20

	// Written at once, before anything is read, and a write error left to the answer: a server
	// that refused the block may close the connection before reading the rest.
	var out, block bytes.Buffer
	enc := hpack.NewEncoder(&block) // one per connection, as the server keeps one decoder
	encode := func(fields []hpack.HeaderField) []byte {
		block.Reset()
		for _, f := range fields {
			enc.WriteField(f)
		}
		return bytes.Clone(block.Bytes())
	}
	wf := http2.NewFramer(&out, nil)
	out.WriteString(http2.ClientPreface)
	wf.WriteSettings()
	head := encode(fields)
	var rest []byte
	if cont {
		head, rest = head[:len(head)/2], head[len(head)/2:]
	}
	wf.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head,
		EndStream: data == "" && len(trailers) == 0, EndHeaders: !cont})
	if cont {
		wf.WriteContinuation(1, true, rest)
	}
	if data != "" {
		wf.WriteData(1, len(trailers) == 0, []byte(data))
	}
	if len(trailers) != 0 {
		wf.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: encode(trailers), EndStream: true, EndHeaders: true})
	}
	conn.Write(out.Bytes())

	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("reading the answer: %v", err)
			}
			return h2answer{reset: fmt.Sprintf(" (connection ended: %v)", err)}
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			status, _ := strconv.Atoi(f.PseudoValue("status"))
			if status >= 100 && status < 200 {
				continue
			}
			var reason string
			for _, h := range f.RegularFields() {
				if h.Name == "x-fleet-reason" {
					reason = h.Value
				}
			}
			return h2answer{status: status, reason: reason}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return h2answer{reset: " (RST_STREAM " + f.ErrCode.String() + ")"}
			}
		case *http2.GoAwayFrame:
			if f.ErrCode == http2.ErrCodeNo && f.LastStreamID >= 1 {
				// A graceful close (a door closes the connection after some refusals, as on
				// HTTP/1.1): the stream is still answered.
				continue
			}
			return h2answer{reset: " (GOAWAY " + f.ErrCode.String() + ")"}
		}
	}
}
